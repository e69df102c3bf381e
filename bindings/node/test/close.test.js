'use strict';
// close(): every call on a closed pacer throws (or rejects with) one
// documented error, code 'ERR_PACER_CLOSED', whose message names the close;
// an admit still waiting when close() is called gets its slot refunded and
// rejects with that error at once, so an abort of its signal afterwards
// changes nothing. Clocks and timers are injected (FakeTime) where the
// pacer takes them; a shared pacer reads the machine clock, so its tests
// use a budget whose numbers do not depend on how much of it passes.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { SharedPacer } = require('../index.js');
// smallPacer: rate 60, burst 1, idle 30000, retries 3: bound 2000 (SPEC
// §3), one token a second; the second request at t=0 waits 1000 ms.
const { FakeTime, flush, quiet, smallPacer, oneQueued, counts } = require('./helpers.js');

const dir = process.env.PACER_SHM_TEST_DIR || fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-close-'));
if (!process.env.PACER_SHM_TEST_DIR) test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

function sharedPath(what) {
  const p = path.join(dir, `pacer-node-close-${process.pid}-${what}`);
  fs.rmSync(p, { force: true });
  return p;
}

/** The closed error: a plain Error with the documented code, naming close(). */
function isClosedError(e) {
  return e instanceof Error && e.code === 'ERR_PACER_CLOSED' && /close\(\)/.test(e.message);
}

test('Pacer: every call after close() throws ERR_PACER_CLOSED; getters and counters still answer', async () => {
  const time = new FakeTime();
  const pacer = smallPacer(time);
  const admitted = pacer.reserve(0);
  assert.equal(pacer.closed, false);
  pacer.close();
  pacer.close(); // idempotent
  assert.equal(pacer.closed, true);
  await assert.rejects(pacer.admit(), isClosedError);
  await assert.rejects(pacer.admit({ key: 'k' }), isClosedError);
  assert.throws(() => pacer.reserve(0), isClosedError);
  assert.throws(() => pacer.release(admitted.ticket, 0), isClosedError);
  assert.equal(admitted.ticket.spent, false, 'a refused release leaves the ticket live');
  assert.throws(() => pacer.reserveOrBook(0, 5), isClosedError);
  assert.throws(() => pacer.forget('k', 0), isClosedError);
  assert.throws(() => pacer.state(), isClosedError);
  assert.equal(pacer.waitBoundMs, 2000);
  assert.equal(pacer.mode, 'refusing');
  assert.deepEqual(pacer.counters(), counts({ admitted: 1 }));
});

test('Pacer: close() while an admit waits refunds its slot and rejects it; a later abort changes nothing', async () => {
  const { time, pacer, controller, queued } = await oneQueued();
  const outcome = queued.then(() => 'resolved', (e) => e);
  assert.equal(time.pending().length, 1, 'queued for 1000 ms');
  await time.advance(300);
  pacer.close();
  assert.equal(time.pending().length, 0, 'close() cancelled the timer');
  controller.abort(new Error('client went away'));
  await flush();
  const error = await outcome;
  assert.ok(isClosedError(error), `rejected with ${error}`);
  // The refund happened in close(), once: released 1, refunded 1. The
  // queued admission's wait, 1000 ms, is in the bucket of 1000 (index 4).
  assert.deepEqual(pacer.counters(), counts({
    admitted: 2, admittedAfterWait: 1, released: 1, refunded: 1, waitMsTotal: 1000,
    waitBuckets: [0, 0, 0, 0, 1, 0, 0, 0],
  }));
  await time.advance(5000);
  assert.equal(pacer.counters().released, 1, 'nothing released again');
});

test('Pacer: an abort before close() keeps the abort reason and refunds once', async () => {
  const { pacer, controller, queued } = await oneQueued();
  const reason = new Error('client went away');
  controller.abort(reason);
  pacer.close(); // same tick: the admit has not seen its rejection yet
  await assert.rejects(queued, (e) => e === reason);
  assert.deepEqual([pacer.counters().released, pacer.counters().refunded], [1, 1]);
});

test('Pacer: an admission granted before close() cannot be released after it', async () => {
  const time = new FakeTime();
  const pacer = smallPacer(time);
  const admission = await pacer.admit();
  pacer.close();
  assert.throws(() => admission.release(), isClosedError);
});

// Shaping with no retries at 1/minute: bound min(15000, 3600000/2) = 15000,
// max debt 15000 units. The first request takes the one token; the second
// needs about 60000 ms > bound, so it is shaped: it waits exactly the bound
// and debits its tokens plus the max debt, leaving the bucket at the floor,
// -15000 units. Both hold however long the machine takes between the two
// calls (short of 45 s).
const shaping = { ratePerMinute: 1, burst: 1, idleTimeoutMs: 3600000, maxRetries: 0, onNotice: quiet };

test('SharedPacer: close() while an admit waits refunds the slot to the shared bucket and rejects it', async () => {
  const p = sharedPath('waiting');
  const time = new FakeTime();
  const a = SharedPacer.open(p, { ...shaping, schedule: time.schedule });
  const b = SharedPacer.open(p, shaping);
  try {
    assert.equal((await a.admit()).queued, false);
    const controller = new AbortController();
    const queued = a.admit({ signal: controller.signal });
    const outcome = queued.then(() => 'resolved', (e) => e);
    assert.deepEqual(time.pending().map((t) => t.ms), [15000], 'shaped: waits the bound');
    assert.equal(b.state().tokensUnits, -15000, 'at the debt floor');
    a.close();
    controller.abort(new Error('client went away'));
    await flush();
    const error = await outcome;
    assert.ok(isClosedError(error), `rejected with ${error}`);
    assert.equal(time.pending().length, 0, 'close() cancelled the timer');
    // The refund (at least the 15000 units of max debt) came back before the
    // view was unmapped: the bucket is out of debt, seen through b.
    assert.ok(b.state().tokensUnits >= 0, `tokens ${b.state().tokensUnits}`);
    assert.deepEqual([a.counters().released, a.counters().refunded], [1, 1]);
  } finally {
    a.close();
    b.close();
    SharedPacer.unlink(p);
  }
});

test('SharedPacer: every call after close() throws ERR_PACER_CLOSED (admit, reserve, release, state)', async () => {
  const p = sharedPath('calls');
  const s = SharedPacer.open(p, { ...shaping, schedule: new FakeTime().schedule });
  const d = s.reserve();
  s.close();
  s.close();
  try {
    assert.equal(s.closed, true);
    await assert.rejects(s.admit(), isClosedError);
    assert.throws(() => s.reserve(), isClosedError);
    assert.throws(() => s.release(d.ticket), isClosedError);
    assert.throws(() => s.state(), isClosedError);
    assert.equal(s.counters().admitted, 1, 'counters still answer');
    assert.equal(s.waitBoundMs, 15000);
  } finally {
    SharedPacer.unlink(p);
  }
});
