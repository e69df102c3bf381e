'use strict';
// The addon's hand-written hot calls (src/hot.rs): `reserveHot(handle,
// nowMs)` and `reserveSharedHot(handle)` over the handles pacers give out,
// and the `floorNoop` benchmark floor.
const test = require('node:test');
const assert = require('node:assert/strict');
const os = require('node:os');
const path = require('node:path');
const v8 = require('node:v8');
const vm = require('node:vm');
const { native, decodeDecision } = require('../native.js');

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc');

// 60/min, burst 2, defaults otherwise (wait bound 4833 ms, refusing): at
// t=0 two admissions wait nothing, the next four wait 1000..4000 ms (one
// token a second), the seventh would wait 5000 ms and is refused with the
// 4-second hint cap. Codes as in src/lib.rs `encode`: admitted
// `8·(seq·2^14 + wait_ms) + path` (paced = 1), refused
// `−(1 + 32·required_wait_ms + 2·retry_after_s + regressed)`.
function twoBurst() {
  return new native.NativePacer(60, 2, 120000, 5, false, 0);
}

test('reserveHot gives the encoded decision', () => {
  const handle = twoBurst().handle();
  assert.equal(native.reserveHot(handle, 0), 8 * (1 * 16384 + 0) + 1);
  assert.equal(native.reserveHot(handle, 0), 8 * (2 * 16384 + 0) + 1);
  for (let seq = 3; seq <= 6; seq++) {
    assert.equal(native.reserveHot(handle, 0), 8 * (seq * 16384 + (seq - 2) * 1000) + 1);
  }
  assert.equal(native.reserveHot(handle, 0), -(1 + 32 * 5000 + 2 * 4 + 0));
  assert.equal(native.reserveHot(handle, 0), -(1 + 32 * 5000 + 2 * 4 + 0));
});

test('the hot call and the class method act on one pacer and one set of counters', () => {
  const pacer = twoBurst();
  const handle = pacer.handle();
  for (let i = 0; i < 3; i++) assert.ok(native.reserveHot(handle, 0) > 0);
  for (let i = 0; i < 3; i++) assert.ok(pacer.reserve(0) > 0);
  assert.ok(native.reserveHot(handle, 0) < 0);
  assert.ok(pacer.reserve(0) < 0);
  // [admitted, admitted after a wait, refused]; the state's seq counts debits.
  assert.deepEqual(pacer.counters().slice(0, 3), [6, 4, 2]);
  assert.equal(pacer.state()[2], 6);
});

test('each handle reaches its own pacer', () => {
  const a = twoBurst();
  const b = twoBurst();
  const [ha, hb] = [a.handle(), b.handle()];
  for (let i = 0; i < 6; i++) native.reserveHot(ha, 0);
  assert.equal(native.reserveHot(hb, 0), 8 * 16384 + 1);
  assert.ok(native.reserveHot(ha, 0) < 0);
  assert.deepEqual([a.state()[2], b.state()[2]], [6, 1]);
});

test('bad arguments throw a TypeError and change nothing', () => {
  const pacer = twoBurst();
  const handle = pacer.handle();
  const before = pacer.state();
  for (const bad of [undefined, null, '5', 5n, {}]) {
    assert.throws(() => native.reserveHot(handle, bad), (e) => e instanceof TypeError && /nowMs must be a number/.test(e.message));
  }
  assert.throws(() => native.reserveHot(handle), TypeError);
  for (const notHandle of [undefined, 1, {}, pacer, () => {}]) {
    assert.throws(() => native.reserveHot(notHandle, 0), (e) => e instanceof TypeError && /not a pacer handle/.test(e.message));
  }
  // A handle of the other kind indexes the other table: unknown there.
  const shared = native.NativeSharedPacer.open(path.join(os.tmpdir(), `pacer-hot-${process.pid}`), 60, 2, 120000, 5, false);
  try {
    assert.throws(() => native.reserveHot(shared.handle(), 0), /not a pacer handle/);
    assert.throws(() => native.reserveSharedHot(handle), /not a pacer handle/);
  } finally {
    shared.close();
    native.unlinkShared(path.join(os.tmpdir(), `pacer-hot-${process.pid}`));
  }
  assert.deepEqual(pacer.state(), before);
  assert.deepEqual(pacer.counters(), [0, 0, 0, 0, 0, 0, 0]);
});

test('a handle keeps its pacer alive after the class object is gone', async () => {
  let handle = twoBurst().handle();
  assert.ok(native.reserveHot(handle, 0) > 0);
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  assert.equal(native.reserveHot(handle, 0), 8 * (2 * 16384) + 1);
  assert.equal(native.reserveHot(handle, 0), 8 * (3 * 16384 + 1000) + 1);
  handle = null;
  gc();
});

test('reserveSharedHot decides at the shared clock and throws SHARED_NOT_OPEN once closed', () => {
  const file = path.join(os.tmpdir(), `pacer-hot-shared-${process.pid}`);
  const shared = native.NativeSharedPacer.open(file, 60, 2, 120000, 5, false);
  try {
    const handle = shared.handle();
    const first = decodeDecision(native.reserveSharedHot(handle), 4833);
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
