'use strict';
// Shared pacers: one bucket for every process on the machine. Expected
// numbers come from SPEC §2-§7 at the defaults (rate 60, burst 10, bound
// 4833 ms): the burst admits 10 at once, the 11th waits up to one slot of
// 1000 ms. A shared pacer reads the machine's clock, which a test cannot
// hold still, so no assertion depends on how fast the machine runs: a wait
// is checked against SPEC §4's formula for the state word read before the
// call, at clock readings taken just before and just after it (the wait
// at the later reading is the least it can be, at the earlier the most),
// and timers are injected (FakeTime).
// The smoke test attaches to a pacer a C process created and debited, and
// the booking test books on one bucket with C processes (`test_shm debit`
// and `test_shm book`: PACER_SHM_HELPER, set by scripts/test-shm.sh;
// skipped without it). Bookings (SPEC §11) have their derivation below.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { SharedPacer, Pacer, Booking, Ticket, sharedClockMs } = require('../index.js');
const { FakeTime, ZERO_COUNTS, counts } = require('./helpers.js');

const dir = process.env.PACER_SHM_TEST_DIR || fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-'));
if (!process.env.PACER_SHM_TEST_DIR) test.after(() => fs.rmSync(dir, { recursive: true, force: true }));
const quiet = { onNotice: () => {} };

// Defaults: 60 units of a token refill per ms, capacity 10 tokens.
const UNITS_PER_TOKEN = 60000;
const RATE = 60;
const CAPACITY_UNITS = 10 * UNITS_PER_TOKEN;

/** SPEC §4's wait at clock reading `t` for the state word `s` (read
 * earlier, at the defaults): refill from its high-water mark, capped at
 * capacity; no wait with a whole token, else ceil((1 token − tokens)/rate). */
function waitAt(s, t) {
  const tokens = Math.min(CAPACITY_UNITS, s.tokensUnits + Math.max(0, t - s.highWaterMs) * RATE);
  return tokens >= UNITS_PER_TOKEN ? 0 : Math.ceil((UNITS_PER_TOKEN - tokens) / RATE);
}

/** Asserts `wait`, decided between clock readings `before` and `after`
 * from state `s`, is the wait SPEC §4 gives at some moment between them. */
function assertWaitBetween(wait, s, before, after, label) {
  assert.ok(waitAt(s, after) <= wait && wait <= waitAt(s, before),
    `${label}: waited ${wait}, expected ${waitAt(s, after)}..${waitAt(s, before)} (state ${JSON.stringify(s)})`);
}

function sharedPath(what) {
  const p = path.join(dir, `pacer-node-${process.pid}-${what}`);
  fs.rmSync(p, { force: true });
  return p;
}

test('two handles in one process share one bucket', () => {
  const p = sharedPath('two');
  const a = SharedPacer.open(p, quiet);
  const b = SharedPacer.open(p, quiet);
  try {
    // The file starts full and a bucket only refills: the 10 of the burst
    // find a token at any speed.
    let immediate = 0;
    for (let i = 0; i < 10; i++) {
      const d = (i % 2 ? a : b).reserve();
      if (d.kind === 'admitted' && d.waitMs === 0) immediate++;
    }
    assert.equal(immediate, 10);
    const s = b.state();
    assert.equal(s.seq, 10, 'both handles debit one state word');
    const before = sharedClockMs();
    const d = a.reserve();
    const after = sharedClockMs();
    assert.equal(d.kind, 'admitted');
    assertWaitBetween(d.waitMs, s, before, after, 'the 11th');
    assert.deepEqual(a.state(), b.state());
    assert.equal(a.state().seq, 11);
    assert.equal(a.waitBoundMs, 4833);
    assert.equal(a.mode, 'refusing');
    if (d.ticket !== null) {
      assert.equal(b.release(d.ticket), false, "b cannot release a's ticket");
      assert.equal(a.release(d.ticket), true);
    }
    const st = fs.lstatSync(p);
    assert.equal(st.mode & 0o777, 0o600);
    assert.equal(st.size, 65536 + 256);
  } finally {
    a.close();
    b.close();
    SharedPacer.unlink(p);
  }
});

