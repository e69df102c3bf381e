'use strict';
// Adaptive pacing (SPEC §14) through Pacer and SharedPacer: observe(),
// rateInForce(), the `adaptive` option and its errors. Every expected value
// is worked out by hand below from the law's statement (core/src/adaptive.rs),
// never read back from the code under test.
//
// BASE: rate 60, retries 5, idle 120000: bound 4833 ms, hint cap 4 s, so the
// refusal schedule is 5·4000 = 20000 ms and the lowest rate that can refuse
// is ⌈60000/20000⌉ = 3/min. The rate in force is clamped to
// [lowest, ceiling] with lowest = max(floor, 3) (capped at the ceiling):
// 10 with floor 10, 40 with floor 40. The ceiling left out is the rate, 60.
//
// - Searching (from creation, L = 60): curve = 60·2ⁿ·(5000 + r)/5000 ≥ 60,
//   clamped to the ceiling 60: the rate in force is 60 at any instant.
// - 40 openings reported at 1000 (minute 0), then a throttle at 1000 end the
//   first search: E = max(through, recent) = max(40, 40) = 40, L = min(40,
//   60) = 40, probing, `again`. The pause: the origin becomes max(1000, 0 +
//   60000) = 60000 (the counts moved to minute 1: the 40 are the count
//   before), and until then the rate reads the lowest (10, or 40 with floor
//   40); from 60000 it is ℓ = 40 through the hold and the wait (w =
//   max(240000, 80·60000/40 = 120000)/12 = 20000: the step, 40 + 20 + 2, only
//   from 60000 + 60000 + 20000 = 140000).
// - A throttle while probing within 60000 ms of the origin changes nothing
//   (at 1000, observed at max(1000, 60000) = 60000, and at 119999); an
//   opening at 1000 is counted at 60000, the origin's minute, but cannot show
//   a rise in the hold.
// - 40 more openings at 60000 (that minute: 41), then a throttle at 120000
//   (Δ = 60000, no longer held; the next minute: opened_before = 41, opened
//   = 0): E = through = 41 (probing: the whole-minute count only). R = ℓ =
//   40 (before the step). E ≥ R: the count does not explain it, L = 40 −
//   max(1, ⌊40/16⌋) = 38 (40, the lowest, with floor 40).
// - Nothing counted at a throttle (E = 0): B = min(R, L), L = B − max(1,
//   ⌊B/16⌋). A pacer throttled at 1000 with nothing reported: B = min(60, 60)
//   = 60, L = 60 − 3 = 57, read from the pause's end, 60000; the throttle
//   itself, in the pause, answers the lowest.
// - At 30/min (30 openings, then a throttle at 61000, a minute after the
//   creation: no pause, L = 30) a token (60000 units) refills in 60000/30 =
//   2000 ms, not 1000.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Pacer, SharedPacer } = require('../index.js');
const { quiet, throwsNaming, counts } = require('./helpers.js');

// Rate 60, burst 10, idle 120000, retries 5: bound 4833 ms, refusing.
const BASE = { ratePerMinute: 60, burst: 10, idleTimeoutMs: 120000, maxRetries: 5, onNotice: quiet };

function adaptivePacer(adaptive, extra = {}) {
  return new Pacer({ ...BASE, now: () => 0, adaptive, ...extra });
}

function opened(pacer, n, at) {
  const rates = [];
  for (let i = 0; i < n; i += 1) rates.push(pacer.observe('opened', at));
  return rates;
}

