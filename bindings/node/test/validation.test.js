'use strict';
// One rule for every option and argument of the `pacer` entry point:
// an option that is undefined takes its default; null or a value of the
// wrong type is a TypeError naming the option; a number that is NaN,
// infinite, negative, fractional or out of range (past 2^53 included) is a
// RangeError naming it. A rejected call changes nothing.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {
  Pacer, SharedPacer, Ticket, Booking, NoticeRegistry, resolveBudget, refusalResponse,
} = require('../index.js');
const { FakeTime, quiet, throwsNaming } = require('./helpers.js');

// Every numeric option, with its default and a value of each bad kind.
const NUMERIC_OPTIONS = {
  ratePerMinute: 60,
  burst: 10,
  idleTimeoutMs: 120000,
  maxRetries: 5,
};
const WRONG_TYPES = [null, '60', 60n, true, {}, [5]];
const BAD_NUMBERS = [NaN, Infinity, -Infinity, -1, 1.5, 2 ** 53, 2 ** 64];

test('numeric options: undefined is the default; null or a non-number a TypeError; a bad number a RangeError', () => {
  for (const [name, fallback] of Object.entries(NUMERIC_OPTIONS)) {
    const pacer = new Pacer({ [name]: undefined, onNotice: quiet });
    assert.equal(pacer.config[name], fallback, `${name}: undefined`);
    for (const bad of WRONG_TYPES) {
      throwsNaming(() => new Pacer({ [name]: bad, onNotice: quiet }), TypeError, name, `${name}: ${String(bad)}`);
    }
    for (const bad of BAD_NUMBERS) {
      throwsNaming(() => new Pacer({ [name]: bad, onNotice: quiet }), RangeError, name, `${name}: ${bad}`);
    }
  }
});

test('the other options: undefined is the default; null or the wrong type a TypeError naming it', () => {
  const defaults = new Pacer({ releasePolicy: undefined, now: undefined, schedule: undefined,
    onNotice: undefined, noticeRegistry: undefined, ratePerMinute: 60 });
  assert.equal(defaults.config.releasePolicy, 'refund');
  const cases = {
    releasePolicy: [null, 1, {}],
    now: [null, 5, 'now'],
    schedule: [null, 'soon', {}],
    onNotice: [null, 'stderr', 1],
    noticeRegistry: [null, 5, 'registry', {}],
  };
  for (const [name, values] of Object.entries(cases)) {
    for (const bad of values) {
      throwsNaming(() => new Pacer({ [name]: bad }), TypeError, name, `${name}: ${String(bad)}`);
    }
  }
  throwsNaming(() => new Pacer({ releasePolicy: 'lenient' }), RangeError, 'releasePolicy', 'lenient');
  throwsNaming(() => new Pacer(null), TypeError, 'options', 'null options');
  throwsNaming(() => new Pacer(5), TypeError, 'options', 'number options');
  // A clock that answers something that is not a number names now().
  throwsNaming(() => new Pacer({ now: () => '5', onNotice: quiet }), TypeError, 'now()', 'now() string');
  throwsNaming(() => new Pacer({ now: () => -1, onNotice: quiet }), RangeError, 'now()', 'now() negative');
});

test('resolveBudget and fromEnv options follow the same rule', () => {
  const registry = new NoticeRegistry();
  const budget = resolveBudget({}, { names: undefined, onNotice: undefined, noticeRegistry: undefined });
  assert.equal(budget.ratePerMinute, 60);
  // names: undefined entries keep the default name.
  const renamed = resolveBudget({ RATE: '30', PACER_IDLE_TIMEOUT_MS: '30000' },
    { names: { ratePerMinute: 'RATE', idleTimeoutMs: undefined }, onNotice: quiet, noticeRegistry: registry });
  assert.deepEqual([renamed.ratePerMinute, renamed.idleTimeoutMs], [30, 30000]);
  for (const [name, bad] of [['names', null], ['names', 'RATE'], ['names.ratePerMinute', null],
    ['names.ratePerMinute', 5], ['onNotice', null], ['noticeRegistry', null], ['noticeRegistry', {}]]) {
    const options = name.startsWith('names.') ? { names: { ratePerMinute: bad } } : { [name]: bad };
    throwsNaming(() => resolveBudget({}, options), TypeError, name, `${name}: ${String(bad)}`);
    throwsNaming(() => Pacer.fromEnv({}, options), TypeError, name, `fromEnv ${name}: ${String(bad)}`);
  }
  throwsNaming(() => resolveBudget({}, null), TypeError, 'options', 'null options');
  throwsNaming(() => resolveBudget(null), TypeError, 'env', 'null env');
  throwsNaming(() => Pacer.fromEnv({}, null), TypeError, 'options', 'fromEnv null options');
});

test('admit options: undefined is no signal / no key; null or the wrong type is a TypeError, nothing reserved', async () => {
  const time = new FakeTime();
  // Burst 10: the two admits below find a token each.
  const pacer = new Pacer({ now: time.now, schedule: time.schedule, onNotice: quiet });
  for (const [options, name] of [[null, 'options'], [5, 'options'], [{ signal: null }, 'signal'],
    [{ signal: 'abort' }, 'signal'], [{ key: null }, 'key'], [{ key: {} }, 'key']]) {
    await assert.rejects(pacer.admit(options), (e) => e instanceof TypeError && e.message.includes(name),
      JSON.stringify(options));
  }
  assert.equal(pacer.counters().admitted, 0, 'nothing reserved');
  assert.equal((await pacer.admit({ signal: undefined, key: undefined })).kind, 'admitted');
  assert.equal((await pacer.admit(undefined)).kind, 'admitted');
});

