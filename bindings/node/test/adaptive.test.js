'use strict';
// Adaptive pacing (SPEC §14) through Pacer and SharedPacer: observe(),
// rateInForce(), the `adaptive` option and its errors. Every expected value
// is worked out by hand below, never read back from the code under test,
// and none depends on the curve's scale constant:
//
// - Rate 60 with the default ceiling (the rate): before any throttle the
//   curve starts at its peak 60 and only rises, so the rate in force is the
//   ceiling, 60, at any instant.
// - The first throttle, at t, lowers it at t to max(floor, ⌊rate·8/10⌋):
//   ⌊60·8/10⌋ = 48. A throttle less than 60000 ms after that decrease
//   lowers nothing: it holds the rate where the decrease put it (the curve
//   restarts there, so it reads 48 again at that instant). An 'opened'
//   changes nothing. So a hold at 60999 and a throttle at 61000 (60000 ms
//   after the decrease, reading 48 since the hold) give ⌊48·8/10⌋ =
//   ⌊38.4⌋ = 38, or the floor when that is higher (40 with floor 40).
// - At 48/min the bucket refills 48 units per ms: a whole token (60000
//   units) takes ⌈60000/48⌉ = 1250 ms, not the 1000 ms of 60/min.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Pacer, SharedPacer } = require('../index.js');
const { quiet, throwsNaming } = require('./helpers.js');

// Rate 60, burst 10, idle 120000, retries 5: bound 4833 ms, refusing.
const BASE = { ratePerMinute: 60, burst: 10, idleTimeoutMs: 120000, maxRetries: 5, onNotice: quiet };

function adaptivePacer(adaptive, extra = {}) {
  return new Pacer({ ...BASE, now: () => 0, adaptive, ...extra });
}

test('a throttle lowers the rate to 8/10; throttles within a minute hold it; the floor holds', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  assert.deepEqual(pacer.adaptive, { floorPerMinute: 10, ceilingPerMinute: 60 });
  assert.equal(pacer.rateInForce(0), 60);
  assert.equal(pacer.observe('throttled', 1000), 48);
  assert.equal(pacer.observe('throttled', 1000), 48, 'a second throttle at once lowers nothing');
  assert.equal(pacer.rateInForce(1000), 48);
  assert.equal(pacer.observe('opened', 1000), 48, 'an opened changes nothing');
  assert.equal(pacer.observe('throttled', 60999), 48, 'within the minute: held');
  assert.equal(pacer.rateInForce(60999), 48);
  assert.equal(pacer.observe('throttled', 61000), 38, 'a minute after the decrease: lowered again');

  const floored = adaptivePacer({ floorPerMinute: 40 });
  assert.equal(floored.observe('throttled', 1000), 48);
  assert.equal(floored.observe('throttled', 60999), 48);
  assert.equal(floored.observe('throttled', 61000), 40, '38 is below the floor of 40');
});

test('before any throttle the rate in force is the configured rate, whenever it is read', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  for (const t of [0, 1, 999, 60000, 3600000]) assert.equal(pacer.rateInForce(t), 60, `t=${t}`);
  assert.equal(pacer.observe('opened', 5000), 60);
});

test('the refill follows the rate in force: a token takes 1250 ms at 48/min, not 1000', () => {
  const adaptive = adaptivePacer({ floorPerMinute: 10 }, { burst: 1 });
  const fixed = new Pacer({ ...BASE, burst: 1, now: () => 0 });
  for (const pacer of [adaptive, fixed]) {
    const first = pacer.reserve(1000);
    assert.equal(first.kind, 'admitted');
    assert.equal(first.waitMs, 0, 'the burst token');
  }
  assert.equal(adaptive.observe('throttled', 1000), 48);
  assert.equal(fixed.observe('throttled', 1000), 60);
  const slowed = adaptive.reserve(1000);
  assert.equal(slowed.kind, 'admitted');
  assert.equal(slowed.path, 'paced');
  assert.equal(slowed.waitMs, 1250);
  assert.equal(fixed.reserve(1000).waitMs, 1000);
});

