'use strict';
// The addon's hand-written hot calls (src/hot.rs): `reserveHot(handle)` and
// `reserveSharedHot(handle)` over the handles pacers give out, with the
// clock and the code passing through `exchange`, and the `floorNoop`
// benchmark floor.
const test = require('node:test');
const assert = require('node:assert/strict');
const os = require('node:os');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');
const { native, decodeDecision } = require('../native.js');

// The call as `reserveCode` in native.js makes it, written out here so the
// test reads the exchange itself.
function hot(handle, nowMs) {
  native.exchange[0] = nowMs;
  const returned = native.reserveHot(handle);
  assert.equal(returned, undefined);
  return native.exchange[1];
}

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

// 60/min, burst 2, defaults otherwise (wait bound 4833 ms, refusing): at
// t=0 two admissions wait nothing, the next four wait 1000..4000 ms (one
// token a second), the seventh would wait 5000 ms and is refused with the
// 4-second hint cap. Codes as in src/lib.rs `encode`: admitted
// `8·(seq·2^14 + wait_ms) + path` (paced = 1), refused
// `−(1 + 32·required_wait_ms + 2·retry_after_s + regressed)`.
const TWO_BURST = new native.NativeConfig(60, 2, 120000, 5, false);

function twoBurst() {
  return new native.NativePacer(TWO_BURST, 0);
}

test('reserveHot gives the encoded decision', () => {
  const handle = twoBurst().handle();
  assert.equal(hot(handle, 0), 8 * (1 * 16384 + 0) + 1);
  assert.equal(hot(handle, 0), 8 * (2 * 16384 + 0) + 1);
  for (let seq = 3; seq <= 6; seq++) {
    assert.equal(hot(handle, 0), 8 * (seq * 16384 + (seq - 2) * 1000) + 1);
  }
  assert.equal(hot(handle, 0), -(1 + 32 * 5000 + 2 * 4 + 0));
  assert.equal(hot(handle, 0), -(1 + 32 * 5000 + 2 * 4 + 0));
});

test('the hot call and the class method act on one pacer and one set of counters', () => {
  const pacer = twoBurst();
  const handle = pacer.handle();
  for (let i = 0; i < 3; i++) assert.ok(hot(handle, 0) > 0);
  for (let i = 0; i < 3; i++) assert.ok(pacer.reserve(0) > 0);
  assert.ok(hot(handle, 0) < 0);
  assert.ok(pacer.reserve(0) < 0);
  // [admitted, admitted after a wait, refused]; the state's seq counts debits.
  assert.deepEqual(pacer.counters().slice(0, 3), [6, 4, 2]);
  assert.equal(pacer.state()[2], 6);
});

test('each handle reaches its own pacer', () => {
  const a = twoBurst();
  const b = twoBurst();
  const [ha, hb] = [a.handle(), b.handle()];
  for (let i = 0; i < 6; i++) hot(ha, 0);
  assert.equal(hot(hb, 0), 8 * 16384 + 1);
  assert.ok(hot(ha, 0) < 0);
  assert.deepEqual([a.state()[2], b.state()[2]], [6, 1]);
});

test('bad arguments throw a TypeError and change nothing', () => {
  const pacer = twoBurst();
  const handle = pacer.handle();
  const before = pacer.state();
  // The exchange holds doubles: anything written there is a number already.
  // Negative, infinite or NaN (which a non-number becomes) is a TypeError.
  native.exchange[1] = 12345;
  for (const bad of [NaN, -1, -0.5, Infinity, -Infinity, undefined, {}]) {
    assert.throws(() => hot(handle, bad), (e) => e instanceof TypeError && /nowMs must be a finite number of ms, 0 or more/.test(e.message));
    assert.equal(native.exchange[1], 12345, 'nothing written back');
  }
  assert.throws(() => native.reserveHot(), (e) => e instanceof TypeError && /not a pacer handle/.test(e.message));
  for (const notHandle of [undefined, 1, {}, pacer, () => {}]) {
    assert.throws(() => hot(notHandle, 0), (e) => e instanceof TypeError && /not a pacer handle/.test(e.message));
  }
  // A handle of the other kind indexes the other table: unknown there.
  const shared = native.NativeSharedPacer.open(path.join(os.tmpdir(), `pacer-hot-${process.pid}`), TWO_BURST);
  try {
    assert.throws(() => hot(shared.handle(), 0), /not a pacer handle/);
    assert.throws(() => native.reserveSharedHot(handle), /not a pacer handle/);
  } finally {
    shared.close();
    native.unlinkShared(path.join(os.tmpdir(), `pacer-hot-${process.pid}`));
  }
  assert.deepEqual(pacer.state(), before);
  // The 12 counts and the 8 wait buckets (src/lib.rs, counters_of).
  assert.deepEqual(pacer.counters(), new Array(20).fill(0));
});

test('a handle keeps its pacer alive after the class object is gone', async () => {
  let handle = twoBurst().handle();
  assert.ok(hot(handle, 0) > 0);
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(hot(handle, 0), 8 * (2 * 16384) + 1);
  assert.equal(hot(handle, 0), 8 * (3 * 16384 + 1000) + 1);
  handle = null;
  gc();
});

