'use strict';
// The drop-in module: SPEC §7's seed scenarios through WsUpgradePacer, the
// original's notice texts and dedupe keys, its numeric helpers on odd JS
// numbers, and its settings functions. Every expected value is worked out
// by hand (SPEC §2-§7 and the design record), never by calling the code.
const test = require('node:test');
const assert = require('node:assert/strict');
const compat = require('../compat.js');
const { FakeTime, flush } = require('./helpers.js');

const {
  WsUpgradePacer, wsNewConnectionMaxWaitMs, pacedRetryAfterSeconds, refusalScheduleMs, canRefuseAtRate,
  wsNewConnectionsPerMinute, upstreamRequestBudget, sharedWsUpgradePacer, resetWsUpgradePacerForTests,
  setParentNoticeSink,
} = compat;

let parentNotices = [];
setParentNoticeSink((line) => parentNotices.push(line));
test.beforeEach(() => {
  parentNotices = [];
  resetWsUpgradePacerForTests();
});

function pacer(time, options) {
  return new WsUpgradePacer({ now: time.now, schedule: time.schedule, ...options });
}

/** An admission as compared here: its release checked to be a function
 * and left out (refusals and a pacing-off admission carry none). */
function shape(outcome) {
  if (outcome.kind !== 'admitted' || !('release' in outcome)) return outcome;
  const { release, ...rest } = outcome;
  assert.equal(typeof release, 'function');
  return rest;
}

/** The admission the host answers: `queued` when it waited on the bucket. */
function admitted(waitedMs, queued = waitedMs > 0) {
  return { kind: 'admitted', waitedMs, queued };
}

/** Starts `count` admits at once; returns their outcomes as they settle. */
function fanOut(p, count) {
  return Array.from({ length: count }, () => p.admit());
}

test('constants and names', () => {
  for (const [name, value] of Object.entries({
    WS_NEW_CONNECTIONS_PER_MIN_ENV: 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN',
    DEFAULT_WS_NEW_CONNECTIONS_PER_MIN: 60,
    MAX_WS_NEW_CONNECTIONS_PER_MIN: 600,
    WS_NEW_CONNECTION_BURST: 10,
    WS_NEW_CONNECTION_MAX_WAIT_CEILING_MS: 15000,
  })) assert.equal(compat[name], value, name);
});

test('§7 defaults, 30 at once: 10 now, 4 queued 1-4 s, the 15th refused (5000, hint 4)', async () => {
  const time = new FakeTime(1_000_000);
  const p = pacer(time, { idleTimeoutMs: 120000, maxRetries: 5 });
  assert.equal(p.maxWaitMs, 4833);
  const outcomes = fanOut(p, 30);
  await time.advance(5000);
  const got = await Promise.all(outcomes);
  for (let i = 0; i < 10; i += 1) assert.deepEqual(shape(got[i]), admitted(0), `#${i}`);
  for (let i = 10; i < 14; i += 1) {
    assert.deepEqual(shape(got[i]), admitted((i - 9) * 1000), `#${i}`);
  }
  for (let i = 14; i < 30; i += 1) {
    assert.deepEqual(got[i], { kind: 'refused', requiredWaitMs: 5000, retryAfterSeconds: 4 }, `#${i}`);
  }
  assert.deepEqual(parentNotices, []);
});

for (const [rate, slotMs] of [[1, 60000], [2, 30000]]) {
  test(`§7 rate ${rate}/min, 20 at once: 19 now, 1 waits the bound, none refused, norefuse notice`, async () => {
    const time = new FakeTime();
    const p = pacer(time, { ratePerMinute: rate, idleTimeoutMs: 120000, maxRetries: 5 });
    const outcomes = fanOut(p, 20);
    await time.advance(4833);
    const got = await Promise.all(outcomes);
    const waited = got.filter((o) => o.kind === 'admitted' && o.waitedMs > 0);
    assert.equal(got.filter((o) => o.kind === 'refused').length, 0);
    assert.deepEqual(waited.map(shape), [admitted(4833)]);
    assert.equal(got.indexOf(waited[0]), 10, 'the first past the burst is the one shaped');
    assert.deepEqual(parentNotices, [
      `clodex: pacing new OpenAI connections at ${rate}/minute without refusing overflow: a 5-retry `
      + `schedule spans only 20000ms, which cannot outlast the ${slotMs}ms wait for a free connection `
      + 'slot, so clodex shapes the opening burst and then admits remaining overflow instead of failing it',
    ]);
    // Once per key: a second pacer with the same numbers stays quiet.
    pacer(time, { ratePerMinute: rate, idleTimeoutMs: 120000, maxRetries: 5 });
    assert.equal(parentNotices.length, 1);
  });
}