test('adaptation off: observe changes nothing and answers the configured rate', () => {
  const observed = new Pacer({ ...BASE, burst: 1, now: () => 0 });
  assert.equal(observed.adaptive, null);
  for (let i = 0; i < 3; i += 1) {
    assert.equal(observed.observe('throttled', 1000), 60);
    assert.equal(observed.observe('opened', 1000), 60);
  }
  assert.equal(observed.rateInForce(1000), 60);
  // Burst 1 at 60/min: now, then one a second from t=1000 (hand-derived,
  // the same as a pacer never observed).
  assert.deepEqual([0, 1, 2].map(() => observed.reserve(1000).waitMs), [0, 1000, 2000]);
  assert.deepEqual(observed.counters(), {
    admitted: 3, admittedAfterWait: 2, refused: 0, shaped: 0, released: 0, refunded: 0, clockRegressions: 0,
  });
});

test('observe and rateInForce default to the pacer\'s clock', () => {
  let now = 0;
  const pacer = new Pacer({ ...BASE, now: () => now, adaptive: { floorPerMinute: 10 } });
  now = 1000;
  assert.equal(pacer.observe('throttled'), 48);
  assert.equal(pacer.rateInForce(), 48);
});

// Each bad `adaptive` with the error it gets and the name that error gives.
const BAD_ADAPTIVE = [
  [null, TypeError, 'adaptive'],
  ['10', TypeError, 'adaptive'],
  [10, TypeError, 'adaptive'],
  [{}, TypeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: null }, TypeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: '10' }, TypeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: NaN }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: Infinity }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: -1 }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: 0 }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: 10.5 }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: 2 ** 53 }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: 61 }, RangeError, 'adaptive.floorPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: null }, TypeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: '90' }, TypeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: NaN }, RangeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: 90.5 }, RangeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: 0 }, RangeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: 59 }, RangeError, 'adaptive.ceilingPerMinute'],
  [{ floorPerMinute: 10, ceilingPerMinute: 601 }, RangeError, 'adaptive.ceilingPerMinute'],
];

test('a bad adaptive option throws, naming it; undefined is off; the bounds may touch the rate', () => {
  for (const [bad, type, name] of BAD_ADAPTIVE) {
    throwsNaming(() => adaptivePacer(bad), type, name, JSON.stringify(bad) ?? String(bad));
  }
  // Rate 0 turns pacing off: there is no rate to adapt.
  throwsNaming(() => adaptivePacer({ floorPerMinute: 1 }, { ratePerMinute: 0 }), RangeError,
    'adaptive.floorPerMinute', 'rate 0');
  assert.equal(adaptivePacer(undefined).adaptive, null);
  assert.deepEqual(adaptivePacer({ floorPerMinute: 60, ceilingPerMinute: 600 }).adaptive,
    { floorPerMinute: 60, ceilingPerMinute: 600 });
  assert.deepEqual(adaptivePacer({ floorPerMinute: 1, ceilingPerMinute: 60 }).adaptive,
    { floorPerMinute: 1, ceilingPerMinute: 60 });
});

test('a bad outcome or clock is an error that changes nothing', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  for (const bad of ['throttle', 'OPENED', 'Throttled', '', 'toString', 'constructor', undefined, null, 1, 2, true, {}]) {
    throwsNaming(() => pacer.observe(bad, 1000), TypeError, 'outcome', String(bad));
  }
  throwsNaming(() => pacer.observe('throttled', -1), RangeError, 'nowMs', 'negative clock');
  throwsNaming(() => pacer.observe('throttled', 1.5), RangeError, 'nowMs', 'fractional clock');
  throwsNaming(() => pacer.observe('throttled', '1000'), TypeError, 'nowMs', 'string clock');
  throwsNaming(() => pacer.rateInForce(NaN), RangeError, 'nowMs', 'NaN clock');
  // Still at 60, never decreased: the first real throttle lowers it.
  assert.equal(pacer.rateInForce(1000), 60);
  assert.equal(pacer.observe('throttled', 1000), 48);
});

