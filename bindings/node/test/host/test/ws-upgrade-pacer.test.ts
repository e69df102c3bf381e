// The host's view of its pacer module after the swap: the names it
// imports, the admission shapes its call site reads, the settings text it
// accepts, the notices and the channel they travel. Every expected value is
// worked out by hand from the host's defaults (60/minute, burst 10, bound
// 4833 ms at a 120 s deadline with 5 retries), never read back from the
// module under test.
import { test, beforeEach } from 'node:test';
import assert from 'node:assert/strict';
import { setImmediate as flush } from 'node:timers/promises';

import * as pacerModule from '../src/oauth/ws-upgrade-pacer.js';
import {
  WsUpgradePacer,
  resetWsUpgradePacerForTests,
  sharedWsUpgradePacer,
  wsNewConnectionsPerMinute,
  type UpgradeAdmission,
} from '../src/oauth/ws-upgrade-pacer.js';
import { openUpstream, upgradeUpstream } from '../src/oauth/responses-websocket.js';
import { installParentNoticeSink } from '../src/parent-notice.js';
import { budgetCalls } from '../src/upstream-retry.js';

/** A clock and scheduler the test moves by hand: nothing really sleeps. */
class FakeTime {
  nowMs: number;
  private timers: { at: number; fire: () => void; done: boolean }[] = [];
  constructor(start = 1_000_000) {
    this.nowMs = start;
  }
  now = (): number => this.nowMs;
  schedule = (ms: number, fire: () => void): (() => void) => {
    const timer = { at: this.nowMs + ms, fire, done: false };
    this.timers.push(timer);
    return () => {
      timer.done = true;
    };
  };
  /** Fires the timers due by `now + ms`, in time order, each at its time. */
  async advance(ms: number): Promise<void> {
    const until = this.nowMs + ms;
    for (;;) {
      const due = this.timers.filter((t) => !t.done && t.at <= until).sort((a, b) => a.at - b.at);
      if (due.length === 0) break;
      due[0].done = true;
      this.nowMs = due[0].at;
      due[0].fire();
      await flush();
    }
    this.nowMs = until;
    await flush();
  }
}

/** An admission without its release function, which is checked to be one. */
function shape(a: UpgradeAdmission): object {
  if (a.kind === 'refused') return a;
  const { release, ...rest } = a;
  if ('release' in a) assert.equal(typeof release, 'function');
  return rest;
}
const admitted = (waitedMs: number, queued: boolean) => ({ kind: 'admitted', waitedMs, queued });

/** Settles `promise` into a box the test reads without awaiting. */
function watch<T>(promise: Promise<T>): { value?: T; error?: unknown } {
  const box: { value?: T; error?: unknown } = {};
  promise.then((value) => { box.value = value; }, (error: unknown) => { box.error = error; });
  return box;
}

/** The value `promise` settled to by now; fails (never hangs) when it waits. */
async function settled<T>(promise: Promise<T>, what: string): Promise<T> {
  const box = watch(promise);
  await flush();
  await flush();
  if (box.error !== undefined) throw box.error;
  assert.ok('value' in box, `${what} is still waiting`);
  return box.value as T;
}

/** Asks `p` again with its bucket empty: still waiting once the reactions
 * ran (`why` it must wait), then, `advanceMs` later, admitted queued after
 * `waitedMs`. */
async function admitsLater(p: WsUpgradePacer, time: FakeTime, why: string, advanceMs: number, waitedMs: number) {
  const next = watch(p.admit());
  await flush();
  assert.equal(next.value, undefined, why);
  await time.advance(advanceMs);
  assert.deepEqual(shape(next.value!), admitted(waitedMs, true));
}

let lines: string[] = [];
installParentNoticeSink((line) => lines.push(line));
beforeEach(() => {
  lines = [];
  resetWsUpgradePacerForTests();
  delete process.env.CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN;
  delete process.env.CLODEX_UPSTREAM_IDLE_TIMEOUT_MS;
  delete process.env.CLODEX_UPSTREAM_MAX_RETRIES;
});

