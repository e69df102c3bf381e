'use strict';
// The idiomatic API: admit() with an injected clock and scheduler (nothing
// sleeps), abort before / during / after the wait, release at most once,
// refusal shapes, notices, and bad input. Expected numbers are worked out by
// hand from SPEC §3-§7 in the comments.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Pacer, NoticeRegistry, resolveBudget, refusalResponse, Ticket } = require('../index.js');
// smallPacer: rate 60, burst 1, idle 30000, retries 3: bound
// floor((30000-14000)/8) = 2000, cap 2 s, schedule 3·2000 = 6000 >= 1000:
// refusing.
const { FakeTime, flush, quiet, smallPacer, oneQueued, counts } = require('./helpers.js');

test('defaults: bound 4833, refusing', () => {
  const pacer = new Pacer({ onNotice: quiet });
  assert.equal(pacer.waitBoundMs, 4833);
  assert.equal(pacer.mode, 'refusing');
  assert.deepEqual(pacer.config, {
    ratePerMinute: 60, burst: 10, idleTimeoutMs: 120000, maxRetries: 5, releasePolicy: 'refund',
  });
});

test('admit: immediate, queued, then refused with the capped hint', async () => {
  const time = new FakeTime(1000);
  const pacer = smallPacer(time);
  const first = await pacer.admit();
  assert.equal(first.kind, 'admitted');
  assert.equal(first.waitedMs, 0);
  assert.equal(first.queued, false);

  const second = pacer.admit();
  const third = pacer.admit();
  // The fourth needs 3000 ms > bound 2000: refused, hint min(ceil(3000/1000), 2) = 2.
  assert.deepEqual(await pacer.admit(), { kind: 'refused', requiredWaitMs: 3000, retryAfterSeconds: 2 });
  assert.deepEqual(time.pending().map((t) => t.ms), [1000, 2000]);
  await time.advance(1000);
  const s = await second;
  assert.equal(s.kind, 'admitted');
  assert.equal(s.waitedMs, 1000);
  assert.equal(s.queued, true);
  await time.advance(1000);
  assert.equal((await third).waitedMs, 2000);
  // Waits of 1000 and 2000 ms: in the buckets of 1000 (index 4) and 2500
  // (index 5).
  assert.deepEqual(pacer.counters(), counts({
    admitted: 3, admittedAfterWait: 2, refused: 1, waitMsTotal: 3000, waitBuckets: [0, 0, 0, 0, 1, 1, 0, 0],
  }));
});

test('abort before admit: rejects with the reason, nothing reserved', async () => {
  const time = new FakeTime();
  const pacer = smallPacer(time);
  const controller = new AbortController();
  const reason = new Error('client went away');
  controller.abort(reason);
  await assert.rejects(pacer.admit({ signal: controller.signal }), (e) => e === reason);
  assert.equal(pacer.counters().admitted, 0);
  assert.equal(pacer.reserve(0).waitMs, 0, 'the token is still there');
});

test('abort during the wait: AbortError, the slot goes back', async () => {
  const { time, pacer, controller, queued } = await oneQueued();
  assert.equal(time.pending().length, 1);
  await time.advance(300);
  controller.abort();
  await assert.rejects(queued, (e) => e instanceof DOMException && e.name === 'AbortError');
  assert.equal(time.pending().length, 0, 'the timer was cancelled');
  // Refunded: at t=300 tokens are -1 + 0.3 + 1 = 0.3, so the next waits 700
  // (without the refund it would wait 1700).
  assert.equal(pacer.reserve(300).waitMs, 700);
  assert.equal(pacer.counters().refunded, 1);
});

test('abort after admission changes nothing', async () => {
  const { time, pacer, controller, queued } = await oneQueued();
  await time.advance(1000);
  const admission = await queued;
  controller.abort();
  await flush();
  assert.equal(admission.kind, 'admitted');
  assert.equal(pacer.counters().released, 0);
  // t=1000: tokens -1 + 1 = 0, next waits 1000.
  assert.equal(pacer.reserve(1000).waitMs, 1000);
});

test('release at most once', async () => {
  const time = new FakeTime();
  const pacer = smallPacer(time);
  const admission = await pacer.admit();
  assert.equal(admission.release(), true);
  assert.equal(admission.release(), false);
  const decision = pacer.reserve(0);
  assert.equal(pacer.release(decision.ticket, 0), true);
  assert.equal(decision.ticket.spent, true);
  assert.equal(pacer.release(decision.ticket, 0), false);
  assert.deepEqual(
    [pacer.counters().released, pacer.counters().refunded],
    [2, 2],
    'the spent release never reached the core',
  );
  // A ticket from another pacer is unknown here.
  const other = smallPacer(time).reserve(0).ticket;
  assert.equal(pacer.release(other, 0), false);
});

