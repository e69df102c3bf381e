// The Node binding's benchmarks, beside what a Node user would pick instead:
// `limiter` (RateLimiter), `p-throttle`, and a plain JS token bucket.
//
//   node --expose-gc bench.mjs            ROUNDS rounds (default 3), JSON out
//   node --expose-gc bench.mjs --smoke    a few hundred calls per case, checks
//                                         the answers, writes nothing
//
// Every round measures every case once, in this one process, so ratios
// within a round are same-run. A case's figure for a round is the median of
// BATCHES timed batches of N calls, N picked in the warm-up so a batch takes
// about BATCH_SECONDS. Run it through run.sh, which installs and builds.
import { createRequire } from 'node:module';
import { readFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import path from 'node:path';
import v8 from 'node:v8';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, '..', '..');
const bindingDir = path.join(repo, 'bindings', 'node');

const { Pacer } = require(bindingDir);
const { native, decodeDecision, reserveCode } = require(path.join(bindingDir, 'native.js'));
const { RateLimiter } = require('limiter');
const { default: pThrottle } = await import('p-throttle');

const SMOKE = process.argv.includes('--smoke');
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const BATCHES = 5;
const BATCH_SECONDS = 0.06;
const SMOKE_CALLS = 300;

if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error(`bench-node: ROUNDS must be a positive integer, got ${process.env.ROUNDS}`);

// ---------------------------------------------------------------- the cases' subjects

// One configuration for every bucket: 600 per minute (the pacer's maximum),
// burst 10. A clock that advances 1000 ms per call refills a whole token
// each call, so every call admits with no wait. Each timed batch starts a
// fresh bucket at clock 0, so clocks stay below 2^31 as a real
// `performance.now()` reading does (V8 keeps those as small integers;
// larger ones are boxed when they cross into a function that is not
// inlined). Batches are capped to fit.
const RATE_PER_MINUTE = 600;
const BURST = 10;
const STEP_MS = 1000;
const MAX_BATCH = Math.floor((2 ** 31 - 1) / STEP_MS) - 1;
const QUIET = { onNotice: () => {} };

/**
 * The plain token bucket a Node user might write instead: integer math in
 * 1/60000 of a token, so a token refills in 60000 / rate ms exactly.
 */
class JsBucket {
  constructor(ratePerMinute, burst, nowMs) {
    this.rate = ratePerMinute; // units per ms
    this.capacity = burst * 60000;
    this.units = this.capacity;
    this.lastMs = nowMs;
  }

  /** Takes one token at `nowMs` if there is one. */
  tryTake(nowMs) {
    if (nowMs > this.lastMs) {
      this.units = Math.min(this.capacity, this.units + (nowMs - this.lastMs) * this.rate);
      this.lastMs = nowMs;
    }
    if (this.units < 60000) return false;
    this.units -= 60000;
    return true;
  }
}

/** `await admit()` on the JS bucket, shaped like `Pacer.admit`: an async
 * function that reads its clock and, admitted at once, returns without a
 * timer (as the pacer does for a wait of 0). */
function jsBucketAdmitter(bucket, clock) {
  return async function admit() {
    const nowMs = clock();
    if (bucket.tryTake(nowMs)) return { kind: 'admitted', waitedMs: 0, queued: false };
    return { kind: 'refused', retryAfterSeconds: 1 };
  };
}

/** A pacer at `RATE_PER_MINUTE`/`BURST` drained at `nowMs`: its next reserve
 * at `nowMs` is refused. */
function drainedPacer(nowMs) {
  const pacer = new Pacer({ ratePerMinute: RATE_PER_MINUTE, burst: BURST, now: () => nowMs, ...QUIET });
  for (let i = 0; i < 1000 && pacer.reserve(nowMs).kind === 'admitted'; i++);
  return pacer;
}

// ---------------------------------------------------------------- cases
//
// Each case has its own loop (`run(n)`, not a shared loop calling a
// callback) so V8 compiles every loop for its one call site, and each loop
// keeps its results alive through a value it returns, so nothing is
// optimized away. `check()` runs in smoke mode and throws on a wrong answer.

function check(condition, what) {
  if (!condition) throw new Error(what);
}