test('the module exports every name the host imports, with the host values', () => {
  assert.equal(pacerModule.WS_NEW_CONNECTIONS_PER_MIN_ENV, 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN');
  assert.equal(pacerModule.DEFAULT_WS_NEW_CONNECTIONS_PER_MIN, 60);
  assert.equal(pacerModule.MAX_WS_NEW_CONNECTIONS_PER_MIN, 600);
  assert.equal(pacerModule.WS_NEW_CONNECTION_BURST, 10);
  assert.equal(pacerModule.WS_NEW_CONNECTION_MAX_WAIT_CEILING_MS, 15_000);
  for (const name of ['resolvedPacingBudget', 'wsNewConnectionMaxWaitMs', 'pacedRetryAfterSeconds',
    'refusalScheduleMs', 'canRefuseAtRate', 'wsNewConnectionsPerMinute', 'sharedWsUpgradePacer',
    'resetWsUpgradePacerForTests', 'WsUpgradePacer'] as const) {
    assert.equal(typeof pacerModule[name], 'function', name);
  }
  assert.equal(pacerModule.wsNewConnectionMaxWaitMs(120_000, 3), 13_250);
  assert.equal(pacerModule.refusalScheduleMs(4_833, 5), 20_000);
  assert.equal(pacerModule.canRefuseAtRate(4_833, 5, 60), true);
  assert.equal(pacerModule.canRefuseAtRate(4_833, 5, 2), false);
});

test('burst 10, then one a second: queued is false, then true', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, idleTimeoutMs: 120_000, maxRetries: 5 });
  const got = Array.from({ length: 13 }, () => p.admit());
  await time.advance(3_000);
  const shapes = (await Promise.all(got)).map(shape);
  for (let i = 0; i < 10; i += 1) assert.deepEqual(shapes[i], admitted(0, false), `#${i}`);
  assert.deepEqual(shapes.slice(10), [admitted(1_000, true), admitted(2_000, true), admitted(3_000, true)]);
});

test('over the bound a request is refused, debiting nothing; the hint is capped at the bound', async () => {
  const time = new FakeTime();
  // A 10 s deadline with 1 retry: bound (10000 - 2000) / 4 = 2000 ms.
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 1, idleTimeoutMs: 10_000, maxRetries: 1 });
  assert.equal(p.maxWaitMs, 2_000);
  const got = Array.from({ length: 5 }, () => p.admit());
  await time.advance(2_000);
  assert.deepEqual((await Promise.all(got)).map(shape), [
    admitted(0, false), admitted(1_000, true), admitted(2_000, true),
    { kind: 'refused', requiredWaitMs: 3_000, retryAfterSeconds: 2 },
    { kind: 'refused', requiredWaitMs: 3_000, retryAfterSeconds: 2 },
  ]);
});

test('release() hands back one token, once', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 2, idleTimeoutMs: 120_000, maxRetries: 5 });
  const first = await p.admit();
  assert.deepEqual(shape(first), admitted(0, false));
  assert.deepEqual(shape(await p.admit()), admitted(0, false));
  if (first.kind !== 'admitted') throw new Error('unreachable');
  first.release?.();
  first.release?.(); // a second call would mint a token never charged
  assert.deepEqual(shape(await settled(p.admit(), 'the third')), admitted(0, false));
  await admitsLater(p, time, 'the bucket is empty again: the fourth waits', 1_000, 1_000);
});