test('counters are the bucket\'s: every handle reads the counts of every call on it; a closed one keeps those at close()', () => {
  const p = sharedPath('counters');
  const a = SharedPacer.open(p, quiet);
  const b = SharedPacer.open(p, quiet);
  try {
    // Five of the burst of 10: none waits, at any speed.
    const fromA = [a.reserve(), a.reserve(), a.reserve()];
    const fromB = [b.reserve(), b.reserve()];
    assert.ok([...fromA, ...fromB].every((d) => d.kind === 'admitted' && d.waitMs === 0));
    assert.equal(a.release(fromA[0].ticket), true);
    assert.equal(b.release(fromB[1].ticket), true);
    assert.equal(b.release(fromB[1].ticket), false, 'spent: not a call that reaches the pacer');
    // 3 + 2 admissions, 1 + 1 refunding releases, 1 + 1 outcomes, all in
    // the file's counters (adaptation off: the outcomes are counted all the
    // same).
    a.observe('opened');
    b.observe('throttled');
    const bucket = counts({ admitted: 5, released: 2, refunded: 2, opened: 1, throttled: 1 });
    assert.deepEqual(a.counters(), bucket);
    assert.deepEqual(b.counters(), bucket);
    // A third handle, opened later, reads the same counts, and its calls
    // count there too.
    const c = SharedPacer.open(p, quiet);
    try {
      assert.deepEqual(c.counters(), bucket);
      assert.equal(c.reserve().kind, 'admitted');
      const six = counts({ admitted: 6, released: 2, refunded: 2, opened: 1, throttled: 1 });
      assert.deepEqual(a.counters(), six);
      assert.deepEqual(c.counters(), six);
    } finally {
      c.close();
    }
    // A closed handle answers with the counts at its close(); the others go on.
    a.close();
    assert.equal(b.reserve().kind, 'admitted');
    assert.deepEqual(a.counters(), counts({ admitted: 6, released: 2, refunded: 2, opened: 1, throttled: 1 }));
    assert.deepEqual(b.counters(), counts({ admitted: 7, released: 2, refunded: 2, opened: 1, throttled: 1 }));
    // Reopening reads the file's counts, kept while the file is.
    const again = SharedPacer.open(p, quiet);
    try {
      assert.deepEqual(again.counters(), b.counters());
    } finally {
      again.close();
    }
  } finally {
    a.close();
    b.close();
    SharedPacer.unlink(p);
  }
});

test('a shared pacer takes no clock', () => {
  assert.throws(() => SharedPacer.open(sharedPath('clock'), { now: () => 0 }), TypeError);
  assert.throws(() => new SharedPacer(), TypeError);
  const t = sharedClockMs();
  assert.ok(Number.isInteger(t) && t > 0);
});

test('attaching checks the file and changes nothing', () => {
  const p = sharedPath('checks');
  SharedPacer.open(p, quiet).close();
  const before = fs.readFileSync(p);
  const code = (fn) => {
    try {
      fn();
    } catch (error) {
      return error.code;
    }
    return 'no error';
  };
  assert.equal(code(() => SharedPacer.open(p, { ...quiet, ratePerMinute: 61 })), 'SHARED_CONFIG_MISMATCH');
  const link = sharedPath('link');
  fs.symlinkSync(p, link);
  assert.equal(code(() => SharedPacer.open(link, quiet)), 'SHARED_SYMLINK');
  fs.rmSync(link);
  fs.chmodSync(p, 0o644);
  assert.equal(code(() => SharedPacer.open(p, quiet)), 'SHARED_PERMISSIONS');
  fs.chmodSync(p, 0o600);
  const foreign = Buffer.from(before);
  foreign.write('NOTPACER', 0);
  fs.writeFileSync(p, foreign);
  assert.equal(code(() => SharedPacer.open(p, quiet)), 'SHARED_FOREIGN');
  fs.writeFileSync(p, before.subarray(0, 100));
  assert.equal(code(() => SharedPacer.open(p, quiet)), 'SHARED_TRUNCATED');
  fs.writeFileSync(p, before);
  assert.deepEqual(fs.readFileSync(p), before);
  SharedPacer.unlink(p);
  assert.equal(code(() => SharedPacer.unlink(p)), 'SHARED_NOT_FOUND');
  assert.equal(code(() => SharedPacer.open('..', quiet)), 'SHARED_INVALID_NAME');
  assert.throws(() => SharedPacer.open(p, { ratePerMinute: 601 }), RangeError);
  assert.ok(!fs.existsSync(p));
});