test('§7 retries 0: 10 now, 15 queued 1-15 s down to the floor, 15 more at once', async () => {
  const time = new FakeTime();
  const p = pacer(time, { idleTimeoutMs: 120000, maxRetries: 0 });
  assert.equal(p.maxWaitMs, 15000);
  const outcomes = fanOut(p, 40);
  await time.advance(15000);
  const got = await Promise.all(outcomes);
  const waits = got.map((o) => o.waitedMs);
  assert.deepEqual(waits.slice(0, 10), Array(10).fill(0));
  assert.deepEqual(waits.slice(10, 25), Array.from({ length: 15 }, (_, i) => (i + 1) * 1000));
  assert.deepEqual(waits.slice(25), Array(15).fill(0));
  assert.ok(got.every((o) => o.kind === 'admitted'));
  // Queued: only the fifteen that waited; those past the floor debited
  // nothing and went at once.
  const queued = got.map((o) => o.queued);
  assert.deepEqual(queued, [...Array(10).fill(false), ...Array(15).fill(true), ...Array(15).fill(false)]);
  // At t=15000 the bucket has refilled to 0 tokens. Releasing one that
  // debited nothing hands nothing back: the next still waits a whole slot.
  got[39].release();
  got[39].release();
  const next = p.admit();
  await time.advance(1000);
  assert.deepEqual(shape(await next), admitted(1000), 'a free admission released nothing');
  assert.deepEqual(parentNotices, [], 'no norefuse notice without retries');
});

test('§7 idle 14001: pacing off with the disabled notice, 50 admitted at once', async () => {
  const time = new FakeTime();
  const p = pacer(time, { idleTimeoutMs: 14001, maxRetries: 3 });
  assert.equal(p.maxWaitMs, 0);
  const got = await Promise.all(fanOut(p, 50));
  assert.ok(got.every((o) => o.kind === 'admitted' && o.waitedMs === 0));
  assert.equal(time.pending().length, 0);
  assert.deepEqual(parentNotices, [
    'clodex: not pacing new OpenAI connections: a 3-retry budget leaves no room to queue inside '
    + 'the resolved 14001ms request deadline',
  ]);
});

test('§7 burst 1, bound 2000: now, 1000, 2000, then refused (3000, hint 2)', async () => {
  const time = new FakeTime();
  const p = pacer(time, { burst: 1, idleTimeoutMs: 30000, maxRetries: 3 });
  const outcomes = fanOut(p, 5);
  await time.advance(2000);
  assert.deepEqual((await Promise.all(outcomes)).map(shape), [
    admitted(0),
    admitted(1000),
    admitted(2000),
    { kind: 'refused', requiredWaitMs: 3000, retryAfterSeconds: 2 },
    { kind: 'refused', requiredWaitMs: 3000, retryAfterSeconds: 2 },
  ]);
});

test('§7 a queued request aborted at t=0 gives its slot back: the next waits 1000, not 2000', async () => {
  const time = new FakeTime();
  const p = pacer(time, { burst: 1, idleTimeoutMs: 3600000, maxRetries: 5 });
  assert.equal(p.maxWaitMs, 15000);
  await p.admit();
  const controller = new AbortController();
  const queued = p.admit(controller.signal);
  controller.abort();
  // No reason given: the signal's own AbortError (an Error) is surfaced as is.
  await assert.rejects(queued, (e) => e === controller.signal.reason && e.name === 'AbortError');
  const next = p.admit();
  await time.advance(2000);
  assert.deepEqual(shape(await next), admitted(1000));
});

test('§7 rate 0: everything at once', async () => {
  const time = new FakeTime();
  const p = pacer(time, { ratePerMinute: 0, idleTimeoutMs: 120000, maxRetries: 5 });
  const got = await Promise.all(fanOut(p, 100));
  assert.ok(got.every((o) => o.kind === 'admitted' && o.waitedMs === 0));
  assert.deepEqual(parentNotices, []);
});