test('at the debt floor release() hands back only the fraction the admission debited', async () => {
  const time = new FakeTime(0);
  // No retries: nothing is refused; the bound is 9667 / 2 = 4833 ms and the
  // floor 4.833 tokens of debt. Six at once: 0, 1000 … 4000, then the sixth
  // debits the 0.833 left above the floor and waits the bound.
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 1, idleTimeoutMs: 9_667, maxRetries: 0 });
  assert.equal(p.maxWaitMs, 4_833);
  const got = Array.from({ length: 6 }, () => p.admit());
  await time.advance(4_833);
  const all = await Promise.all(got);
  assert.deepEqual(all.map(shape), [
    admitted(0, false), admitted(1_000, true), admitted(2_000, true), admitted(3_000, true),
    admitted(4_000, true), admitted(4_833, true),
  ]);
  const sixth = all[5];
  if (sixth.kind !== 'admitted') throw new Error('unreachable');
  sixth.release?.(); // 0 tokens at t=4833, plus 0.833
  await time.advance(67); // t=4900: 0.9 tokens, so the next one waits 100 ms
  await admitsLater(p, time, 'a whole token refunded would have admitted it at once', 200, 100);
});

test('a clock that steps back mid-wait still reads queued', async () => {
  const time = new FakeTime(10_000);
  let behind = 0;
  const p = new WsUpgradePacer({
    now: () => time.now() - behind, schedule: time.schedule, burst: 1, idleTimeoutMs: 120_000, maxRetries: 5,
  });
  assert.deepEqual(shape(await p.admit()), admitted(0, false));
  const second = watch(p.admit());
  behind = 5_000; // the clock steps back 5 s while the request waits its 1 s
  await time.advance(1_000);
  assert.deepEqual(shape(second.value!), admitted(0, true));
});

test('an abort while queued gives the slot back; an aborted signal spends none', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 1, idleTimeoutMs: 120_000, maxRetries: 5 });
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(p.admit(controller.signal), { name: 'AbortError' });
  assert.deepEqual(shape(await p.admit()), admitted(0, false), 'the aborted call took nothing');
  const waiting = new AbortController();
  const queued = p.admit(waiting.signal);
  waiting.abort();
  await assert.rejects(queued, { name: 'AbortError' });
  const next = watch(p.admit());
  await time.advance(1_000);
  assert.deepEqual(shape(next.value!), admitted(1_000, true), 'second in line, not third');
});

test('the call site: a request that waited and then found an idle connection returns its token', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 1, idleTimeoutMs: 120_000, maxRetries: 5 });
  assert.equal((await openUpstream({ pacer: p })).outcome, 'opened');
  const reused = openUpstream({ pacer: p, idleConnectionAfterWait: () => true });
  await time.advance(1_000);
  assert.equal((await reused).outcome, 'reused');
  // Its token came back at t+1000: the next opens at once.
  const next = await settled(openUpstream({ pacer: p }), 'the next request');
  assert.equal(next.outcome, 'opened');
  assert.deepEqual(next.outcome === 'opened' && shape(next.admission), admitted(0, false));
});

test('settings text reads as the host reads it: Number, then an integer', () => {
  const warnings: string[] = [];
  const warn = (message: string) => warnings.push(message);
  const rate = (value: string) => wsNewConnectionsPerMinute({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: value }, warn);
  assert.equal(rate('   '), 60);
  assert.equal(rate(' 90 '), 90);
  assert.equal(rate('0'), 0);
  assert.equal(rate('1e2'), 100);
  assert.equal(rate('0x10'), 16);
  assert.equal(rate('60.0'), 60);
  assert.equal(rate('600'), 600);
  assert.deepEqual(warnings, []);
  assert.equal(rate('601'), 600);
  assert.equal(rate('5000'), 600);
  assert.deepEqual(warnings, [
    'clamping CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=601 to 600 (a higher rate shapes nothing OpenAI throttles on)',
    'clamping CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=5000 to 600 (a higher rate shapes nothing OpenAI throttles on)',
  ]);
  for (const bad of ['abc', '-1', '12.5', 'Infinity', 'NaN', '1,000']) {
    warnings.length = 0;
    assert.equal(rate(bad), 60, bad);
    assert.equal(rate(bad), 60, bad);
    assert.deepEqual(warnings, [
      `ignoring CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=${bad} (expected a non-negative integer; using 60)`,
    ], bad);
  }
  assert.equal(wsNewConnectionsPerMinute({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: 'x' }, () => {
    throw new Error('boom');
  }), 60);
});