test('admit waits on the shared clock', async () => {
  const p = sharedPath('admit');
  // Shaping at 1/minute with no retries: bound min(15000, 3600000/2) =
  // 15000. The first request takes the token; the second needs about a
  // minute, more than the bound, so it is shaped: it waits exactly the
  // bound, whatever the machine's speed (short of a 45 s stall).
  const time = new FakeTime();
  const s = SharedPacer.open(p, {
    ...quiet, ratePerMinute: 1, burst: 1, idleTimeoutMs: 3600000, maxRetries: 0, schedule: time.schedule,
  });
  try {
    const first = await s.admit();
    assert.equal(first.kind, 'admitted');
    assert.equal(first.queued, false);
    const started = sharedClockMs();
    const pending = s.admit();
    assert.deepEqual(time.pending().map((t) => t.ms), [15000], 'scheduled for the bound');
    await time.advance(15000);
    const second = await pending;
    const ended = sharedClockMs();
    assert.equal(second.kind, 'admitted');
    assert.equal(second.queued, true);
    // waitedMs is read on the shared clock, between these two readings.
    assert.ok(second.waitedMs >= 0 && second.waitedMs <= ended - started, `waited ${second.waitedMs}`);
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
  assert.throws(() => s.reserve(), (e) => e.code === 'ERR_PACER_CLOSED');
});

test('sees the debits of a C process, and C sees ours', { skip: !process.env.PACER_SHM_HELPER && 'PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it)' }, () => {
  const p = sharedPath('from-c');
  const debit = (n) => execFileSync(process.env.PACER_SHM_HELPER, ['debit', p, String(n)], { encoding: 'utf8' })
    .trim().split('\n');
  try {
    assert.deepEqual(debit(10), Array(10).fill('admitted 0'));
    const s = SharedPacer.open(p, quiet);
    // C's ten debits are in the state word Node reads.
    const afterC = s.state();
    assert.equal(afterC.seq, 10);
    // And in the bucket's counters, which live in the file: ten admitted at
    // once.
    assert.deepEqual(s.counters(), counts({ admitted: 10 }));
    let before = sharedClockMs();
    const d = s.reserve();
    let after = sharedClockMs();
    assert.equal(d.kind, 'admitted');
    assertWaitBetween(d.waitMs, afterC, before, after, "Node after C's burst");
    // And C sees this debit: its wait follows from the state Node left.
    const afterNode = s.state();
    assert.equal(afterNode.seq, 11);
    before = sharedClockMs();
    const [line] = debit(1);
    after = sharedClockMs();
    const match = /^admitted (\d+)$/.exec(line);
    assert.ok(match, `C after Node: ${line}`);
    assertWaitBetween(Number(match[1]), afterNode, before, after, 'C after Node');
    assert.equal(s.state().seq, 12);
    // Node's admission and C's second are counted there too, with their waits.
    const waits = [d.waitMs, Number(match[1])];
    const expected = counts({ admitted: 12 });
    for (const waitMs of waits) countWait(expected, waitMs);
    assert.deepEqual(s.counters(), expected);
    s.close();
    // A plain Pacer is unaffected by the shared bucket.
    assert.equal(new Pacer(quiet).reserve(0).waitMs, 0);
  } finally {
    fs.rmSync(p, { force: true });
  }
});

test('a pacer Node created is one a C process attaches to', { skip: !process.env.PACER_SHM_HELPER && 'PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it)' }, () => {
  const p = sharedPath('to-c');
  const s = SharedPacer.open(p, quiet);
  try {
    for (let i = 0; i < 10; i++) assert.equal(s.reserve().waitMs, 0);
    // C attaches (it checks the header and uses the pacer Node wrote) and
    // finds the burst spent: its wait follows from the state Node left.
    const afterNode = s.state();
    assert.equal(afterNode.seq, 10);
    const before = sharedClockMs();
    const [line] = execFileSync(process.env.PACER_SHM_HELPER, ['debit', p, '1'], { encoding: 'utf8' })
      .trim().split('\n');
    const after = sharedClockMs();
    const match = /^admitted (\d+)$/.exec(line);
    assert.ok(match, `C after Node's burst: ${line}`);
    assertWaitBetween(Number(match[1]), afterNode, before, after, "C after Node's burst");
    assert.equal(s.state().seq, 11);
  } finally {
    s.close();
    fs.rmSync(p, { force: true });
  }
});

// ---------------------------------------------------------------- bookings (SPEC §11)
//
// BOOKCFG, the configuration of the C helper's `test_shm book`: rate 600,
// burst 1, idle 3600000, 5 retries, refund. By hand, from SPEC §3, §4, §11:
// - a token refills in 60000/600 = 100 ms (600 units a ms);
// - bound min(15000, floor((3600000 − 2000·(2^5 − 1))/(2·6))) = 15000; hint
//   cap 15 s; refusal schedule 5·15·1000 = 75000 ms, 75000·600 >= 60000:
//   refusing;
// - debt floor 15000·600/60000 = 150 tokens: debit k waits at most
//   (k − 1)·100 ms, so the first 1 + 150 (burst + floor) are admitted at any
//   speed;
// - horizon with r retries left 15000 + r·15·1000 (90000 with 5, 75000 with 4);
// - once in debt, the next debit's slot (now + wait) is the state word's
//   mark plus the time one token needs from its level,
//     slot = highWaterMs + ceil((60000 − tokensUnits)/600),
//   whenever the call comes (the refill until then and the wait cancel): a
//   debit moves it 100 ms later, a refund 100 ms earlier, a refusal or a
//   redemption leaves it. So slots are FIFO, 100 ms apart per debit.
// The clock is real: what an attempt may answer is checked against the
// slot and clock readings taken just before and after it (allowedKinds),
// never against how fast the machine is.
const BOOKCFG = Object.freeze({ ratePerMinute: 600, burst: 1, idleTimeoutMs: 3600000, maxRetries: 5 });
const BOOK_UNITS_PER_MS = 600;
const BOOK_SLOT_MS = 100;
const BOOK_BOUND_MS = 15000;
const BOOK_CAP_S = 15;
const bookHorizon = (retriesLeft) => BOOK_BOUND_MS + retriesLeft * BOOK_CAP_S * 1000;
const skipWithoutHelper = !process.env.PACER_SHM_HELPER && 'PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it)';

/** The next debit's slot for state word `s` of a BOOKCFG bucket in debt. */
function nextSlot(s) {
  return s.highWaterMs + Math.ceil((UNITS_PER_TOKEN - s.tokensUnits) / BOOK_UNITS_PER_MS);
}

/** SPEC §11's hint for a wait of `waitMs` past BOOKCFG's bound. */
function bookHint(waitMs) {
  return Math.min(BOOK_CAP_S, Math.max(1, Math.ceil((waitMs - BOOK_BOUND_MS) / 1000)));
}

/**
 * The answers SPEC §4/§11 allow an attempt holding no booking whose slot
 * would be `slot`, decided at a clock reading in [before, after] with
 * `retriesLeft` retries: the wait falls from slot − before to slot − after,
 * and a wait within the bound is admitted, within the horizon booked,
 * beyond it refused.
 */
function allowedKinds(slot, before, after, retriesLeft) {
  const order = ['refused', 'booked', 'admitted'];
  const kind = (wait) => (wait <= BOOK_BOUND_MS ? 2 : wait <= bookHorizon(retriesLeft) ? 1 : 0);
  return order.slice(kind(slot - before), kind(slot - after) + 1);
}

function openBook(p, time) {
  return SharedPacer.open(p, { ...quiet, ...BOOKCFG, schedule: time.schedule });
}

/** reserve() until the first refusal (no debit): how many were admitted,
 * how many of those with a wait, and the waits. */
function drain(s) {
  let waited = 0;
  const waits = [];
  for (let admitted = 0; ; admitted++) {
    assert.ok(admitted < 10000, 'no refusal in 10000 reservations');
    const d = s.reserve();
    if (d.kind === 'refused') return { admitted, waited, waits };
    waits.push(d.waitMs);
    if (d.waitMs > 0) waited++;
  }
}

/**
 * One `s.admit({key})` whose sleep runs on `time`, observed: the state word
 * and the clock just before and just after the decision (admit decides
 * before it first awaits), the kind (a refusal that debited one token
 * booked), and the wait it slept (null when none).
 */
async function keyedAttempt(s, time, key) {
  const s0 = s.state();
  const timers = time.timers.length;
  const before = sharedClockMs();
  const promise = s.admit({ key });
  const after = sharedClockMs();
  const s1 = s.state();
  const timer = time.timers[timers];
  if (timer !== undefined) await time.advance(timer.ms);
  const outcome = await promise;
  let kind = 'admitted';
  if (outcome.kind === 'refused') kind = s1.seq === s0.seq + 1 ? 'booked' : 'refused';
  return { outcome, kind, s0, s1, before, after, sleptMs: timer === undefined ? null : timer.ms };
}

/** Asserts attempt `a`, a request's first, is what SPEC §4/§11 allow for
 * `slot` with `retriesLeft` retries; its debit; its wait or hint. */
function assertFirstAttempt(a, slot, retriesLeft, label) {
  const kinds = allowedKinds(slot, a.before, a.after, retriesLeft);
  assert.ok(kinds.includes(a.kind), `${label}: ${a.kind}, allowed ${kinds} (slot ${slot}, clock ${a.before}..${a.after})`);
  assert.equal(a.s1.seq, a.s0.seq + (a.kind === 'refused' ? 0 : 1), `${label}: debits`);
  if (a.kind === 'admitted') {
    const slept = a.sleptMs ?? 0;
    assert.ok(slept >= Math.max(0, slot - a.after) && slept <= slot - a.before, `${label}: slept ${slept}`);
  } else {
    const { requiredWaitMs, retryAfterSeconds } = a.outcome;
    assert.ok(requiredWaitMs >= slot - a.after && requiredWaitMs <= slot - a.before, `${label}: wait ${requiredWaitMs}`);
    const hint = a.kind === 'booked' ? bookHint : () => BOOK_CAP_S; // past the horizon the wait is > 15 s
    assert.ok(retryAfterSeconds >= hint(slot - a.after) && retryAfterSeconds <= hint(slot - a.before),
      `${label}: hint ${retryAfterSeconds}`);
  }
}

/** The wait buckets' bounds, ms (docs/metrics.md). */
const WAIT_BOUNDS = [10, 50, 100, 500, 1000, 2500, 5000, 10000];

/** Counts one admission's wait into `expected` (counters() as the test
 * expects them): waits above 0 add to the total and to the bucket of the
 * first bound at or above them (none above 10000 ms). */
function countWait(expected, waitMs) {
  if (waitMs <= 0) return;
  expected.admittedAfterWait++;
  expected.waitMsTotal += waitMs;
  const i = WAIT_BOUNDS.findIndex((bound) => waitMs <= bound);
  if (i >= 0) expected.waitBuckets[i]++;
}

test('admit({key}) on a shared pacer: a booking in the bucket\'s line, redeemed by the retry with no debit; forget gives it back', async () => {
  const p = sharedPath('keyed');
  const time = new FakeTime();
  const s = openBook(p, time);
  // What the bucket's counters must read (this handle is the only one on
  // it), by SPEC's counting rule: a booking is a refusal and booked, a
  // not-yet redemption a refusal, an admitting redemption an admission and
  // redeemed, a refunding release a release and a refund; each admission's
  // wait (the time admit() slept) goes to the wait histogram.
  const expected = counts({});
  const count = (a, redemption = false) => {
    if (a.kind === 'admitted') {
      expected.admitted++;
      countWait(expected, a.sleptMs ?? 0);
      if (redemption) expected.redeemed++;
    } else {
      expected.refused++;
      if (a.kind === 'booked') expected.booked++;
    }
  };
  try {
    assert.equal(s.mode, 'refusing');
    assert.equal(s.waitBoundMs, BOOK_BOUND_MS);
    const drained = drain(s);
    assert.ok(drained.admitted >= 151, `admitted ${drained.admitted} before the first refusal`);
    expected.admitted += drained.admitted;
    for (const waitMs of drained.waits) countWait(expected, waitMs);
    assert.equal(expected.admittedAfterWait, drained.waited);
    expected.refused += 1;
    // Fresh keys until one books: each admitted one debits and pushes the
    // next slot 100 ms later, so one books unless every call takes 100 ms.
    let a;
    for (let i = 0; a === undefined; i++) {
      assert.ok(i < 1000, 'no key booked in 1000 attempts');
      const attempt = await keyedAttempt(s, time, `a${i}`);
      assertFirstAttempt(attempt, nextSlot(attempt.s0), 5, `a${i}`);
      count(attempt);
      if (attempt.kind === 'booked') a = { key: `a${i}`, slot: nextSlot(attempt.s0), seq: attempt.s1.seq };
    }
    assert.equal(s.pendingKeys, 1);
    // A second key lines up behind (or, after a stall, is admitted).
    const b = await keyedAttempt(s, time, 'b');
    assert.equal(nextSlot(b.s0), a.slot + BOOK_SLOT_MS * (b.s0.seq + 1 - a.seq), 'FIFO: 100 ms per debit');
    assertFirstAttempt(b, nextSlot(b.s0), 5, 'b');
    count(b);
    assert.equal(s.pendingKeys, b.kind === 'booked' ? 2 : 1);
    // Key a retries until its slot is within the bound. Each retry redeems
    // (pure: no debit, the next slot unchanged); not yet is allowed only
    // while slot − now > bound at some reading around it, and the first
    // retry with slot − before <= bound must be admitted, after
    // max(0, slot − now).
    for (let retries = 0; ; retries++) {
      const r = await keyedAttempt(s, time, a.key);
      count(r, true);
      assert.deepEqual([r.s1.seq, nextSlot(r.s1)], [r.s0.seq, nextSlot(r.s0)], 'a redemption changes nothing');
      if (r.kind === 'admitted') {
        assert.ok(a.slot - r.after <= BOOK_BOUND_MS, `admitted at ${r.after}, slot ${a.slot}`);
        const slept = r.sleptMs ?? 0;
        assert.ok(slept >= Math.max(0, a.slot - r.after) && slept <= a.slot - r.before, `slept ${slept}`);
        assert.equal(r.outcome.queued, r.sleptMs > 0);
        // The admission holds the booking's ticket: its release refunds the
        // booked token (the next slot 100 ms earlier), once.
        const slotBefore = nextSlot(s.state());
        assert.equal(r.outcome.release(), true);
        assert.equal(nextSlot(s.state()), slotBefore - BOOK_SLOT_MS);
        assert.equal(r.outcome.release(), false);
        expected.released++;
        expected.refunded++;
        break;
      }
      assert.equal(r.kind, 'refused', 'a retry holding a booking never debits');
      assert.ok(a.slot - r.before > BOOK_BOUND_MS, `not yet at ${r.before}, slot ${a.slot}`);
      const { requiredWaitMs, retryAfterSeconds } = r.outcome;
      assert.ok(requiredWaitMs >= a.slot - r.after && requiredWaitMs <= a.slot - r.before, `wait ${requiredWaitMs}`);
      assert.ok(retryAfterSeconds >= bookHint(a.slot - r.after) && retryAfterSeconds <= bookHint(a.slot - r.before));
      assert.ok(retries < 10000, 'never redeemed');
      await new Promise((resolve) => { setTimeout(resolve, 10); });
    }
    assert.equal(s.pendingKeys, b.kind === 'booked' ? 1 : 0);
    // b gives up: forgetting it refunds its booked token (the next slot
    // 100 ms earlier), once; an admitted or unknown key holds nothing.
    const beforeForget = s.state();
    assert.equal(s.forget('b'), b.kind === 'booked');
    assert.equal(nextSlot(s.state()), nextSlot(beforeForget) - (b.kind === 'booked' ? BOOK_SLOT_MS : 0));
    if (b.kind === 'booked') {
      expected.released++;
      expected.refunded++;
    }
    const afterForget = s.state();
    assert.equal(s.forget('b'), false);
    assert.equal(s.forget('never-seen'), false);
    assert.deepEqual(s.state(), afterForget, 'forgetting a key holding nothing changes nothing');
    assert.equal(s.pendingKeys, 0);
    assert.deepEqual(s.counters(), expected);
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
});

test('a shared pacer\'s keyed request counts down its retries: the horizon shrinks with each refusal', async () => {
  const p = sharedPath('retries');
  const time = new FakeTime();
  const s = openBook(p, time);
  const held = [];
  try {
    drain(s);
    // Book until the horizon of 5 retries (90000 ms) refuses: about 750
    // bookings, slots 100 ms apart.
    for (;;) {
      assert.ok(held.length < 10000, 'no refusal past the horizon');
      const d = s.reserveOrBook(5);
      if (d.kind === 'refused') {
        assert.ok(d.requiredWaitMs > bookHorizon(5), `refused at ${d.requiredWaitMs}`);
        break;
      }
      if (d.kind === 'booked') held.push(d.booking);
    }
    assert.ok(held.length >= 1);
    // Key y's first attempt (5 retries): past the horizon, refused, nothing held.
    const y1 = await keyedAttempt(s, time, 'y');
    assertFirstAttempt(y1, nextSlot(y1.s0), 5, 'y, first');
    // The last booking goes back: the next slot comes 100 ms earlier (to
    // that booking's own slot when y debited nothing).
    const last = held.pop();
    const beforeRelease = nextSlot(s.state());
    assert.equal(s.release(last.ticket), true);
    assert.equal(nextSlot(s.state()), beforeRelease - BOOK_SLOT_MS);
    if (y1.kind === 'refused') {
      assert.equal(nextSlot(s.state()), last.slotMs);
      // y has 4 retries left: horizon 75000, and that slot is about 90000
      // ms ahead: refused again (with 5 left it would book).
      const y2 = await keyedAttempt(s, time, 'y');
      assertFirstAttempt(y2, nextSlot(y2.s0), 4, 'y, second');
      assert.equal(s.forget('y'), y2.kind === 'booked');
    } else {
      assert.equal(s.forget('y'), y1.kind === 'booked');
    }
    // A fresh key has all 5: horizon 90000, booked at that slot.
    const z = await keyedAttempt(s, time, 'z');
    assertFirstAttempt(z, nextSlot(z.s0), 5, 'z');
    assert.equal(s.forget('z'), z.kind === 'booked');
    assert.equal(s.pendingKeys, 0);
  } finally {
    for (const booking of held) s.release(booking.ticket);
    s.close();
    SharedPacer.unlink(p);
  }
});

test('reserveOrBook and redeem on a shared pacer take no clock; bookings are FIFO, 100 ms apart per debit', async () => {
  const p = sharedPath('explicit');
  const s = openBook(p, new FakeTime());
  try {
    drain(s);
    const bookings = [];
    for (let i = 0; i < 20; i++) {
      const s0 = s.state();
      const before = sharedClockMs();
      const d = s.reserveOrBook(5);
      const after = sharedClockMs();
      const slot = nextSlot(s0);
      const kinds = allowedKinds(slot, before, after, 5);
      assert.ok(kinds.includes(d.kind), `${d.kind}, allowed ${kinds}`);
      assert.equal(s.state().seq, s0.seq + (d.kind === 'refused' ? 0 : 1));
      if (d.kind !== 'booked') continue;
      assert.ok(Booking.isBooking(d.booking));
      assert.equal(d.booking.slotMs, slot);
      assert.equal(d.booking.ticket.debitUnits, UNITS_PER_TOKEN);
      assert.ok(d.requiredWaitMs >= slot - after && d.requiredWaitMs <= slot - before);
      assert.ok(d.retryAfterSeconds >= bookHint(slot - after) && d.retryAfterSeconds <= bookHint(slot - before));
      assert.equal(d.clockRegressed, false);
      bookings.push({ booking: d.booking, seq: s0.seq + 1 });
    }
    assert.ok(bookings.length >= 1);
    for (let k = 1; k < bookings.length; k++) {
      assert.equal(bookings[k].booking.slotMs - bookings[k - 1].booking.slotMs,
        BOOK_SLOT_MS * (bookings[k].seq - bookings[k - 1].seq));
    }
    // The last booking is the furthest: not yet, unchanged, nothing debited.
    const { booking } = bookings.at(-1);
    const state = s.state();
    const before = sharedClockMs();
    const r = s.redeem(booking);
    const after = sharedClockMs();
    if (r.kind === 'booked') {
      assert.equal(r.booking, booking);
      assert.ok(r.retryAfterSeconds >= bookHint(booking.slotMs - after)
        && r.retryAfterSeconds <= bookHint(booking.slotMs - before));
      assert.equal(booking.ticket.spent, false);
    } else {
      assert.ok(booking.slotMs - after <= BOOK_BOUND_MS, 'admitted only within the bound');
      assert.equal(r.path, 'booked');
      assert.equal(booking.ticket.spent, true);
      bookings.pop();
      assert.equal(s.release(r.ticket), true);
    }
    assert.equal(s.state().seq, state.seq, 'a redemption never debits');
    for (const { booking: b } of bookings) assert.equal(s.release(b.ticket), true);
    assert.throws(() => s.redeem(bookings[0]?.booking ?? booking), RangeError, 'released');
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
});

test('a booking from another bucket, another handle or an in-process pacer is refused', async () => {
  const pa = sharedPath('bucket-a');
  const pb = sharedPath('bucket-b');
  const time = new FakeTime();
  const a = openBook(pa, time);
  const b = openBook(pb, new FakeTime());
  const a2 = openBook(pa, new FakeTime());
  const local = new Pacer({ ...quiet, ...BOOKCFG, now: () => 0 });
  try {
    drain(a);
    let booked;
    for (let i = 0; booked === undefined; i++) {
      assert.ok(i < 1000, 'no booking in 1000 calls');
      const d = a.reserveOrBook(5);
      if (d.kind === 'booked') booked = d.booking;
    }
    // Another bucket: the redemption throws, the release refunds nothing;
    // neither touches either bucket or the booking.
    const stateA = a.state();
    const stateB = b.state();
    const countsA = a.counters();
    assert.throws(() => b.redeem(booked), RangeError);
    assert.equal(b.release(booked.ticket), false);
    // Another handle on the same bucket: a ticket belongs to the handle that issued it.
    assert.throws(() => a2.redeem(booked), RangeError);
    assert.equal(a2.release(booked.ticket), false);
    // An in-process pacer, either way round.
    assert.throws(() => local.redeem(booked, 0), RangeError);
    assert.equal(local.release(booked.ticket, 0), false);
    // At t = 0 it admits debits 1..151 (waits 0..15000); debit 152 would
    // wait 15100 > 15000: booked, at slot 15100.
    for (let i = 0; i < 151; i++) assert.equal(local.reserve(0).kind, 'admitted');
    const localBooking = local.reserveOrBook(0, 5).booking;
    assert.equal(localBooking.slotMs, 15100);
    assert.throws(() => a.redeem(localBooking), RangeError);
    assert.equal(a.release(localBooking.ticket), false);
    assert.deepEqual(a.state(), stateA);
    assert.deepEqual(b.state(), stateB);
    // Counts are the bucket's: b's none, a2 reads a's, and the refused
    // calls counted nothing in either.
    assert.deepEqual(b.counters(), ZERO_COUNTS, 'nothing reached b');
    assert.deepEqual([a.counters(), a2.counters()], [countsA, countsA], 'nothing reached a\'s bucket');
    // Its own handle still holds it: release once.
    assert.equal(booked.ticket.spent, false);
    assert.equal(a.release(booked.ticket), true);
    assert.equal(a.release(booked.ticket), false);
    // Keys are the handle's: a2 knows none of a's.
    const k = await keyedAttempt(a, time, 'k');
    assertFirstAttempt(k, nextSlot(k.s0), 5, 'k');
    assert.equal(a.pendingKeys, k.kind === 'admitted' ? 0 : 1);
    assert.equal(a2.pendingKeys, 0);
    const before = a.state();
    assert.equal(a2.forget('k'), false);
    assert.deepEqual(a.state(), before);
    assert.equal(a.forget('k'), k.kind === 'booked');
  } finally {
    a.close();
    a2.close();
    b.close();
    SharedPacer.unlink(pa);
    SharedPacer.unlink(pb);
  }
});

test('keyed calls on a shared pacer: bad input throws and changes nothing; after close() they throw ERR_PACER_CLOSED', async () => {
  const p = sharedPath('keyed-input');
  const s = openBook(p, new FakeTime());
  try {
    const state = s.state();
    assert.throws(() => s.reserveOrBook(1.5), RangeError);
    assert.throws(() => s.reserveOrBook(Number.NaN), /retriesLeft/);
    assert.throws(() => s.reserveOrBook(-1), /retriesLeft/);
    assert.throws(() => s.reserveOrBook('5'), TypeError);
    assert.throws(() => s.reserveOrBook(), TypeError);
    assert.throws(() => s.redeem({ slotMs: 1 }), TypeError);
    assert.throws(() => s.redeem(undefined), TypeError);
    assert.throws(() => s.forget({}), TypeError);
    assert.throws(() => s.forget(null), TypeError);
    await assert.rejects(s.admit({ key: {} }), TypeError);
    await assert.rejects(s.admit({ key: null }), TypeError);
    assert.deepEqual(s.state(), state);
    assert.deepEqual(s.counters(), ZERO_COUNTS);
    assert.equal(s.pendingKeys, 0);
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
  const closed = (e) => e instanceof Error && e.code === 'ERR_PACER_CLOSED';
  assert.throws(() => s.reserveOrBook(5), closed);
  assert.throws(() => s.forget('k'), closed);
  assert.throws(() => s.redeem(new Booking(1, new Ticket(s, 1, UNITS_PER_TOKEN))), closed);
  await assert.rejects(s.admit({ key: 'k' }), closed);
  assert.equal(s.pendingKeys, 0);
});

test('bookings from Node and from C processes keep one FIFO line; C sees Node\'s refunds', { skip: skipWithoutHelper }, async () => {
  const p = sharedPath('book-c');
  // `test_shm book PATH N`: N reserve_or_book(5) calls with BOOKCFG, one
  // line each: "admitted WAIT SEQ", "booked SLOT SEQ" or "refused HINT".
  const book = (n) => execFileSync(process.env.PACER_SHM_HELPER, ['book', p, String(n)], { encoding: 'utf8' })
    .trim().split('\n').map((line) => {
      const m = /^(admitted|booked) (\d+) (\d+)$/.exec(line) ?? /^(refused) (\d+)$/.exec(line);
      assert.ok(m, `C: ${line}`);
      return { kind: m[1], value: Number(m[2]), seq: Number(m[3]) };
    });
  const time = new FakeTime();
  let s;
  try {
    // C creates the bucket: 160 calls, the first 151 (at least) admitted,
    // the rest booked (10 bookings reach 15000 + 1000 < 90000: none refused).
    const c1 = book(160);
    const admitted = c1.filter((d) => d.kind === 'admitted').length;
    assert.ok(admitted >= 151, `C admitted ${admitted}`);
    assert.equal(c1.filter((d) => d.kind === 'refused').length, 0);
    const line = c1.filter((d) => d.kind === 'booked').map((d) => ({ by: 'C', seq: d.seq, slot: d.value }));
    // Node attaches (same configuration) and books: explicitly, and by key.
    s = openBook(p, time);
    assert.equal(s.state().seq, c1.at(-1).seq, "Node sees C's debits");
    const keys = [];
    for (let i = 0; i < 10; i++) {
      if (i % 2 === 0) {
        const s0 = s.state();
        const before = sharedClockMs();
        const d = s.reserveOrBook(5);
        const after = sharedClockMs();
        assert.ok(allowedKinds(nextSlot(s0), before, after, 5).includes(d.kind), d.kind);
        if (d.kind === 'booked') line.push({ by: 'Node', seq: s0.seq + 1, slot: d.booking.slotMs });
      } else {
        const a = await keyedAttempt(s, time, `n${i}`);
        assertFirstAttempt(a, nextSlot(a.s0), 5, `n${i}`);
        if (a.kind === 'booked') {
          keys.push(`n${i}`);
          // Its slot, from the wait at the readings around it.
          line.push({ by: 'Node (key)', seq: a.s1.seq, slotBetween: [a.before + a.outcome.requiredWaitMs, a.after + a.outcome.requiredWaitMs] });
        }
      }
    }
    // C books behind Node (about 15000 + 2000 ms ahead: none refused), its
    // debits numbered after Node's.
    const seqAfterNode = s.state().seq;
    const c2 = book(10);
    assert.deepEqual(c2.map((d) => d.seq), Array.from({ length: 10 }, (_, k) => seqAfterNode + 1 + k));
    for (const d of c2) if (d.kind === 'booked') line.push({ by: 'C', seq: d.seq, slot: d.value });
    assert.ok(line.some((e) => e.by === 'C') && line.some((e) => e.by !== 'C'), 'bookings from both');
    // One line: by debit (seq), each slot 100 ms per debit after the one before.
    line.sort((x, y) => x.seq - y.seq);
    const anchor = line.find((e) => e.slot !== undefined);
    for (const e of line) {
      const expected = anchor.slot + BOOK_SLOT_MS * (e.seq - anchor.seq);
      if (e.slot !== undefined) {
        assert.equal(e.slot, expected, `${e.by} seq ${e.seq}`);
      } else {
        assert.ok(e.slotBetween[0] <= expected && expected <= e.slotBetween[1], `${e.by} seq ${e.seq}: ${e.slotBetween}`);
      }
    }
    for (let k = 1; k < line.length; k++) assert.ok(line[k].seq > line[k - 1].seq, 'distinct debits');
    // SPEC §6.1 on the slots: in any window of W ms at most 600·W/60000 + 1.
    const slots = line.map((e) => anchor.slot + BOOK_SLOT_MS * (e.seq - anchor.seq));
    for (const w of [0, 99, 999, 4999]) {
      let worst = 0;
      for (let i = 0, j = 0; i < slots.length; i++) {
        while (slots[i] - slots[j] > w) j++;
        worst = Math.max(worst, i - j + 1);
      }
      assert.ok(worst <= Math.floor((600 * w) / 60000) + 1, `window ${w}: ${worst}`);
    }
    // Node's keyed requests give up: each forget refunds one token, so C's
    // next slot comes 100 ms earlier per forgotten booking.
    const last = line.at(-1);
    const lastSlot = anchor.slot + BOOK_SLOT_MS * (last.seq - anchor.seq);
    for (const key of keys) assert.equal(s.forget(key), true);
    const before = sharedClockMs();
    const [c3] = book(1);
    const after = sharedClockMs();
    const slot = lastSlot + BOOK_SLOT_MS * (c3.seq - last.seq) - BOOK_SLOT_MS * keys.length;
    if (c3.kind === 'booked') {
      assert.equal(c3.value, slot);
    } else {
      assert.equal(c3.kind, 'admitted');
      assert.ok(before + c3.value <= slot && slot <= after + c3.value, `C admitted after ${c3.value}`);
    }
  } finally {
    s?.close();
    fs.rmSync(p, { force: true });
  }
});