test('abort reasons as the original: Error as is, string as AbortError message; aborted signal never reserves', async () => {
  const time = new FakeTime();
  const p = pacer(time, { burst: 1, idleTimeoutMs: 30000, maxRetries: 3 });
  const reason = new Error('gone');
  await assert.rejects(p.admit(AbortSignal.abort(reason)), (e) => e === reason);
  await assert.rejects(p.admit(AbortSignal.abort('client closed')),
    (e) => e.name === 'AbortError' && e.message === 'client closed');
  // Nothing was reserved by the two aborted calls: the burst token is there.
  assert.deepEqual(shape(await p.admit()), admitted(0));
  // Abort after admission changes nothing.
  const controller = new AbortController();
  const queued = p.admit(controller.signal);
  await time.advance(1000);
  assert.deepEqual(shape(await queued), admitted(1000));
  controller.abort();
  await flush();
  const next = p.admit();
  await time.advance(1000);
  assert.deepEqual(shape(await next), admitted(1000), 'no refund after admission');
});

test('a scheduler that fires synchronously still admits', async () => {
  let t = 0;
  const p = new WsUpgradePacer({
    burst: 1, idleTimeoutMs: 30000, maxRetries: 3, now: () => t,
    schedule: (ms, fire) => { t += ms; fire(); return () => {}; },
  });
  await p.admit();
  assert.deepEqual(shape(await p.admit()), admitted(1000));
});

test('§6.6 sustained 82/min for four minutes: at most 61 in the final minute', async () => {
  // Offers every 732 ms, burst 10, bound 15000 (idle 3600000, 5 retries),
  // rate 60. The rejected admit-anyway design reads 82 here.
  const time = new FakeTime();
  const p = pacer(time, { idleTimeoutMs: 3600000, maxRetries: 5 });
  const admittedAt = [];
  const pending = [];
  for (let offer = 0; offer * 732 < 240000; offer += 1) {
    await time.advance(offer * 732 - time.nowMs);
    pending.push(p.admit().then((o) => { if (o.kind === 'admitted') admittedAt.push(time.nowMs); }));
    await flush();
  }
  await time.advance(240000 + 15000 - time.nowMs);
  await Promise.all(pending);
  const finalMinute = admittedAt.filter((at) => at >= 180000 && at < 240000).length;
  assert.ok(finalMinute <= 61, `final minute admitted ${finalMinute}`);
  assert.ok(finalMinute >= 55, `final minute admitted ${finalMinute}: the pacer still admits its rate`);
});

/** Checks `fn` on each row of `rows`: its arguments, then what it answers. */
function answers(fn, rows) {
  for (const row of rows) {
    const args = row.slice(0, -1);
    assert.equal(fn(...args), row.at(-1), `${fn.name}(${args.join(', ')})`);
  }
}

test('numeric helpers: the design record budgets and the safe values for odd numbers', () => {
  answers(wsNewConnectionMaxWaitMs, [
    // SPEC §3 worked budgets.
    [120000, 5, 4833], [30000, 3, 2000], [10000, 2, 666], [3600000, 5, 15000],
    [60000, 4, 3000], [14001, 3, 0], [120000, 0, 15000], [3600000, 10, 15000],
    // Odd numbers: no wait.
    [NaN, 5, 0], [Infinity, 5, 0], [-Infinity, 5, 0], [-1, 5, 0], [0, 5, 0],
    [120000, -1, 0], [120000, NaN, 0], [120000, Infinity, 0], [3600000, 99, 0], [3600000, 1e12, 0],
  ]);
  answers(pacedRetryAfterSeconds, [
    // Hints: cap max(1, floor(bound/1000)); want max(1, ceil(required/1000)).
    [60000, 666, 1], [60000, 2000, 2], [60000, 4833, 4], [60000, 15000, 15],
    [3000, 15000, 3], [1200, 4833, 2], [1000.5, 15000, 2], [1e300, 15000, 15],
    // Odd numbers: 1 s.
    [NaN, 4833, 1], [Infinity, 4833, 1], [-5, 4833, 1], [0, 4833, 1],
    [60000, NaN, 1], [60000, Infinity, 1], [60000, -1, 1], [60000, 0, 1],
  ]);
  answers(refusalScheduleMs, [
    // Schedules: retries · cap · 1000.
    [4833, 5, 20000], [666, 2, 2000], [15000, 5, 75000], [NaN, 5, 5000],
    [4833, 0, 0], [4833, -1, 0], [4833, NaN, 0], [4833, Infinity, 0], [4833, -Infinity, 0],
  ]);
  answers(canRefuseAtRate, [
    // Can refuse: schedule · rate >= 60000. Defaults: 3/min yes, 2/min no;
    // idle 10000 (bound 666, 2 retries, schedule 2000): 30 yes, 29 no.
    [4833, 5, 3, true], [4833, 5, 2, false], [666, 2, 30, true], [666, 2, 29, false],
    [4833, 5, NaN, false], [4833, 5, Infinity, false], [4833, 5, -1, false], [4833, 5, 0, false],
    [4833, 0, 60, false],
  ]);
});