test('notices travel the host channel as clodex: lines, once each', () => {
  assert.equal(wsNewConnectionsPerMinute({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: 'abc' }), 60);
  assert.equal(wsNewConnectionsPerMinute({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: 'abc' }), 60);
  // A 10 s deadline cannot hold 5 retries' backoff (62 s): no room to queue.
  const off = new WsUpgradePacer({ ratePerMinute: 60, idleTimeoutMs: 10_000, maxRetries: 5 });
  assert.equal(off.maxWaitMs, 0);
  // At 2/minute a 5-retry schedule (20 s) cannot outlast a 30 s slot.
  const slow = new WsUpgradePacer({ ratePerMinute: 2, idleTimeoutMs: 120_000, maxRetries: 5 });
  assert.equal(slow.maxWaitMs, 4_833);
  assert.deepEqual(lines, [
    'clodex: ignoring CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=abc (expected a non-negative integer; using 60)\n',
    'clodex: not pacing new OpenAI connections: a 5-retry budget leaves no room to queue inside the '
      + 'resolved 10000ms request deadline\n',
    'clodex: pacing new OpenAI connections at 2/minute without refusing overflow: a 5-retry schedule '
      + 'spans only 20000ms, which cannot outlast the 30000ms wait for a free connection slot, so clodex '
      + 'shapes the opening burst and then admits remaining overflow instead of failing it\n',
  ]);
});

test('the shared pacer sizes its bound by the host request budget', async () => {
  const before = budgetCalls;
  process.env.CLODEX_UPSTREAM_IDLE_TIMEOUT_MS = '9667';
  process.env.CLODEX_UPSTREAM_MAX_RETRIES = '0';
  const shared = sharedWsUpgradePacer() as InstanceType<typeof WsUpgradePacer>;
  assert.equal(shared.maxWaitMs, 4_833, 'bound(9667, 0) from the host budget');
  assert.ok(budgetCalls > before, 'the host budget was asked');
  assert.equal(sharedWsUpgradePacer(), shared, 'one per process');
  assert.deepEqual(shape(await shared.admit()), admitted(0, false));
  resetWsUpgradePacerForTests();
  delete process.env.CLODEX_UPSTREAM_IDLE_TIMEOUT_MS;
  process.env.CLODEX_UPSTREAM_MAX_RETRIES = 'many';
  const defaults = sharedWsUpgradePacer() as InstanceType<typeof WsUpgradePacer>;
  assert.equal(defaults.maxWaitMs, 4_833, 'bound(120000, 5): the fixture budget ignored "many"');
  assert.deepEqual(lines, ['clodex: fixture budget ignores CLODEX_UPSTREAM_MAX_RETRIES=many\n']);
});

/** A fake upstream: answers each upgrade with the next status given. */
function upstream(...statuses: number[]): () => Promise<{ status: number }> {
  return async () => {
    const status = statuses.shift();
    if (status === undefined) throw new Error('the fake upstream ran out of answers');
    return { status };
  };
}

