'use strict';
// Shared pacers: one bucket for every process on the machine. Expected
// numbers come from SPEC §2-§7 at the defaults (rate 60, burst 10, bound
// 4833 ms): the burst admits 10 at once, the 11th waits one slot of 1000 ms.
// The smoke test attaches to a pacer a C process created and debited
// (PACER_SHM_HELPER, set by scripts/test-shm.sh; skipped without it).
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { SharedPacer, Pacer, sharedClockMs } = require('../index.js');

const dir = process.env.PACER_SHM_TEST_DIR || fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-'));
if (!process.env.PACER_SHM_TEST_DIR) test.after(() => fs.rmSync(dir, { recursive: true, force: true }));
const quiet = { onNotice: () => {} };

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
    let immediate = 0;
    for (let i = 0; i < 10; i++) {
      const d = (i % 2 ? a : b).reserve();
      if (d.kind === 'admitted' && d.waitMs === 0) immediate++;
    }
    assert.equal(immediate, 10);
    const d = a.reserve();
    assert.equal(d.kind, 'admitted');
    assert.ok(d.waitMs > 900 && d.waitMs <= 1000, `11th waits ${d.waitMs}`);
    assert.deepEqual(a.state(), b.state());
    assert.equal(a.waitBoundMs, 4833);
    assert.equal(a.mode, 'refusing');
    assert.equal(b.release(d.ticket), false, "b cannot release a's ticket");
    assert.equal(a.release(d.ticket), true);
    const st = fs.lstatSync(p);
    assert.equal(st.mode & 0o777, 0o600);
    assert.equal(st.size, 65536 + 256);
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
  // rate 600, burst 1, idle 3600000, 5 retries: slots 100 ms apart.
  const s = SharedPacer.open(p, { ...quiet, ratePerMinute: 600, burst: 1, idleTimeoutMs: 3600000 });
  try {
    const first = await s.admit();
    assert.equal(first.kind, 'admitted');
    assert.equal(first.queued, false);
    const second = await s.admit();
    assert.equal(second.kind, 'admitted');
    assert.equal(second.queued, true);
    assert.ok(second.waitedMs >= 90, `waited ${second.waitedMs}`);
  } finally {
    s.close();
    SharedPacer.unlink(p);
  }
  assert.throws(() => s.reserve(), (e) => e.code === 'SHARED_NOT_OPEN');
});

test('sees the debits of a C process, and C sees ours', { skip: !process.env.PACER_SHM_HELPER && 'PACER_SHM_HELPER is unset (scripts/test-shm.sh sets it)' }, () => {
  const p = sharedPath('from-c');
  const debit = (n) => execFileSync(process.env.PACER_SHM_HELPER, ['debit', p, String(n)], { encoding: 'utf8' })
    .trim().split('\n');
  try {
    assert.deepEqual(debit(10), Array(10).fill('admitted 0'));
    const s = SharedPacer.open(p, quiet);
    const d = s.reserve();
    // The burst is gone: the next slot is up to 1000 ms away.
    assert.equal(d.kind, 'admitted');
    assert.ok(d.queued && d.waitMs > 500 && d.waitMs <= 1000, `after C's burst: ${JSON.stringify(d)}`);
    // And C sees this debit: its slot is one more second out.
    const [line] = debit(1);
    const wait = Number(/^admitted (\d+)$/.exec(line)?.[1]);
    assert.ok(wait > d.waitMs + 500 && wait <= 2000, `C after Node: ${line}`);
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
    // finds the burst spent: its request waits up to one slot, 1000 ms.
    const [line] = execFileSync(process.env.PACER_SHM_HELPER, ['debit', p, '1'], { encoding: 'utf8' })
      .trim().split('\n');
    const wait = Number(/^admitted (\d+)$/.exec(line)?.[1]);
    assert.ok(wait > 500 && wait <= 1000, `C after Node's burst: ${line}`);
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