const cases = [
  {
    id: 'floor_napi_noop',
    what: 'empty Node-API call made like the hot call (`floorNoop`): the crossing floor',
    make() {
      const noop = native.floorNoop;
      return {
        run(n) {
          let last;
          for (let i = 0; i < n; i++) last = noop(i);
          return last;
        },
        check() {
          check(noop() === undefined, 'floorNoop returned something');
        },
      };
    },
  },
  {
    id: 'native_reserve',
    what: 'the raw addon call `Pacer.reserve` makes: clock into `exchange[0]`, `reserveHot(handle)`, code from `exchange[1]`; admit path',
    make() {
      const { reserveHot, exchange } = native;
      const config = new native.NativeConfig(RATE_PER_MINUTE, BURST, 120000, 5, false);
      const fresh = () => new native.NativePacer(config, 0).handle();
      return {
        run(n) {
          const handle = fresh();
          let now = 0;
          let sum = 0;
          for (let i = 0; i < n; i++) {
            now += STEP_MS;
            exchange[0] = now;
            reserveHot(handle);
            sum += exchange[1];
          }
          return sum;
        },
        check() {
          const handle = fresh();
          for (let i = 1; i <= SMOKE_CALLS; i++) {
            const d = decodeDecision(reserveCode(handle, i * STEP_MS), 0);
            check(d.admitted && d.waitMs === 0 && d.debitUnits === 60000, `native reserve did not admit at once: ${JSON.stringify(d)}`);
          }
        },
      };
    },
  },
  {
    id: 'pacer_reserve',
    what: 'public `Pacer.reserve(nowMs)`, clock +1000 ms per call: admitted, result object and Ticket',
    make() {
      const fresh = () => new Pacer({ ratePerMinute: RATE_PER_MINUTE, burst: BURST, now: () => 0, ...QUIET });
      return {
        run(n) {
          const pacer = fresh();
          let now = 0;
          let last = null;
          let waited = 0;
          for (let i = 0; i < n; i++) {
            now += STEP_MS;
            last = pacer.reserve(now);
            waited += last.waitMs;
          }
          return waited === 0 ? last : null;
        },
        check() {
          const pacer = fresh();
          for (let i = 1; i <= SMOKE_CALLS; i++) {
            const d = pacer.reserve(i * STEP_MS);
            check(d.kind === 'admitted' && d.waitMs === 0 && d.path === 'paced' && d.ticket !== null,
              `Pacer.reserve did not admit at once: ${JSON.stringify(d)}`);
          }
        },
      };
    },
  },
  {
    id: 'pacer_reserve_refuse',
    what: 'public `Pacer.reserve(nowMs)` on a drained pacer at a fixed clock: refused',
    make() {
      const pacer = drainedPacer(1);
      return {
        run(n) {
          let last = null;
          let hint = 0;
          for (let i = 0; i < n; i++) {
            last = pacer.reserve(1);
            hint += last.retryAfterSeconds;
          }
          return hint > 0 ? last : null;
        },
        check() {
          for (let i = 0; i < SMOKE_CALLS; i++) {
            const d = pacer.reserve(1);
            check(d.kind === 'refused' && d.retryAfterSeconds >= 1 && d.requiredWaitMs > 0,
              `drained Pacer.reserve was not refused: ${JSON.stringify(d)}`);
          }
        },
      };
    },
  },
  {
    id: 'limiter_try_remove',
    what: '`limiter` RateLimiter.tryRemoveTokens(1), configured to admit: true',
    make() {
      const limiter = new RateLimiter({ tokensPerInterval: 1e9, interval: 'second' });
      return {
        run(n) {
          let admitted = 0;
          for (let i = 0; i < n; i++) if (limiter.tryRemoveTokens(1)) admitted++;
          return admitted;
        },
        check() {
          for (let i = 0; i < SMOKE_CALLS; i++) check(limiter.tryRemoveTokens(1) === true, 'limiter refused');
          const tight = new RateLimiter({ tokensPerInterval: 2, interval: 'hour' });
          check(tight.tryRemoveTokens(1) && tight.tryRemoveTokens(1) && !tight.tryRemoveTokens(1),
            'a 2-per-hour limiter did not admit twice and then refuse');
        },
      };
    },
  },
  {
    id: 'limiter_try_remove_refuse',
    what: '`limiter` RateLimiter.tryRemoveTokens(1), drained (1 per hour): false',
    make() {
      const limiter = new RateLimiter({ tokensPerInterval: 1, interval: 'hour' });
      limiter.tryRemoveTokens(1);
      return {
        run(n) {
          let refused = 0;
          for (let i = 0; i < n; i++) if (!limiter.tryRemoveTokens(1)) refused++;
          return refused;
        },
        check() {
          for (let i = 0; i < SMOKE_CALLS; i++) check(limiter.tryRemoveTokens(1) === false, 'drained limiter admitted');
        },
      };
    },
  },
  {
    id: 'p_throttle',
    what: '`p-throttle` throttled no-op called (window never fills); its promises awaited one in 1024',
    async: true,
    make() {
      const throttled = pThrottle({ limit: Number.MAX_SAFE_INTEGER, interval: 1000 })(() => 1);
      return {
        async run(n) {
          let sum = 0;
          let last = null;
          for (let i = 0; i < n; i++) {
            last = throttled();
            if ((i & 1023) === 1023) sum += await last;
          }
          if (last !== null) sum += await last;
          return sum;
        },
        async check() {
          for (let i = 0; i < SMOKE_CALLS; i++) {
            check(throttled.queueSize === 0, 'p-throttle queued a call');
            check((await throttled()) === 1, 'p-throttle did not run the function');
          }
          // A 1-per-hour throttle runs the first call and queues the second.
          const controller = new AbortController();
          const tight = pThrottle({ limit: 1, interval: 3600_000, signal: controller.signal })(() => 2);
          check((await tight()) === 2, 'p-throttle did not run the first call');
          const queued = tight();
          check(tight.queueSize === 1, 'p-throttle did not queue the second call');
          controller.abort();
          check(await queued.then(() => false, () => true), 'p-throttle queued call not rejected on abort');
        },
      };
    },
  },
  {
    id: 'js_bucket',
    what: 'plain JS token bucket (integer math, same rate and burst), clock +1000 ms per call: true',
    make() {
      return {
        run(n) {
          const bucket = new JsBucket(RATE_PER_MINUTE, BURST, 0);
          let now = 0;
          let admitted = 0;
          for (let i = 0; i < n; i++) {
            now += STEP_MS;
            if (bucket.tryTake(now)) admitted++;
          }
          return admitted;
        },
        check() {
          const bucket = new JsBucket(RATE_PER_MINUTE, BURST, 0);
          for (let i = 1; i <= SMOKE_CALLS; i++) check(bucket.tryTake(i * STEP_MS), 'JS bucket refused on an advancing clock');
          const fresh = new JsBucket(RATE_PER_MINUTE, BURST, 5);
          for (let i = 0; i < BURST; i++) check(fresh.tryTake(5), 'JS bucket refused within its burst');
          check(!fresh.tryTake(5) && !fresh.tryTake(99), 'JS bucket admitted past its burst');
          check(fresh.tryTake(105), 'JS bucket did not refill one token in 100 ms');
        },
      };
    },
  },
  {
    id: 'js_bucket_refuse',
    what: 'plain JS token bucket, drained at a fixed clock: false',
    make() {
      const bucket = new JsBucket(RATE_PER_MINUTE, BURST, 1);
      while (bucket.tryTake(1));
      return {
        run(n) {
          let refused = 0;
          for (let i = 0; i < n; i++) if (!bucket.tryTake(1)) refused++;
          return refused;
        },
        check() {
          for (let i = 0; i < SMOKE_CALLS; i++) check(!bucket.tryTake(1), 'drained JS bucket admitted');
        },
      };
    },
  },
  {
    id: 'pacer_admit_e2e',
    what: '`await pacer.admit()`, clock +1000 ms per call: admitted at once (no timer), awaited per call',
    async: true,
    make() {
      const fresh = () => {
        let t = 0;
        return new Pacer({ ratePerMinute: RATE_PER_MINUTE, burst: BURST, now: () => (t += STEP_MS), ...QUIET });
      };
      return {
        async run(n) {
          const pacer = fresh();
          let last = null;
          for (let i = 0; i < n; i++) last = await pacer.admit();
          return last;
        },
        async check() {
          const pacer = fresh();
          for (let i = 0; i < SMOKE_CALLS; i++) {
            const outcome = await pacer.admit();
            check(outcome.kind === 'admitted' && outcome.queued === false && outcome.waitedMs === 0,
              `pacer.admit() did not admit at once: ${JSON.stringify(outcome)}`);
          }
        },
      };
    },
  },
  {
    id: 'js_bucket_admit_e2e',
    what: '`await admit()` over the JS bucket, same shape as pacer_admit_e2e: async, no timer when admitted',
    async: true,
    make() {
      const fresh = () => {
        let t = 0;
        return jsBucketAdmitter(new JsBucket(RATE_PER_MINUTE, BURST, 0), () => (t += STEP_MS));
      };
      return {
        async run(n) {
          const admit = fresh();
          let last = null;
          for (let i = 0; i < n; i++) last = await admit();
          return last;
        },
        async check() {
          const admit = fresh();
          for (let i = 0; i < SMOKE_CALLS; i++) {
            const outcome = await admit();
            check(outcome.kind === 'admitted' && outcome.queued === false, 'JS bucket admit() did not admit');
          }
        },
      };
    },
  },
];

