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
// The smoke test attaches to a pacer a C process created and debited
// (PACER_SHM_HELPER, set by scripts/test-shm.sh; skipped without it).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { SharedPacer, Pacer, sharedClockMs } = require('../index.js');
const { FakeTime } = require('./helpers.js');

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

test('counters count the calls made through each handle only; a fresh handle starts at 0', () => {
  const p = sharedPath('counters');
  const a = SharedPacer.open(p, quiet);
  const b = SharedPacer.open(p, quiet);
  const zero = {
    admitted: 0, admittedAfterWait: 0, refused: 0, shaped: 0, released: 0, refunded: 0, clockRegressions: 0,
  };
  try {
    // Five of the burst of 10: none waits, at any speed.
    const fromA = [a.reserve(), a.reserve(), a.reserve()];
    const fromB = [b.reserve(), b.reserve()];
    assert.ok([...fromA, ...fromB].every((d) => d.kind === 'admitted' && d.waitMs === 0));
    assert.equal(a.release(fromA[0].ticket), true);
    assert.equal(b.release(fromB[1].ticket), true);
    assert.equal(b.release(fromB[1].ticket), false, 'spent: not a call that reaches the pacer');
    assert.deepEqual(a.counters(), { ...zero, admitted: 3, released: 1, refunded: 1 });
    assert.deepEqual(b.counters(), { ...zero, admitted: 2, released: 1, refunded: 1 });
    // A third handle sees the machine-wide state but none of those calls.
    const c = SharedPacer.open(p, quiet);
    try {
      assert.deepEqual(c.counters(), zero);
      assert.deepEqual(c.state(), a.state());
      assert.equal(c.reserve().kind, 'admitted');
      assert.deepEqual(c.counters(), { ...zero, admitted: 1 });
      assert.deepEqual(a.counters(), { ...zero, admitted: 3, released: 1, refunded: 1 }, 'a unchanged');
    } finally {
      c.close();
    }
    // Reopening gives a fresh handle: its counters start at 0 again.
    a.close();
    const again = SharedPacer.open(p, quiet);
    try {
      assert.deepEqual(again.counters(), zero);
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

test('a shared pacer does not book (yet): keyed calls throw, plain ones work', async () => {
  const p = sharedPath('book');
  const s = SharedPacer.open(p, quiet);
  try {
    await assert.rejects(s.admit({ key: 'a' }), /not available on a shared pacer/);
    assert.equal((await s.admit()).kind, 'admitted');
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
});