// Adaptive pacing (opt-in), worked out by hand from the law's statement
// (core/src/adaptive.rs): retries 5, idle 120000 (bound 4833 ms, hint cap
// 4 s, schedule 20000 ms) make 3/min the lowest rate that can refuse, so
// the rate in force stays in [max(10, 3), 60] = [10, 60]. At 60/minute with
// the default ceiling (the rate) it reads 60 while it searches. The host's
// classification of a 429 or 403 reports a throttle. The pacer is created
// at 1_000_000; the first upgrade comes 60000 ms later, so its throttle ends
// the first search a minute after the creation: no pause (a throttle sooner
// would read the lowest, 10, until creation + 60000). With nothing counted,
// B = min(R, L) = 60 and L = 60 − max(1, ⌊60/16⌋ = 3) = 57, origin
// 1_060_000, and the rate in force is 57, where a token takes
// ⌈60000/57⌉ = ⌈1052.63⌉ = 1053 ms to refill, not 1000. A throttle within
// 60000 ms of the origin changes nothing (the hold); a 101 is counted (one
// opening, at 1_061_053, minute ⌊1_061_053/60000⌋ = 17). A throttle at
// 1_120_000 (Δ = 60000, no longer held; minute 18, so the count rolls:
// before 1, this minute 0): probing, E = through = 1; R = 57 (the step to
// 57 + 28 + 2 only from Δ = 60000 + max(240000, ⌊80·60000/57⌋ = 84210)/12 =
// 80000); E = 1 < R, so L = 1, clamped to the floor: 10.
test('adaptive: the upgrade answers the host classifies reach the pacer; a 429 or 403 lowers the rate in force', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({
    now: time.now, schedule: time.schedule, burst: 2, idleTimeoutMs: 120_000, maxRetries: 5,
    adaptive: { floorPerMinute: 10 },
  });
  const upgrade = upstream(429, 429, 101, 429, 403);
  assert.equal(p.rateInForce(), 60);
  await time.advance(60_000);
  assert.equal(p.rateInForce(), 60, 'still searching');
  assert.deepEqual(await upgradeUpstream({ pacer: p, upgrade }), { outcome: 'rate-limited', status: 429 });
  assert.equal(p.rateInForce(), 57);
  // The burst's second token: admitted at once; its 429 changes nothing.
  assert.deepEqual(await upgradeUpstream({ pacer: p, upgrade }), { outcome: 'rate-limited', status: 429 });
  assert.equal(p.rateInForce(), 57);
  // The bucket is empty: the third waits a token at 57/minute.
  const third = watch(upgradeUpstream({ pacer: p, upgrade }));
  await time.advance(1_052);
  assert.equal(third.value, undefined, 'still waiting after 1052 ms');
  await time.advance(1);
  assert.deepEqual(third.value, { outcome: 'upgraded' });
  // 1 ms short of a minute after the throttle (the bucket full again): held.
  await time.advance(60_000 - 1 - 1_053);
  assert.deepEqual(await upgradeUpstream({ pacer: p, upgrade }), { outcome: 'rate-limited', status: 429 });
  assert.equal(p.rateInForce(), 57);
  await time.advance(1);
  assert.deepEqual(await upgradeUpstream({ pacer: p, upgrade }), { outcome: 'rate-limited', status: 403 });
  assert.equal(p.rateInForce(), 10);
});

test('adaptive off (no settings): the same answers change nothing', async () => {
  const time = new FakeTime();
  const p = new WsUpgradePacer({ now: time.now, schedule: time.schedule, burst: 1, idleTimeoutMs: 120_000, maxRetries: 5 });
  const upgrade = upstream(429, 101);
  assert.deepEqual(await upgradeUpstream({ pacer: p, upgrade }), { outcome: 'rate-limited', status: 429 });
  assert.equal(p.rateInForce(), 60);
  const second = watch(upgradeUpstream({ pacer: p, upgrade }));
  await time.advance(1_000);
  assert.deepEqual(second.value, { outcome: 'upgraded' }, 'waited 1000 ms, the rate as configured');
});

test('adaptive: the shared pacer turns it on from CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN; the call site reports to it', async () => {
  process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN = '10';
  try {
    const shared = sharedWsUpgradePacer() as InstanceType<typeof WsUpgradePacer>;
    assert.equal(shared.rateInForce(), 60);
    assert.deepEqual(await upgradeUpstream({ upgrade: upstream(429) }), { outcome: 'rate-limited', status: 429 });
    // The real clock moves on, but well within a minute of the creation:
    // the throttle, nothing counted, ended the first search at L = 60 −
    // max(1, ⌊60/16⌋) = 57 and paused, so until creation + 60000 the rate in
    // force reads the lowest, max(10, 3) = 10 (3/min the lowest rate that
    // can refuse at the default budget).
    assert.equal(shared.rateInForce(), 10);
    assert.deepEqual(lines, []);
  } finally {
    delete process.env.CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN;
  }
});