test('after close() observe and rateInForce throw ERR_PACER_CLOSED; adaptive still answers', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  pacer.close();
  assert.throws(() => pacer.observe('throttled', 1000), { code: 'ERR_PACER_CLOSED' });
  assert.throws(() => pacer.rateInForce(1000), { code: 'ERR_PACER_CLOSED' });
  assert.deepEqual(pacer.adaptive, { floorPerMinute: 10, ceilingPerMinute: 60 });
});

// ---------------------------------------------------------------- shared pacers

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-adaptive-'));
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

function sharedPath(what) {
  return path.join(dir, `${process.pid}-${what}`);
}

test('shared: a bad adaptive option throws and creates no file', () => {
  const p = sharedPath('bad');
  for (const [bad, type, name] of BAD_ADAPTIVE) {
    throwsNaming(() => SharedPacer.open(p, { ...BASE, adaptive: bad }), type, name, JSON.stringify(bad) ?? String(bad));
  }
  assert.ok(!fs.existsSync(p));
});

test('shared, adaptation off: observe changes nothing and answers the configured rate', () => {
  const p = sharedPath('off');
  const s = SharedPacer.open(p, BASE);
  try {
    assert.equal(s.adaptive, null);
    assert.equal(s.observe('throttled'), 60);
    assert.equal(s.observe('opened'), 60);
    assert.equal(s.rateInForce(), 60);
    throwsNaming(() => s.observe('throttle'), TypeError, 'outcome', 'bad outcome');
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
  assert.throws(() => s.observe('opened'), { code: 'ERR_PACER_CLOSED' });
  assert.throws(() => s.rateInForce(), { code: 'ERR_PACER_CLOSED' });
});

// The shared clock cannot be held still, so the rate read some time after
// a throttle is anywhere from the lowered 48 (the curve climbs with time)
// up to, but not yet back at, 60 (it takes the curve seconds at the least).
// A throttle at the decrease's instant or within its minute reads 48
// exactly: it holds the rate where the decrease put it.
test('shared: a throttle through one handle is seen through another, and so is its minute', () => {
  const p = sharedPath('two');
  const adaptive = { floorPerMinute: 10 };
  const a = SharedPacer.open(p, { ...BASE, adaptive });
  const b = SharedPacer.open(p, { ...BASE, adaptive });
  try {
    assert.deepEqual(b.adaptive, { floorPerMinute: 10, ceilingPerMinute: 60 });
    assert.equal(b.rateInForce(), 60);
    assert.equal(a.observe('throttled'), 48);
    const seen = b.rateInForce();
    assert.ok(seen >= 48 && seen < 60, `b reads ${seen} after a's throttle`);
    // Within a's decrease's minute for b too: its throttle holds 48.
    assert.equal(b.observe('throttled'), 48);
    const opened = b.observe('opened');
    assert.ok(opened >= 48 && opened < 60, `b's opened gave ${opened}`);
    const after = a.rateInForce();
    assert.ok(after >= 48 && after < 60, `a reads ${after} after b's hold`);
    // The bounds are part of the bucket's configuration: the ceiling left
    // out is the rate, so 60 given is the same; another floor, or none, is not.
    SharedPacer.open(p, { ...BASE, adaptive: { floorPerMinute: 10, ceilingPerMinute: 60 } }).close();
    for (const other of [{ floorPerMinute: 11 }, { floorPerMinute: 10, ceilingPerMinute: 61 }, undefined]) {
      assert.throws(() => SharedPacer.open(p, { ...BASE, adaptive: other }), { code: 'SHARED_CONFIG_MISMATCH' },
        JSON.stringify(other));
    }
  } finally {
    a.close();
    b.close();
    SharedPacer.unlink(p);
  }
});