test('strict policy: a release behind a later debit is not refunded', () => {
  const time = new FakeTime();
  const pacer = smallPacer(time, { releasePolicy: 'strict', burst: 2 });
  const a = pacer.reserve(0).ticket;
  const b = pacer.reserve(0).ticket;
  assert.equal(pacer.release(a, 0), false, 'b debited after a');
  assert.equal(pacer.release(b, 0), true);
});

test('shaping modes and disabled pacing report their path', () => {
  // retries 0 at idle 120000: bound min(15000, 120000/2) = 15000, shaping.
  const noRetry = new Pacer({ burst: 1, maxRetries: 0, now: () => 0, onNotice: quiet });
  assert.equal(noRetry.mode, 'shaping-no-retry');
  assert.equal(noRetry.reserve(0).path, 'paced');
  const paced = noRetry.reserve(0);
  assert.deepEqual([paced.path, paced.waitMs], ['paced', 1000]);
  const off = new Pacer({ ratePerMinute: 0, now: () => 0, onNotice: quiet });
  assert.equal(off.mode, 'disabled');
  const d = off.reserve(0);
  assert.deepEqual([d.path, d.waitMs, d.ticket], ['disabled', 0, null]);
});

test('low rate: norefuse notice once, overflow shaped then admitted', () => {
  const seen = [];
  const registry = new NoticeRegistry();
  const make = () => new Pacer({
    ratePerMinute: 1, burst: 1, now: () => 0, onNotice: (n) => seen.push(n), noticeRegistry: registry,
  });
  const pacer = make();
  make();
  assert.equal(pacer.mode, 'shaping-low-rate');
  assert.equal(seen.length, 1);
  assert.equal(seen[0].kind, 'norefuse');
  assert.equal(seen[0].key, 'norefuse:1:5:4833');
  assert.match(seen[0].text, /a 5-retry schedule spans only 20000ms, which cannot outlast the 60000ms wait/);
  // max_debt = 4833/60000 token = 4833 units. First: the one token. Second:
  // debit min(1 token, 0 + 4833 units) = 4833 units, waits the bound. Third:
  // at the floor, admitted at once with nothing debited.
  assert.equal(pacer.reserve(0).path, 'paced');
  const shaped = pacer.reserve(0);
  assert.deepEqual([shaped.path, shaped.waitMs, shaped.ticket.debitUnits], ['shaped', 4833, 4833]);
  const overflow = pacer.reserve(0);
  assert.deepEqual([overflow.path, overflow.waitMs, overflow.ticket], ['overflow', 0, null]);
});

test('a clock behind the last reading refills nothing', () => {
  const pacer = smallPacer(new FakeTime());
  assert.equal(pacer.reserve(10000).clockRegressed, false);
  const back = pacer.reserve(5000);
  assert.deepEqual([back.waitMs, back.clockRegressed], [1000, true]);
  assert.equal(pacer.counters().clockRegressions, 1);
});

test('fromEnv: settings text, notices once each, never a failure', () => {
  const seen = [];
  const registry = new NoticeRegistry();
  const env = { PACER_RATE_PER_MIN: ' 1e2 ', PACER_IDLE_TIMEOUT_MS: '30000' };
  const pacer = Pacer.fromEnv(env, { onNotice: (n) => seen.push(n), noticeRegistry: registry, now: () => 0 });
  Pacer.fromEnv(env, { onNotice: (n) => seen.push(n), noticeRegistry: registry, now: () => 0 });
  assert.deepEqual(pacer.config, {
    ratePerMinute: 60, burst: 10, idleTimeoutMs: 30000, maxRetries: 3, releasePolicy: 'refund',
  });
  assert.deepEqual(seen.map((n) => [n.kind, n.key, n.raw]), [['rate_malformed', 'rate: 1e2 ', ' 1e2 ']]);
  // A hostile rate text cannot suppress the disabled notice (namespaced keys).
  const hostile = [];
  Pacer.fromEnv({ PACER_RATE_PER_MIN: 'disabled:3:14001', PACER_IDLE_TIMEOUT_MS: '14001' },
    { onNotice: (n) => hostile.push(n.kind), noticeRegistry: new NoticeRegistry(), now: () => 0 });
  assert.deepEqual(hostile, ['rate_malformed', 'pacing_disabled']);
  // A throwing sink never fails the call.
  assert.doesNotThrow(() => Pacer.fromEnv({ PACER_MAX_RETRIES: 'x' },
    { onNotice: () => { throw new Error('sink down'); }, noticeRegistry: new NoticeRegistry() }));
  const budget = resolveBudget({ PACER_TOTAL_TIMEOUT_MS: '60000', PACER_IDLE_TIMEOUT_MS: '600000' },
    { onNotice: quiet, noticeRegistry: new NoticeRegistry() });
  // Pair rule: total set explicitly and shorter, so idle is lowered to 60000;
  // ladder ceiling 4, bound floor((60000-30000)/10) = 3000.
  assert.deepEqual([budget.idleTimeoutMs, budget.maxRetries, budget.waitBoundMs], [60000, 4, 3000]);
});