test('a throttle ends the search at what got through, pauses; throttles in the hold change nothing; then a cut', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  assert.deepEqual(pacer.adaptive, { floorPerMinute: 10, ceilingPerMinute: 60 });
  assert.equal(pacer.rateInForce(0), 60);
  assert.deepEqual(opened(pacer, 40, 1000), Array(40).fill(60), 'searching at the ceiling');
  assert.equal(pacer.observe('throttled', 1000), 10, 'L = 40 got through; paused: the lowest');
  assert.equal(pacer.observe('throttled', 1000), 10, 'a second throttle at once changes nothing');
  assert.equal(pacer.rateInForce(1000), 10);
  assert.equal(pacer.observe('opened', 1000), 10, 'an opening in the hold: counted, no rise');
  assert.equal(pacer.rateInForce(59999), 10, 'still in the pause');
  assert.equal(pacer.rateInForce(60000), 40, 'the pause ends: ℓ = L = 40');
  assert.deepEqual(opened(pacer, 40, 60000), Array(40).fill(40), 'Δ = 0: in the hold, 41 in the minute');
  assert.equal(pacer.observe('throttled', 119999), 40, 'within the hold: nothing changes');
  assert.equal(pacer.rateInForce(119999), 40);
  assert.equal(pacer.observe('throttled', 120000), 38, 'E = 41 ≥ R = 40: L = 40 − ⌊40/16⌋');

  const floored = adaptivePacer({ floorPerMinute: 40 });
  opened(floored, 40, 1000);
  assert.equal(floored.observe('throttled', 1000), 40, 'paused: the lowest is the floor, 40');
  assert.equal(floored.rateInForce(60000), 40, 'L = 40');
  opened(floored, 41, 60000);
  assert.equal(floored.observe('throttled', 119999), 40);
  assert.equal(floored.observe('throttled', 120000), 40, 'E = 41 ≥ R = 40: L = 38, clamped to 40');
});

// The first search's end as above (L = 40, the pause to 60000, the 40
// openings of minute 0 the count before minute 1). 20 openings at 60000
// (minute 1; Δ = 0, in the hold: no rise) read ℓ = 40. A throttle at 120000
// (minute 2, Δ = 60000: not held, before the step at 140000): R = 40;
// minute 0's count dropped, minute 1's 20 the count before: E = through =
// 20 < R = 40, so L = 20.
test('a throttle the count explains lowers the rate to what got through', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  opened(pacer, 40, 1000);
  assert.equal(pacer.observe('throttled', 1000), 10);
  assert.deepEqual(opened(pacer, 20, 60000), Array(20).fill(40));
  assert.equal(pacer.rateInForce(119999), 40);
  assert.equal(pacer.observe('throttled', 120000), 20, 'E = 20 < R = 40: L = 20');
  // The floor bounds it: the same with floor 25 reads max(20, 25) = 25 (and
  // the pause reads the floor, 25).
  const floored = adaptivePacer({ floorPerMinute: 25 });
  opened(floored, 40, 1000);
  assert.equal(floored.observe('throttled', 1000), 25);
  opened(floored, 20, 60000);
  assert.equal(floored.observe('throttled', 120000), 25);
});

// After the throttle at 1000 (L = 40, `again`, the pause: origin 60000) a
// rise shows when a minute's count passes L + ⌊L/8⌋ + 1 = 40 + 5 + 1 = 46, at
// least 60000 ms after the origin. 47 openings at 90000 (minute 1, Δ =
// 30000): in the hold, 40 stays. One opening at 120000 (Δ = 60000, minute
// 2): opened_before = 47, opened = 1, through = 47 > 46: search again from
// the rate in force, 40 (before the step at 140000), origin 120000, doubling
// every 20000 ms: 40·2ⁿ·(20000 + r)/20000 is 40 at 120000, 40·25000/20000 =
// 50 at 125000, 40·30000/20000 = 60 at 130000 (the ceiling), and the ceiling
// from then on. With 46 at 90000 instead (not above 46) the opening at
// 120000 changes nothing: still probing, ℓ = 40 at 125000 and 130000 (Δ =
// 65000 and 70000, before the step).
test('a count above L + L/8 + 1 after the hold searches again; at or below it, or in the hold, nothing', () => {
  const rise = adaptivePacer({ floorPerMinute: 10 });
  opened(rise, 40, 1000);
  assert.equal(rise.observe('throttled', 1000), 10);
  assert.deepEqual(opened(rise, 47, 90000), Array(47).fill(40), 'in the hold: no rise');
  assert.equal(rise.rateInForce(90000), 40);
  assert.equal(rise.observe('opened', 120000), 40, 'the search starts at the rate in force');
  assert.equal(rise.rateInForce(125000), 50);
  assert.equal(rise.rateInForce(130000), 60);
  assert.equal(rise.rateInForce(3600000), 60);

  const level = adaptivePacer({ floorPerMinute: 10 });
  opened(level, 40, 1000);
  assert.equal(level.observe('throttled', 1000), 10);
  opened(level, 46, 90000);
  assert.equal(level.observe('opened', 120000), 40);
  assert.equal(level.rateInForce(125000), 40, 'through = 46, not above 46: still probing');
  assert.equal(level.rateInForce(130000), 40);
});