test('refusalResponse: retryAfterSeconds and options.messagePrefix by the same rule', () => {
  assert.equal(refusalResponse(1, { messagePrefix: undefined }).headers['retry-after'], '1');
  for (const bad of [null, '1', 1n]) throwsNaming(() => refusalResponse(bad), TypeError, 'retryAfterSeconds', String(bad));
  for (const bad of BAD_NUMBERS) throwsNaming(() => refusalResponse(bad), RangeError, 'retryAfterSeconds', String(bad));
  throwsNaming(() => refusalResponse(1, null), TypeError, 'options', 'null options');
  throwsNaming(() => refusalResponse(1, { messagePrefix: null }), TypeError, 'messagePrefix', 'null prefix');
  throwsNaming(() => refusalResponse(1, { messagePrefix: 5 }), TypeError, 'messagePrefix', 'number prefix');
});

test('every method argument that is a number: TypeError or RangeError naming it, nothing changed', () => {
  const time = new FakeTime();
  const pacer = new Pacer({ now: time.now, schedule: time.schedule, onNotice: quiet });
  const live = pacer.reserve(0);
  const before = pacer.state();
  const calls = {
    nowMs: [
      (v) => pacer.reserve(v),
      (v) => pacer.release(live.ticket, v),
      (v) => pacer.reserveOrBook(v, 5),
      (v) => pacer.forget('k', v),
    ],
    retriesLeft: [(v) => pacer.reserveOrBook(0, v)],
  };
  for (const [name, fns] of Object.entries(calls)) {
    for (const fn of fns) {
      for (const bad of [null, '0', 0n, {}]) throwsNaming(() => fn(bad), TypeError, name, `${name} ${String(bad)}`);
      for (const bad of [NaN, Infinity, -1, 0.5, 2 ** 53]) throwsNaming(() => fn(bad), RangeError, name, `${name} ${bad}`);
    }
  }
  assert.throws(() => pacer.reserveOrBook(0, 2 ** 32), (e) => e instanceof RangeError && /retriesLeft/.test(e.message));
  assert.deepEqual(pacer.state(), before, 'nothing changed');
  assert.equal(live.ticket.spent, false);
  assert.equal(pacer.counters().admitted, 1);
});

test('new Ticket(owner, seq, debitUnits) checks each argument by name', () => {
  const pacer = new Pacer({ now: () => 0, onNotice: quiet });
  throwsNaming(() => new Ticket(pacer, NaN, 'x'), RangeError, 'seq', 'NaN seq');
  throwsNaming(() => new Ticket(pacer, 1, 'x'), TypeError, 'debitUnits', 'string debit');
  for (const bad of [null, '1', 1n]) throwsNaming(() => new Ticket(pacer, bad, 60000), TypeError, 'seq', String(bad));
  for (const bad of [NaN, -1, 1.5, 2 ** 32, 2 ** 53]) {
    throwsNaming(() => new Ticket(pacer, bad, 60000), RangeError, 'seq', String(bad));
  }
  for (const bad of [null, '1']) throwsNaming(() => new Ticket(pacer, 1, bad), TypeError, 'debitUnits', String(bad));
  for (const bad of [NaN, 0, -1, 0.5, 60001, 2 ** 53]) {
    throwsNaming(() => new Ticket(pacer, 1, bad), RangeError, 'debitUnits', String(bad));
  }
  for (const bad of [null, undefined, {}, 'pacer']) {
    throwsNaming(() => new Ticket(bad, 1, 60000), TypeError, 'owner', String(bad));
  }
  // A well-formed ticket a caller made releases like any other: the pacer's
  // first debit has seq 1 (SPEC §4: one token, refunded).
  assert.equal(pacer.reserve(0).kind, 'admitted');
  assert.equal(pacer.release(new Ticket(pacer, 1, 60000), 0), true);
});

test('new Booking(slotMs, ticket) checks each argument by name', () => {
  const pacer = new Pacer({ now: () => 0, onNotice: quiet });
  const ticket = pacer.reserve(0).ticket;
  for (const bad of [null, '1']) throwsNaming(() => new Booking(bad, ticket), TypeError, 'slotMs', String(bad));
  for (const bad of [NaN, -1, 0.5, 2 ** 53]) throwsNaming(() => new Booking(bad, ticket), RangeError, 'slotMs', String(bad));
  for (const bad of [null, {}, 1]) throwsNaming(() => new Booking(0, bad), TypeError, 'ticket', String(bad));
  assert.equal(new Booking(5000, ticket).slotMs, 5000);
});

test('SharedPacer.open options by the same rule; nothing is created for a bad one', () => {
  const p = path.join(os.tmpdir(), `pacer-node-validation-${process.pid}`);
  fs.rmSync(p, { force: true });
  for (const name of ['ratePerMinute', 'burst', 'idleTimeoutMs', 'maxRetries', 'releasePolicy', 'schedule',
    'onNotice', 'noticeRegistry']) {
    throwsNaming(() => SharedPacer.open(p, { [name]: null }), TypeError, name, `${name}: null`);
  }
  throwsNaming(() => SharedPacer.open(p, { now: null }), TypeError, 'now', 'now: null');
  throwsNaming(() => SharedPacer.open(p, null), TypeError, 'options', 'null options');
  throwsNaming(() => SharedPacer.open(p, { burst: 1.5 }), RangeError, 'burst', 'burst 1.5');
  assert.equal(fs.existsSync(p), false);
});