// ---------------------------------------------------------------- timing

let keep; // results of every loop, so none is dead code

async function timeBatch(subject, n, isAsync) {
  const start = process.hrtime.bigint();
  keep = isAsync ? await subject.run(n) : subject.run(n);
  return Number(process.hrtime.bigint() - start) / n;
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Warms a case up (so its loop is optimized) and picks its batch size. */
async function warmUp(subject, isAsync) {
  let n = 1000;
  let perCall = await timeBatch(subject, n, isAsync);
  const deadline = process.hrtime.bigint() + 300_000_000n;
  while (process.hrtime.bigint() < deadline) {
    n = Math.min(n * 2, MAX_BATCH);
    perCall = await timeBatch(subject, n, isAsync);
  }
  return Math.min(MAX_BATCH, Math.max(1000, Math.round((BATCH_SECONDS * 1e9) / perCall)));
}

// ---------------------------------------------------------------- JS heap bytes per call

function newSpaceUsed() {
  return v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space').space_used_size;
}

/** Bytes of JS heap one call allocates: the growth of V8's new space over
 * `n` and over `3n` calls, each after `gc()` and with no collection while
 * they run (checked with a 'gc' PerformanceObserver); the difference over
 * `2n` cancels what the measuring itself allocates. Retried with fewer
 * calls when a collection ran; null if one always did. */
async function bytesPerCall(subject, isAsync) {
  const starts = [];
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) starts.push(entry.startTime);
  });
  observer.observe({ entryTypes: ['gc'] });
  const growth = async (n) => {
    globalThis.gc();
    const from = performance.now();
    const before = newSpaceUsed();
    keep = isAsync ? await subject.run(n) : subject.run(n);
    const after = newSpaceUsed();
    const to = performance.now();
    // Entries arrive a little later, from a timer: wait for them.
    await new Promise((resolve) => setTimeout(resolve, 50));
    return starts.some((t) => t >= from && t <= to) ? null : after - before;
  };
  try {
    for (let n = 8000; n >= 250; n >>= 1) {
      const small = await growth(n);
      const large = small === null ? null : await growth(3 * n);
      if (large !== null) return Math.max(0, Math.round(((large - small) / (2 * n)) * 10) / 10);
    }
    return null;
  } finally {
    observer.disconnect();
  }
}