// Ceiling 600, floor 1 (lowest max(1, 3) = 3): a new pacer searches from 60,
// 60·2ⁿ·(5000 + r)/5000: 60 at 0, 90 at 2500, 120 at 5000, 240 at 10000,
// 480 at 15000, 600 (the ceiling) from 960 at 20000 on. Three openings in
// minute 0 and a throttle at 20000 end the search: E = max(3, 3) = 3,
// L = min(3, 600) = 3, paused until max(20000, 0 + 60000) = 60000 at the
// lowest, 3, and ℓ = 3 after it. Nothing reported and a throttle at 20000:
// R = 600, B = min(R, L) = min(600, 60) = 60, L = 60 − max(1, ⌊60/16⌋) = 57,
// read from 60000 (the throttle itself, in the pause, answers 3).
test('with a ceiling above the rate a new pacer searches upward, doubling every 5 s', () => {
  const pacer = adaptivePacer({ floorPerMinute: 1, ceilingPerMinute: 600 });
  assert.deepEqual([0, 2500, 5000, 10000, 15000, 20000, 3600000].map((t) => pacer.rateInForce(t)),
    [60, 90, 120, 240, 480, 600, 600]);
  assert.deepEqual(opened(pacer, 3, 0), [60, 60, 60]);
  assert.equal(pacer.observe('throttled', 20000), 3);
  assert.equal(pacer.rateInForce(59999), 3);
  assert.equal(pacer.rateInForce(79999), 3);

  const blind = adaptivePacer({ floorPerMinute: 1, ceilingPerMinute: 600 });
  assert.equal(blind.observe('throttled', 20000), 3, 'nothing counted: L = 57, paused at the lowest');
  assert.equal(blind.rateInForce(60000), 57);
});

test('before any throttle the rate in force is the configured rate, whenever it is read', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  for (const t of [0, 1, 999, 60000, 3600000]) assert.equal(pacer.rateInForce(t), 60, `t=${t}`);
  assert.equal(pacer.observe('opened', 5000), 60);
});

test('the refill follows the rate in force: a token takes 2000 ms at 30/min, not 1000', () => {
  const adaptive = adaptivePacer({ floorPerMinute: 10 }, { burst: 1 });
  const fixed = new Pacer({ ...BASE, burst: 1, now: () => 0 });
  for (const pacer of [adaptive, fixed]) {
    const first = pacer.reserve(61000);
    assert.equal(first.kind, 'admitted');
    assert.equal(first.waitMs, 0, 'the burst token');
  }
  // At 61000 (minute 1): E = max(through 30, recent 30 + 0) = 30, L =
  // min(30, 60) = 30; a minute after the creation, so no pause: origin
  // max(61000, 0 + 60000) = 61000, the rate ℓ = 30 at once.
  assert.deepEqual(opened(adaptive, 30, 61000), Array(30).fill(60));
  assert.equal(adaptive.observe('throttled', 61000), 30);
  assert.equal(fixed.observe('throttled', 61000), 60);
  const slowed = adaptive.reserve(61000);
  assert.equal(slowed.kind, 'admitted');
  assert.equal(slowed.path, 'paced');
  assert.equal(slowed.waitMs, 2000);
  assert.equal(fixed.reserve(61000).waitMs, 1000);
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
  // The six outcomes are counted with adaptation off too; the waits of
  // 1000 and 2000 ms are in the buckets of 1000 (index 4) and 2500 (index 5).
  assert.deepEqual(observed.counters(), counts({
    admitted: 3, admittedAfterWait: 2, opened: 3, throttled: 3, waitMsTotal: 3000,
    waitBuckets: [0, 0, 0, 0, 1, 1, 0, 0],
  }));
});