test('reserveSharedHot decides at the shared clock and throws SHARED_NOT_OPEN once closed', () => {
  const file = path.join(os.tmpdir(), `pacer-hot-shared-${process.pid}`);
  const shared = native.NativeSharedPacer.open(file, TWO_BURST);
  try {
    const handle = shared.handle();
    assert.equal(native.reserveSharedHot(handle), undefined);
    const first = decodeDecision(native.exchange[1], 4833);
    assert.equal(first.admitted, true);
    assert.equal(first.seq, 1);
    assert.equal(shared.state()[2], 1);
    shared.close();
    assert.throws(() => native.reserveSharedHot(handle), (e) => /^SHARED_NOT_OPEN: /.test(e.message));
  } finally {
    shared.close();
    native.unlinkShared(file);
  }
});

test('a code that is not a number (a detached exchange reads undefined) fails clearly', () => {
  for (const code of [undefined, null, '5', 5n]) {
    assert.throws(() => decodeDecision(code, 4833), (e) => /answered no decision/.test(e.message));
  }
  assert.deepEqual(decodeDecision(-(1 + 32 * 5000 + 2 * 4), 4833),
    { admitted: false, requiredWaitMs: 5000, retryAfterSeconds: 4, clockRegressed: false });
});

test('floorNoop takes nothing and returns undefined', () => {
  assert.equal(typeof native.floorNoop, 'function');
  assert.equal(native.floorNoop(), undefined);
  assert.equal(native.floorNoop(1, 'x'), undefined);
});

test('codes past 2^32 decode exactly (the fields come out with & and division)', () => {
  // Built from the encoding in src/lib.rs, not by the addon: a paced
  // admission with the largest sequence number (24 bits), a 4999 ms wait and
  // a regressed clock; a refusal with a large required wait.
  const seq = 2 ** 24 - 1;
  const paced = 8 * (seq * 16384 + 4999) + 4 + 1;
  assert.ok(paced > 2 ** 40);
  assert.deepEqual(decodeDecision(paced, 0),
    { admitted: true, waitMs: 4999, path: 1, seq, debitUnits: 60000, clockRegressed: true });
  const refused = -(1 + 32 * (2 ** 40 + 3) + 2 * 15 + 1);
  assert.deepEqual(decodeDecision(refused, 0),
    { admitted: false, requiredWaitMs: 2 ** 40 + 3, retryAfterSeconds: 15, clockRegressed: true });
});

test('Pacer tickets stay exact once codes pass 2^32 (strict release checks the sequence)', () => {
  const { Pacer } = require('../index.js');
  const pacer = new Pacer({ ratePerMinute: 600, burst: 1, releasePolicy: 'strict', now: () => 0, onNotice: () => {} });
  // seq·2^17 passes 2^32 at seq 32768; one admission per 1000 ms, no wait.
  let previous = null;
  let last = null;
  for (let i = 1; i <= 40000; i++) {
    previous = last;
    last = pacer.reserve(i * 1000);
    assert.equal(last.kind, 'admitted');
  }
  assert.equal(pacer.state().seq, 40000);
  // Strict refunds only the latest debit: an earlier ticket is refused.
  assert.equal(pacer.release(previous.ticket, 40000 * 1000), false);
  assert.equal(pacer.release(last.ticket, 40000 * 1000), true);
  assert.equal(pacer.state().seq, 39999);
});

test("each thread has its own exchange, and it outlives a transfer of its buffer", async () => {
  const { Worker } = require('node:worker_threads');
  const { once } = require('node:events');
  const { Pacer } = require('../index.js');
  // In a worker (its own env, so its own exchange): the buffer is
  // transferred away and the copy collected; the addon owns the cells, so
  // the worker's pacer keeps deciding. 60/min, burst 2, as twoBurst().
  const script = `
    const { parentPort } = require('node:worker_threads');
    require('node:v8').setFlagsFromString('--expose-gc');
    const collect = require('node:vm').runInNewContext('gc');
    const { native } = require(${JSON.stringify(path.join(__dirname, '..', 'native.js'))});
    const { Pacer } = require(${JSON.stringify(path.join(__dirname, '..', 'index.js'))});
    const pacer = new Pacer({ ratePerMinute: 60, burst: 2, now: () => 0 });
    let copy = structuredClone(native.exchange.buffer, { transfer: [native.exchange.buffer] });
    copy = null;
    collect();
    const answers = [];
    for (let i = 0; i < 8; i++) {
      try {
        const d = pacer.reserve(0);
        answers.push(d.kind + ' ' + (d.kind === 'admitted' ? d.waitMs : d.requiredWaitMs));
      } catch (error) {
        answers.push('error ' + error.message);
      }
    }
    parentPort.postMessage(answers);`;
  const mine = new Pacer({ ratePerMinute: 60, burst: 2, now: () => 0 });
  assert.equal(mine.reserve(0).kind, 'admitted');
  const worker = new Worker(script, { eval: true });
  // Both listeners from the start: the exit may follow the message at once.
  const exited = once(worker, 'exit');
  const [answers] = await once(worker, 'message');
  await exited;
  assert.deepEqual(answers, ['admitted 0', 'admitted 0', 'admitted 1000', 'admitted 2000', 'admitted 3000',
    'admitted 4000', 'refused 5000', 'refused 5000']);
  // This thread's pacer saw none of the worker's calls: its second admission.
  assert.deepEqual([mine.reserve(0).kind, mine.reserve(0).waitMs], ['admitted', 1000]);
});
