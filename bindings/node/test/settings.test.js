'use strict';
// Settings text a JS string can hold and UTF-8 cannot, or that C would cut
// short: a lone surrogate ("\ud800") or a NUL ("12\u0000x"). Each is a
// malformed setting (SPEC §2): the default and a notice, never a throw and
// never a misread (the NUL never ends the number early). The notice keeps
// the text as given in `raw` and in its key; its English text shows each
// NUL or lone surrogate as U+FFFD, as every binding renders it. Expected
// budgets and texts are written out by hand from SPEC §2 and the core's
// notice texts.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Pacer, NoticeRegistry, resolveBudget } = require('../index.js');
const compat = require('../compat.js');

function resolve(env) {
  const seen = [];
  const budget = resolveBudget(env, { onNotice: (n) => seen.push(n), noticeRegistry: new NoticeRegistry() });
  return { budget, seen };
}

const DEFAULTS = { ratePerMinute: 60, idleTimeoutMs: 120000, totalTimeoutMs: 600000, maxRetries: 5 };

function budgetOf(b) {
  return {
    ratePerMinute: b.ratePerMinute, idleTimeoutMs: b.idleTimeoutMs, totalTimeoutMs: b.totalTimeoutMs,
    maxRetries: b.maxRetries,
  };
}

// Each case: the settings, then each notice as [kind, key, raw, text]; the
// budget is the default one.
for (const [name, env, notices] of [
  ['a NUL in a setting: the default and a notice, never the digits before it', {
    PACER_RATE_PER_MIN: '12\u0000x',
    PACER_IDLE_TIMEOUT_MS: '30000\u0000',
    PACER_TOTAL_TIMEOUT_MS: '\u00006',
    PACER_MAX_RETRIES: '3\u00001',
  }, [
    ['rate_malformed', 'rate:12\u0000x', '12\u0000x',
      'ignoring new-connection rate "12\uFFFDx": not a whole number of connections per minute; using 60/minute'],
    ['idle_malformed', 'idle:30000\u0000', '30000\u0000',
      'ignoring idle timeout "30000\uFFFD": not a whole number of milliseconds; using 120000ms'],
    ['total_malformed', 'total:\u00006', '\u00006',
      'ignoring total timeout "\uFFFD6": not a whole number of milliseconds; using 600000ms'],
    ['retries_malformed', 'retries:3\u00001', '3\u00001',
      'ignoring max retries "3\uFFFD1": not a whole number; using 5'],
  ]],
  ['a lone surrogate in a setting: the default and a notice whose raw is the text as given',
    { PACER_RATE_PER_MIN: '\ud800', PACER_MAX_RETRIES: '2\udfff' }, [
      ['rate_malformed', 'rate:\ud800', '\ud800',
        'ignoring new-connection rate "\uFFFD": not a whole number of connections per minute; using 60/minute'],
      ['retries_malformed', 'retries:2\udfff', '2\udfff',
        'ignoring max retries "2\uFFFD": not a whole number; using 5'],
    ]],
]) {
  test(name, () => {
    const { budget, seen } = resolve(env);
    assert.deepEqual(budgetOf(budget), DEFAULTS);
    assert.deepEqual(seen.map((n) => [n.kind, n.key, n.raw, n.text]), notices);
  });
}

test('two different unreadable texts are two notices (their keys are the texts as given)', () => {
  const registry = new NoticeRegistry();
  const seen = [];
  for (const raw of ['\ud800', '\udbff', '\uFFFD', '1\u00002', '1\uFFFD2']) {
    resolveBudget({ PACER_RATE_PER_MIN: raw }, { onNotice: (n) => seen.push(n.raw), noticeRegistry: registry });
  }
  assert.deepEqual(seen, ['\ud800', '\udbff', '\uFFFD', '1\u00002', '1\uFFFD2']);
});

test('fromEnv with such settings builds the default pacer and never throws', () => {
  const notices = [];
  const pacer = Pacer.fromEnv({ PACER_RATE_PER_MIN: '6\u00000', PACER_IDLE_TIMEOUT_MS: '\ud83d' },
    { onNotice: (n) => notices.push(n.kind), noticeRegistry: new NoticeRegistry(), now: () => 0 });
  assert.deepEqual(pacer.config, {
    ratePerMinute: 60, burst: 10, idleTimeoutMs: 120000, maxRetries: 5, releasePolicy: 'refund',
  });
  assert.deepEqual(notices, ['rate_malformed', 'idle_malformed']);
});

test('a settings object value that is not a string is read as text, never a throw', () => {
  const unprintable = { toString() { throw new Error('no text'); } };
  const { budget, seen } = resolve({ PACER_RATE_PER_MIN: 30, PACER_IDLE_TIMEOUT_MS: unprintable,
    PACER_MAX_RETRIES: Symbol('r') });
  assert.deepEqual(budgetOf(budget), { ...DEFAULTS, ratePerMinute: 30 });
  assert.deepEqual(seen.map((n) => [n.kind, n.raw]), [
    ['idle_malformed', '[object Object]'],
    ['retries_malformed', 'Symbol(r)'],
  ]);
});

test('compat: the original texts name the setting as given, a lone surrogate included', () => {
  const warnings = [];
  const warn = (m) => warnings.push(m);
  assert.equal(compat.wsNewConnectionsPerMinute({ CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN: '12\u0000x' }, warn), 60);
  assert.deepEqual(compat.upstreamRequestBudget({
    env: { CLODEX_UPSTREAM_IDLE_TIMEOUT_MS: '\ud800', CLODEX_UPSTREAM_MAX_RETRIES: '3\u0000' }, warn,
  }), { idleTimeoutMs: 120000, totalTimeoutMs: 600000, maxRetries: 5 });
  assert.deepEqual(warnings, [
    'ignoring CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN=12\u0000x (expected a non-negative integer; using 60)',
    'ignoring CLODEX_UPSTREAM_IDLE_TIMEOUT_MS=\ud800 (expected a positive integer number of milliseconds)',
    'ignoring CLODEX_UPSTREAM_MAX_RETRIES=3\u0000 (expected a non-negative integer)',
  ]);
});