test('wsNewConnectionsPerMinute: defaults, clamps, the host\'s Number parsing, notices once with namespaced keys', () => {
  const warned = [];
  const warn = (m) => warned.push(m);
  const env = (v) => ({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: v });
  assert.equal(wsNewConnectionsPerMinute({}, warn), 60);
  // Each text, in this order, and the rate it reads as.
  for (const [text, rate] of [
    ['  ', 60], [' 30 ', 30], ['0', 0], ['abc', 60], ['abc', 60], ['601', 600],
    // What JavaScript's Number reads as an integer, as the host accepts it.
    ['1e2', 100], ['0x10', 16], ['60.0', 60], ['1e21', 600], ['12.5', 60],
  ]) {
    assert.equal(wsNewConnectionsPerMinute(env(text), warn), rate, JSON.stringify(text));
  }
  assert.deepEqual(warned, [
    'ignoring CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=abc (expected a non-negative integer; using 60)',
    'clamping CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=601 to 600 (a higher rate shapes nothing OpenAI throttles on)',
    'clamping CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=1e21 to 600 (a higher rate shapes nothing OpenAI throttles on)',
    'ignoring CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=12.5 (expected a non-negative integer; using 60)',
  ]);
  // The design record's pinned case: this rate text must not suppress the
  // disabled notice of an idle-14001 pacer.
  assert.equal(wsNewConnectionsPerMinute(env('disabled:3:14001'), warn), 60);
  new WsUpgradePacer({ idleTimeoutMs: 14001, maxRetries: 3 });
  assert.equal(parentNotices.length, 1);
  assert.match(parentNotices[0], /^clodex: not pacing new OpenAI connections: a 3-retry budget/);
  // A throwing warn never fails the call.
  assert.equal(wsNewConnectionsPerMinute(env('bad!'), () => { throw new Error('sink down'); }), 60);
});

test('upstreamRequestBudget: the design record budget table and its notices', () => {
  const warned = [];
  const warn = (m) => warned.push(m);
  // Each row: the settings, then the budget as [idle, total, retries]; the
  // last also passes a caller's own idle timeout, used as given with no notice.
  for (const [env, [idleTimeoutMs, totalTimeoutMs, maxRetries], extra] of [
    [{}, [120000, 600000, 5]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '30000' }, [30000, 600000, 3]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '10000' }, [10000, 600000, 2]],
    [{ CLODEX_UPSTREAM_MAX_RETRIES: '0' }, [120000, 600000, 0]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '600000', CLODEX_UPSTREAM_TOTAL_TIMEOUT_MS: '60000' }, [60000, 60000, 4]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '3600000', CLODEX_UPSTREAM_MAX_RETRIES: '99' }, [3600000, 3600000, 10]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: 'abc', CLODEX_UPSTREAM_MAX_RETRIES: '-1' }, [120000, 600000, 5]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '5000' }, [10000, 600000, 2]],
    [{ CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: 'ignored' }, [30000, 600000, 3], { idleTimeoutMs: 30000 }],
  ]) {
    assert.deepEqual(upstreamRequestBudget({ env, warn, ...extra }), { idleTimeoutMs, totalTimeoutMs, maxRetries },
      JSON.stringify(env));
  }
  assert.deepEqual(warned, [
    'lowering the resolved idle timeout from 600000ms to 60000ms because it cannot exceed CLODEX_UPSTREAM_TOTAL_TIMEOUT_MS',
    'raising the resolved total timeout from 600000ms to 3600000ms so it is not shorter than CLODEX_UPSTREAM_IDLE_TIMEOUT_MS',
    'clamping CLODEX_UPSTREAM_MAX_RETRIES=99 to 10 (estimated from the SDK fallback backoff and resolved 3600000ms '
      + 'idle timeout; provider delays may allow fewer retries)',
    'ignoring CLODEX_UPSTREAM_IDLE_TIMEOUT_MS=abc (expected a positive integer number of milliseconds)',
    'ignoring CLODEX_UPSTREAM_MAX_RETRIES=-1 (expected a non-negative integer)',
    'clamping CLODEX_UPSTREAM_IDLE_TIMEOUT_MS=5000 to 10000ms (supported range is 10000-3600000ms)',
  ]);
});