test('observe and rateInForce default to the pacer\'s clock', () => {
  let now = 0;
  const pacer = new Pacer({ ...BASE, now: () => now, adaptive: { floorPerMinute: 10 } });
  now = 1000;
  // Created at 0; nothing counted: B = min(60, 60), L = 60 − max(1, ⌊60/16⌋)
  // = 57, paused until max(1000, 0 + 60000) = 60000 at the lowest, 10.
  assert.equal(pacer.observe('throttled'), 10);
  assert.equal(pacer.rateInForce(), 10);
  now = 60000;
  assert.equal(pacer.rateInForce(), 57);
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
  throwsNaming(() => pacer.observe('throttled', NaN), RangeError, 'nowMs', 'NaN clock');
  throwsNaming(() => pacer.observe('opened', -1), RangeError, 'nowMs', 'negative clock');
  throwsNaming(() => pacer.observe('opened', 0.5), RangeError, 'nowMs', 'fractional clock');
  throwsNaming(() => pacer.observe('opened', Infinity), RangeError, 'nowMs', 'infinite clock');
  throwsNaming(() => pacer.rateInForce(NaN), RangeError, 'nowMs', 'NaN clock');
  // Still searching, nothing counted: the first real throttle ends the
  // search at L = 60 − max(1, ⌊60/16⌋) = 57, paused until 60000 at the
  // lowest, 10.
  assert.equal(pacer.rateInForce(1000), 60);
  assert.equal(pacer.observe('throttled', 1000), 10);
  assert.equal(pacer.rateInForce(60000), 57);
});

// The clock's ends: 0 and the largest safe integer. Created at 0, a throttle
// at 0 with nothing counted sets L = 60 − max(1, ⌊60/16⌋) = 57 and pauses
// (origin 0 + 60000): it reads the lowest, 10. One opening at 2^53 − 1 (Δ
// long past the hold and the wait: the step, 57 + ⌊57/2⌋ + 2 = 87, clamped
// to the ceiling 60), through 1 ≤ 57 + ⌊57/8⌋ + 1: nothing rises, and it
// reads 60.
test('clock 0 and 2^53 − 1 are fine', () => {
  const pacer = adaptivePacer({ floorPerMinute: 10 });
  assert.equal(pacer.observe('throttled', 0), 10);
  assert.equal(pacer.rateInForce(0), 10);
  assert.equal(pacer.rateInForce(60000), 57);
  assert.equal(pacer.observe('opened', Number.MAX_SAFE_INTEGER), 60);
  assert.equal(pacer.rateInForce(Number.MAX_SAFE_INTEGER), 60);
  // A throttle there, at the probe's step: the one opening counted, E =
  // through = 1 < R = 60, and L held through the hold and the wait, so L
  // = max(1, 57) = 57, read at once (probing, Δ = 0).
  assert.equal(pacer.observe('throttled', Number.MAX_SAFE_INTEGER), 57);
  assert.equal(pacer.rateInForce(Number.MAX_SAFE_INTEGER), 57);
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

// The shared clock cannot be held still, but a test runs well within a
// minute of the file's creation (t₀): a throttle with nothing counted ends
// the first search with L = 60 − max(1, ⌊60/16⌋) = 57 and pauses (origin t₀
// + 60000), so until then either handle reads the lowest, max(10, 3) = 10;
// a throttle or an opening then is observed at the origin (Δ = 0, in the
// hold) and changes nothing. (The 57 after the pause would take a minute to
// read; the Pacer tests above read it on a fake clock.)
test('shared: a throttle through one handle is seen through another, and so is its hold', () => {
  const p = sharedPath('two');
  const adaptive = { floorPerMinute: 10 };
  const a = SharedPacer.open(p, { ...BASE, adaptive });
  const b = SharedPacer.open(p, { ...BASE, adaptive });
  try {
    assert.deepEqual(b.adaptive, { floorPerMinute: 10, ceilingPerMinute: 60 });
    assert.equal(b.rateInForce(), 60);
    assert.equal(a.observe('throttled'), 10, 'L = 57, paused at the lowest');
    assert.equal(b.rateInForce(), 10, "b reads a's throttle");
    assert.equal(b.observe('throttled'), 10, 'within the hold: nothing changes');
    assert.equal(b.observe('opened'), 10);
    assert.equal(a.rateInForce(), 10);
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