// ---------------------------------------------------------------- main

function versionOf(pkg) {
  // Read from the folder: neither package exports its package.json.
  return JSON.parse(readFileSync(path.join(here, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

function napiVersion() {
  const toml = readFileSync(path.join(bindingDir, 'Cargo.toml'), 'utf8');
  const match = /^napi\s*=\s*\{\s*version\s*=\s*"=?([^"]+)"/m.exec(toml);
  return match ? match[1] : 'unknown';
}

async function smoke() {
  for (const c of cases) {
    const subject = c.make();
    keep = c.async ? await subject.run(SMOKE_CALLS) : subject.run(SMOKE_CALLS);
    await subject.check();
  }
  console.error(`bench-node smoke: ${cases.length} cases ok`);
}

async function full() {
  if (typeof globalThis.gc !== 'function') throw new Error('bench-node: run with node --expose-gc (run.sh does)');
  const subjects = cases.map((c) => c.make());
  const sizes = [];
  for (const [i, c] of cases.entries()) sizes.push(await warmUp(subjects[i], c.async));
  const rounds = cases.map(() => []);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, c] of cases.entries()) {
      const batches = [];
      for (let b = 0; b < BATCHES; b++) batches.push(await timeBatch(subjects[i], sizes[i], c.async));
      rounds[i].push(Math.round(median(batches) * 10) / 10);
    }
    console.error(`bench-node: round ${round + 1}/${ROUNDS} done`);
  }
  const bytes = [];
  for (const [i, c] of cases.entries()) bytes.push(await bytesPerCall(subjects[i], c.async));

  const result = {
    layer: 'node',
    title: 'Node binding',
    command: 'bash bench/node/run.sh',
    rounds: ROUNDS,
    versions: {
      node: process.version,
      'napi-rs': napiVersion(),
      limiter: versionOf('limiter'),
      'p-throttle': versionOf('p-throttle'),
    },
    notes: [
      `Every bucket is configured alike where it can be: ${RATE_PER_MINUTE} per minute, burst ${BURST}. Admit cases advance the clock ${STEP_MS} ms per call, so each call admits at once; each timed batch starts a fresh bucket at clock 0, which keeps clocks below 2^31 as real \`performance.now()\` readings are.`,
      '`floor_napi_noop` is `floorNoop()`, an empty Node-API callback made the same way as the hot call (a module function from `napi_create_function`): what entering the addon costs by itself.',
      '`native_reserve` is the call `Pacer.reserve` makes: the clock written to `exchange[0]` (a `Float64Array` over memory the addon owns), `reserveHot(handle)` (a hand-written Node-API callback, bindings/node/src/hot.rs, that reads the pacer\'s handle and the clock, decides, counts, and writes the decision as one number), and the code read from `exchange[1]`. `pacer_reserve` adds the argument check, the decoding and the `{kind, waitMs, queued, path, clockRegressed, ticket}` object with its `Ticket`; `pacer_reserve_refuse` builds `{kind, requiredWaitMs, retryAfterSeconds, clockRegressed}`.',
      'Where the time goes, as measured while developing by cutting the call down step by step (median of 15 interleaved batches of a million calls on a shared 2-core machine, one build): entering the addon about 8 ns (`floor_napi_noop`); `napi_get_cb_info` with its arguments about 5 ns; `napi_get_value_external` for the handle about 5 ns; `napi_get_value_double` for a clock argument with `napi_create_double` for a returned code about 9 ns, and a heap number for every code past 2^30 (every admission after the 8192nd) about 6 ns more; the handle lookup about 3 ns; the decision with its counters about 4 ns. The clock and the code now pass through `exchange` instead, which took the raw call from 40.4 to 25.6 ns and the public reserve from 60.4 to 44.1 ns in those runs. The result object and its `Ticket` take the rest, about 18 ns with their share of garbage collection.',
      '`limiter_try_remove` is `new RateLimiter({tokensPerInterval: 1e9, interval: \'second\'}).tryRemoveTokens(1)` (a rate no loop exhausts, so it admits); `limiter_try_remove_refuse` is a drained `RateLimiter({tokensPerInterval: 1, interval: \'hour\'})`. limiter reads `performance.now()` itself (twice per call) and answers a boolean; the pacer rows are handed the clock and answer a decision object.',
      '`p_throttle` calls a function wrapped by `pThrottle({limit: Number.MAX_SAFE_INTEGER, interval: 1000})` (the window never fills, so every call runs at once; p-throttle has no refusal, only delay). Each call builds its promise and resolves it synchronously; the loop awaits one promise in 1024, so the figure is the call and its promise without a microtask turn per call. p-throttle reads `Date.now()` per call.',
      '`js_bucket` and `js_bucket_refuse` are a plain JS token bucket in integer units of 1/60000 token (`tryTake(nowMs)` → boolean), handed the same clocks as the pacer rows; TurboFan inlines it into the loop, so it shows what staying in JavaScript costs: almost nothing.',
      '`pacer_admit_e2e` and `js_bucket_admit_e2e` are awaited one call at a time: an async function that reads its clock (a counter advancing 1000 ms per read) and, admitted with no wait, returns without any timer, as `Pacer.admit` does; the figure includes the promise and one microtask turn.',
      '`bytes_per_call` is the growth of V8\'s new space per call, taken between runs of n and 3n calls (n up to 8000), each after `gc()` and with no collection during it (checked with a `gc` PerformanceObserver); null when a collection could not be avoided. No number is boxed to cross into or out of the addon: the clock and the code pass through `exchange`. Native (Rust) memory is not counted: the addon allocates none per call. `allocs_per_call` is not measured for Node.',
      `Per round, each case runs ${BATCHES} batches of about ${BATCH_SECONDS * 1000} ms each after a warm-up; its figure is the median batch, in ns per call.`,
    ],
    rows: cases.map((c, i) => ({
      id: c.id,
      what: c.what,
      threads: 1,
      rounds_ns: rounds[i],
      allocs_per_call: null,
      bytes_per_call: bytes[i],
    })),
  };
  const outDir = process.env.BENCH_OUT || path.join(repo, 'target-bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const outFile = path.join(outDir, 'node.json');
  writeFileSync(outFile, `${JSON.stringify(result, null, 2)}\n`);

  const width = Math.max(...cases.map((c) => c.id.length));
  console.error(`bench-node: ns per call (median of ${ROUNDS} rounds), JS heap bytes per call; ${process.version}`);
  for (const row of result.rows) {
    const ns = median(row.rounds_ns).toFixed(1).padStart(8);
    const b = row.bytes_per_call === null ? '   -' : String(row.bytes_per_call).padStart(6);
    console.error(`  ${row.id.padEnd(width)} ${ns} ns  ${b} B   [${row.rounds_ns.join(', ')}]`);
  }
  console.error(`bench-node: wrote ${path.relative(process.cwd(), outFile)}`);
}

if (SMOKE) await smoke();
else await full();
if (keep === Symbol.for('never')) console.log(keep);