test('sharedWsUpgradePacer: one process-wide pacer from the environment; reset re-reads it', async () => {
  const saved = process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN;
  // The process-wide pacer reads the default clock (performance.now) and
  // takes no injected one: hold that clock still for this test, so the
  // eleventh request is queued however slowly the machine runs.
  const frozen = performance.now();
  Object.defineProperty(performance, 'now', { value: () => frozen, configurable: true, writable: true });
  try {
    process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN = '0';
    const shared = sharedWsUpgradePacer();
    assert.equal(sharedWsUpgradePacer(), shared);
    const got = await Promise.all(Array.from({ length: 30 }, () => shared.admit()));
    assert.ok(got.every((o) => o.kind === 'admitted' && o.waitedMs === 0), 'rate 0 from the env: off');
    process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN = '60';
    resetWsUpgradePacerForTests();
    const fresh = sharedWsUpgradePacer();
    assert.notEqual(fresh, shared);
    assert.equal(fresh.maxWaitMs, 4833);
    // Paced now: eleven at once leave the eleventh queued (burst 10).
    const controller = new AbortController();
    const outcomes = Array.from({ length: 11 }, () => fresh.admit(controller.signal));
    await flush();
    controller.abort();
    const settled = await Promise.allSettled(outcomes);
    assert.equal(settled.filter((s) => s.status === 'fulfilled').length, 10);
    assert.equal(settled[10].status, 'rejected');
  } finally {
    delete performance.now;
    if (saved === undefined) delete process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN;
    else process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN = saved;
  }
});

test('bookRefusals (opt-in): keyed retries redeem their place in line; off, nothing changes', async () => {
  // Defaults (bound 4833, cap 4 s, 5 retries): 14 at once take the burst
  // and waits up to 4000; the 15th, keyed, books slot 5000 (hint 1 s).
  const time = new FakeTime(0);
  const p = pacer(time, { idleTimeoutMs: 120000, maxRetries: 5, bookRefusals: true });
  const first14 = fanOut(p, 14);
  assert.deepEqual(await p.admit(undefined, 'a'), { kind: 'refused', requiredWaitMs: 5000, retryAfterSeconds: 1 });
  assert.deepEqual(await p.admit(undefined, 'b'), { kind: 'refused', requiredWaitMs: 6000, retryAfterSeconds: 2 });
  // Unkeyed requests keep the original behaviour: refused with the cap.
  assert.deepEqual(await p.admit(), { kind: 'refused', requiredWaitMs: 7000, retryAfterSeconds: 4 });
  await time.advance(1000);
  const a = p.admit(undefined, 'a'); // slot 5000 is 4000 ahead: waits
  await flush();
  assert.equal(p.forget('b'), true, "b's booking goes back");
  await time.advance(4000);
  assert.deepEqual(shape(await a), admitted(4000));
  await Promise.all(first14);
  assert.equal(p.forget('a'), false, 'admitted: nothing held');
  assert.throws(() => p.forget({}), TypeError);

  const plain = pacer(new FakeTime(0), { idleTimeoutMs: 120000, maxRetries: 5 });
  for (let i = 0; i < 14; i += 1) plain.admit();
  assert.deepEqual(await plain.admit(undefined, 'a'), { kind: 'refused', requiredWaitMs: 5000, retryAfterSeconds: 4 });
  assert.equal(plain.forget('a'), false);
});