test('refusalResponse: the SPEC §9 frame', () => {
  const r = refusalResponse(4, { messagePrefix: 'proxy says "slow down"' });
  assert.equal(r.status, 200);
  assert.deepEqual(r.headers, { 'content-type': 'text/event-stream; charset=utf-8', 'retry-after': '4' });
  assert.equal(r.body,
    'data: {"type":"error","sequence_number":0,"error":{"type":"rate_limit_error","code":"429",'
    + '"message":"proxy says \\"slow down\\"; retry after 4s","param":null,"retry_after_seconds":4}}\n\n');
  assert.equal(new Response(r.body, r).headers.get('retry-after'), '4');
});

test('bad input throws TypeError/RangeError naming the field and changes nothing', async () => {
  const time = new FakeTime();
  const cases = [
    [{ ratePerMinute: '60' }, TypeError, /ratePerMinute/],
    [{ ratePerMinute: NaN }, RangeError, /ratePerMinute/],
    [{ ratePerMinute: 601 }, RangeError, /ratePerMinute/],
    [{ ratePerMinute: -1 }, RangeError, /ratePerMinute/],
    [{ ratePerMinute: 1.5 }, RangeError, /ratePerMinute/],
    [{ burst: Infinity }, RangeError, /burst/],
    [{ idleTimeoutMs: -5 }, RangeError, /idleTimeoutMs/],
    [{ idleTimeoutMs: 10n }, TypeError, /idleTimeoutMs/],
    [{ maxRetries: 6 }, RangeError, /maxRetries/],
    [{ idleTimeoutMs: 10000, maxRetries: 3 }, RangeError, /maxRetries/],
    [{ releasePolicy: 'lenient' }, RangeError, /releasePolicy/],
    [{ releasePolicy: 1 }, TypeError, /releasePolicy/],
    [{ now: 5 }, TypeError, /now/],
    [{ schedule: 'soon' }, TypeError, /schedule/],
    [{ now: () => NaN }, RangeError, /now\(\)/],
  ];
  for (const [options, type, field] of cases) {
    assert.throws(() => new Pacer({ onNotice: quiet, ...options }),
      (e) => e instanceof type && field.test(e.message), String(Object.keys(options)));
  }
  const pacer = smallPacer(time);
  for (const bad of [NaN, -1, 0.5, Infinity, 2 ** 53, '0', undefined]) {
    assert.throws(() => pacer.reserve(bad), (e) => (e instanceof TypeError || e instanceof RangeError)
      && /nowMs/.test(e.message), String(bad));
  }
  const ticket = pacer.reserve(0).ticket;
  assert.throws(() => pacer.release({ seq: 1, debitUnits: 60000 }, 0), TypeError);
  assert.throws(() => pacer.release(ticket, -1), RangeError);
  assert.equal(ticket.spent, false, 'a rejected release leaves the ticket live');
  assert.throws(() => refusalResponse(1.5), RangeError);
  await assert.rejects(pacer.admit({ signal: 'abort' }), TypeError);
  // Nothing above debited: the state is one reserve at t=0 (tokens 1 - 1 = 0).
  assert.equal(pacer.counters().admitted, 1);
  assert.equal(pacer.state().tokensUnits, 0);
  assert.ok(Ticket.isTicket(ticket));
});

test('release at the debt floor hands back the fraction debited, not a token (SPEC §4, §13)', () => {
  // rate 60, burst 1, idle 9667, retries 0: bound 9667/2 = 4833, shaping,
  // floor 4.833 tokens of debt. Six at t=0: 0, 1000 … 4000, then the sixth
  // debits the 0.833 left above the floor and waits the bound.
  const time = new FakeTime(0); // the pacer's clock starts at 0, as the calls below
  const pacer = new Pacer({
    ratePerMinute: 60, burst: 1, idleTimeoutMs: 9667, maxRetries: 0, now: time.now, onNotice: quiet,
  });
  const waits = [];
  let sixth;
  for (let i = 0; i < 6; i += 1) {
    sixth = pacer.reserve(0);
    waits.push([sixth.waitMs, sixth.queued, sixth.path]);
  }
  assert.deepEqual(waits, [[0, false, 'paced'], [1000, true, 'paced'], [2000, true, 'paced'],
    [3000, true, 'paced'], [4000, true, 'paced'], [4833, true, 'shaped']]);
  // At 4833 the bucket has refilled to 0; the release adds 0.833, and by
  // 4900 it holds 0.9: the next waits 100 ms (a whole token: 0 ms).
  assert.equal(pacer.release(sixth.ticket, 4833), true);
  assert.equal(pacer.release(sixth.ticket, 4833), false, 'at most once');
  const next = pacer.reserve(4900);
  assert.equal(next.waitMs, 100);
  assert.equal(next.queued, true);
});