// Adaptive pacing (SPEC §14), opt-in. By hand, from the law's statement
// (core/src/adaptive.rs): retries 5, idle 120000 (bound 4833 ms, hint cap
// 4 s, schedule 20000 ms) make ⌈60000/20000⌉ = 3/min the lowest rate that
// can refuse, so the rate in force is clamped to [lowest, 60] with lowest =
// max(10, 3) = 10. Rate 60 with the default ceiling (the rate) reads 60
// while it searches. At 61000 ms, a minute after the creation
// (0), 30 openings then a throttle end the first search with no pause (Δ ≥
// 60000 from the creation): E = max(through 30, recent 30) = 30, L = min(30,
// 60) = 30, origin 61000, ℓ = 30 at once; a throttle within 60000 ms of the
// origin changes nothing (the hold). At 30/min a token refills in
// 60000/30 = 2000 ms (at 60/min in 1000).
// A pacer created at 1000 and throttled at once with nothing counted: B =
// min(R 60, ℓ 60) = 60, L = 60 − max(1, ⌊60/16⌋ = 3) = 57; the throttle ends
// the first search within a minute of the creation, so it pauses: origin
// 1000 + 60000 = 61000, the rate reads the lowest, 10, until then (the
// throttle itself answers 10). An opening at 1000 is counted at max(1000,
// 61000) = 61000, minute ⌊61000/60000⌋ = 1, and answers 10 (read at 1000).
// A throttle at 60999 is within the hold (Δ < 60000): nothing changes, 10
// (still paused). At 61000 the pause ends: ℓ = 57 (the probe step only at Δ
// = 60000 + max(240000, ⌊80·60000/57⌋ = 84210)/12 = 80000). A throttle at
// 121000 (Δ = 60000: no longer held; minute 2, the count rolls: before =
// 1, this minute 0): probing, E = through = max(1, 0) = 1 < R = 57, so L =
// 1, clamped to the lowest: 10.
test('adaptive (opt-in): a throttle lowers the rate in force and the next admission waits at it', async () => {
  const time = new FakeTime(0);
  const p = pacer(time, { burst: 1, idleTimeoutMs: 120000, maxRetries: 5, adaptive: { floorPerMinute: 10 } });
  assert.equal(p.rateInForce(), 60);
  await time.advance(61000);
  assert.deepEqual(shape(await p.admit()), admitted(0));
  for (let i = 0; i < 30; i += 1) assert.equal(p.observe('opened'), 60);
  assert.equal(p.observe('throttled'), 30, 'L = 30 got through; a minute after the creation: no pause');
  assert.equal(p.observe('throttled'), 30, 'in the hold: nothing changes');
  assert.equal(p.rateInForce(), 30);
  let woke = false;
  const next = p.admit().then((outcome) => { woke = true; return outcome; });
  await time.advance(1999);
  await flush();
  assert.equal(woke, false, 'still waiting after 1999 ms');
  await time.advance(1);
  assert.deepEqual(shape(await next), admitted(2000));

  const clock = new FakeTime(1000);
  const again = pacer(clock, { idleTimeoutMs: 120000, maxRetries: 5, adaptive: { floorPerMinute: 10 } });
  assert.equal(again.observe('throttled'), 10, 'nothing counted: L = 57, paused at the lowest');
  assert.equal(again.observe('opened'), 10);
  clock.nowMs = 60999;
  assert.equal(again.observe('throttled'), 10, 'held, and still paused');
  clock.nowMs = 61000;
  assert.equal(again.rateInForce(), 57, 'the pause ends: ℓ = L = 57');
  assert.equal(again.observe('throttled'), 57, 'held within a minute of the origin');
  clock.nowMs = 121000;
  assert.equal(again.observe('throttled'), 10, 'one got through: L = 1, at the floor');
  assert.throws(() => again.observe('throttle'), TypeError);
  assert.throws(() => again.observe(undefined), TypeError);
});

test('adaptive off (no bounds, or unusable ones): observe changes nothing; the drop-in behaves as before', async () => {
  const time = new FakeTime(0);
  const p = pacer(time, { burst: 1, idleTimeoutMs: 120000, maxRetries: 5 });
  await time.advance(1000);
  assert.deepEqual(shape(await p.admit()), admitted(0));
  assert.equal(p.observe('throttled'), 60);
  assert.equal(p.observe('opened'), 60);
  const next = p.admit();
  await time.advance(1000);
  assert.deepEqual(shape(await next), admitted(1000));
  // The constructor reads numbers as it reads the rate: a floor that is not
  // a positive number is no adaptation; one above the rate is held at the
  // rate, where a throttle lowers nothing (the floor is the rate, 60).
  for (const adaptive of [{ floorPerMinute: NaN }, { floorPerMinute: -5 }, { floorPerMinute: 0 }, null, 'on', {}]) {
    const odd = pacer(new FakeTime(0), { idleTimeoutMs: 120000, maxRetries: 5, adaptive });
    assert.equal(odd.observe('throttled'), 60, JSON.stringify(adaptive));
  }
  const high = pacer(new FakeTime(0), { idleTimeoutMs: 120000, maxRetries: 5, adaptive: { floorPerMinute: 100 } });
  assert.equal(high.observe('throttled'), 60);
  // Pacing off (rate 0): nothing to adapt, the original's pacing-off admission.
  const off = pacer(new FakeTime(0), { ratePerMinute: 0, adaptive: { floorPerMinute: 10 } });
  assert.equal(off.observe('throttled'), 0);
  assert.deepEqual(await off.admit(), { kind: 'admitted', waitedMs: 0 });
});

test('wsAdaptivePacing: the floor turns it on, read as the host reads numbers; bad text keeps it off, with a notice once', () => {
  const warnings = [];
  const warn = (message) => warnings.push(message);
  const read = (env) => compat.wsAdaptivePacing(env, warn);
  assert.equal(compat.WS_ADAPTIVE_FLOOR_PER_MIN_ENV, 'CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN');
  assert.equal(compat.WS_ADAPTIVE_CEILING_PER_MIN_ENV, 'CLODEX_WS_ADAPTIVE_CEILING_PER_MIN');
  assert.equal(read({}), undefined);
  assert.equal(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: '  ' }), undefined);
  assert.equal(read({ CLODEX_WS_ADAPTIVE_CEILING_PER_MIN: '90' }), undefined, 'a ceiling alone turns nothing on');
  assert.deepEqual(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: ' 1e1 ' }), { floorPerMinute: 10, ceilingPerMinute: undefined });
  assert.deepEqual(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: '10', CLODEX_WS_ADAPTIVE_CEILING_PER_MIN: '90' }),
    { floorPerMinute: 10, ceilingPerMinute: 90 });
  assert.deepEqual(warnings, []);
  for (const bad of ['0', '-1', '2.5', 'abc']) {
    assert.equal(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: bad }), undefined, bad);
    assert.equal(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: bad }), undefined, bad);
  }
  assert.deepEqual(read({ CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN: '10', CLODEX_WS_ADAPTIVE_CEILING_PER_MIN: 'lots' }),
    { floorPerMinute: 10, ceilingPerMinute: undefined });
  assert.deepEqual(warnings, [
    ...['0', '-1', '2.5', 'abc'].map((bad) => `ignoring CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN=${bad} `
      + '(expected a positive integer; adaptive pacing stays off)'),
    'ignoring CLODEX_WS_ADAPTIVE_CEILING_PER_MIN=lots (expected a positive integer; using the rate)',
  ]);
});

test('sharedWsUpgradePacer: adaptive when CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN is set, not otherwise', () => {
  const saved = process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN;
  // Hold the default clock still, then move it a minute on. A throttle with
  // nothing counted right at the creation: B = min(60, 60) = 60, L = 60 −
  // max(1, ⌊60/16⌋) = 57; it ends the first search within a minute of the
  // creation, so it pauses until creation + 60000 at the lowest, max(10, 3)
  // = 10 (3/min the lowest rate that can refuse at the default budget); from
  // then ℓ = 57 (the hold, then the wait: no step yet).
  const frozen = performance.now();
  let shift = 0;
  Object.defineProperty(performance, 'now', { value: () => frozen + shift, configurable: true, writable: true });
  try {
    delete process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN;
    assert.equal(sharedWsUpgradePacer().observe('throttled'), 60);
    process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN = '10';
    resetWsUpgradePacerForTests();
    const adaptive = sharedWsUpgradePacer();
    assert.equal(adaptive.rateInForce(), 60);
    assert.equal(adaptive.observe('throttled'), 10, 'L = 57, paused at the lowest');
    assert.equal(adaptive.rateInForce(), 10);
    shift = 60000;
    assert.equal(adaptive.rateInForce(), 57, 'the pause over');
    assert.deepEqual(parentNotices, []);
  } finally {
    delete performance.now;
    if (saved === undefined) delete process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN;
    else process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN = saved;
  }
});
