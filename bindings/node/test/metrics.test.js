'use strict';
// connpacer/metrics against docs/metrics.md: decisions made by hand on an
// injected clock (in-process pacers), on one shared-memory bucket through
// two handles, and on a real redis-server (test/redis-server.js); then the
// registry is read twice, by prom-client's getMetricsAsJSON() and by
// parsing its text exposition (registry.metrics()) with prom2javascript,
// and every name, type, label and value is checked against the numbers
// derived in the comments. Nothing here mocks the registry or Redis.
const { test, describe, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { Readable } = require('node:stream');
const { execFileSync } = require('node:child_process');
const promClient = require('prom-client');
const { getMetricsFromStream } = require('prom2javascript');
const { Pacer, SharedPacer, RedisPacer, WAIT_BOUNDS_MS, constants } = require('../index.js');
const { registerMetrics, unregisterMetrics, METRIC_NAMES } = require('../metrics.js');
const { RedisServer, freePort } = require('./redis-server.js');
const { CONFIG, LONG, freshKey } = require('./redis-support.js');
const { quiet } = require('./helpers.js');

// ---------------------------------------------------------------- the contract

/** docs/metrics.md's table: each family's type and label names (a
 * histogram's bucket samples carry `le` besides). */
const FAMILIES = {
  pacer_decisions_total: { type: 'counter', labels: ['bucket', 'decision'] },
  pacer_wait_seconds: { type: 'histogram', labels: ['bucket'] },
  pacer_shaped_total: { type: 'counter', labels: ['bucket'] },
  pacer_redeemed_total: { type: 'counter', labels: ['bucket'] },
  pacer_releases_total: { type: 'counter', labels: ['bucket', 'refunded'] },
  pacer_upstream_outcomes_total: { type: 'counter', labels: ['bucket', 'outcome'] },
  pacer_clock_regressions_total: { type: 'counter', labels: ['bucket'] },
  pacer_rate_in_force_per_minute: { type: 'gauge', labels: ['bucket'] },
  pacer_tokens: { type: 'gauge', labels: ['bucket'] },
  pacer_bookings_pending: { type: 'gauge', labels: ['bucket'] },
  pacer_fallbacks_total: { type: 'counter', labels: ['bucket'] },
};

/** The histogram's `le` bounds as the exposition writes them (docs). */
const LE = ['0.01', '0.05', '0.1', '0.5', '1', '2.5', '5', '10'];

/** The wait bounds in ms, as docs/metrics.md lists them (for the waits this
 * file counts by hand from answers on a real clock). */
const BOUNDS_MS = [10, 50, 100, 500, 1000, 2500, 5000, 10000];

/**
 * The samples one bucket must show, from counts worked out by hand:
 * `{admitted, waited, refused, booked}` decisions (docs' labels), the
 * `waits` of the admissions that waited (ms), `shaped`, `redeemed`,
 * `refunded` / `notRefunded` releases, `opened` / `throttled`,
 * `regressions`, and the gauges `rate`, `tokens`, `pending` (undefined:
 * no sample), `fallbacks` (undefined: no sample). Keys are
 * `name{label="value",…}` with the labels sorted.
 */
function expectedSamples(bucket, e) {
  const samples = new Map();
  const put = (name, labels, value) => samples.set(key(name, { bucket, ...labels }), value);
  put('pacer_decisions_total', { decision: 'admitted' }, e.admitted);
  put('pacer_decisions_total', { decision: 'waited' }, e.waited);
  put('pacer_decisions_total', { decision: 'refused' }, e.refused);
  put('pacer_decisions_total', { decision: 'booked' }, e.booked);
  // Cumulative: the immediate admissions are under every bound.
  BOUNDS_MS.forEach((bound, i) => {
    put('pacer_wait_seconds_bucket', { le: LE[i] }, e.admitted + e.waits.filter((w) => w <= bound).length);
  });
  put('pacer_wait_seconds_bucket', { le: '+Inf' }, e.admitted + e.waited);
  put('pacer_wait_seconds_sum', {}, e.waits.reduce((sum, w) => sum + w, 0) / 1000);
  put('pacer_wait_seconds_count', {}, e.admitted + e.waited);
  put('pacer_shaped_total', {}, e.shaped);
  put('pacer_redeemed_total', {}, e.redeemed);
  put('pacer_releases_total', { refunded: 'true' }, e.refunded);
  put('pacer_releases_total', { refunded: 'false' }, e.notRefunded);
  put('pacer_upstream_outcomes_total', { outcome: 'opened' }, e.opened);
  put('pacer_upstream_outcomes_total', { outcome: 'throttled' }, e.throttled);
  put('pacer_clock_regressions_total', {}, e.regressions);
  if (e.rate !== undefined) put('pacer_rate_in_force_per_minute', {}, e.rate);
  if (e.tokens !== undefined) put('pacer_tokens', {}, e.tokens);
  if (e.pending !== undefined) put('pacer_bookings_pending', {}, e.pending);
  if (e.fallbacks !== undefined) put('pacer_fallbacks_total', {}, e.fallbacks);
  assert.equal(e.waits.length, e.waited, 'one wait per admission that waited');
  return samples;
}

function key(name, labels) {
  const text = Object.keys(labels).sort().map((label) => `${label}=${JSON.stringify(String(labels[label]))}`);
  return `${name}{${text.join(',')}}`;
}

/** The family a sample name belongs to. */
function familyOf(sampleName) {
  if (FAMILIES[sampleName] !== undefined) return sampleName;
  const base = sampleName.replace(/_(bucket|sum|count)$/, '');
  assert.equal(FAMILIES[base]?.type, 'histogram', `${sampleName} belongs to no family of docs/metrics.md`);
  return base;
}

/** Every sample's label names are its family's (and `le` on a bucket). */
function assertLabelNames(sampleName, labels) {
  const family = FAMILIES[familyOf(sampleName)];
  const names = sampleName.endsWith('_bucket') ? [...family.labels, 'le'] : family.labels;
  assert.deepEqual(Object.keys(labels).sort(), [...names].sort(), `${sampleName} labels`);
}

/** The registry as prom-client's JSON: `{types, samples}`, each sample
 * checked against its family's label names. */
async function readJSON(registry) {
  const types = {};
  const samples = new Map();
  for (const family of await registry.getMetricsAsJSON()) {
    types[family.name] = family.type;
    for (const v of family.values) {
      const name = v.metricName ?? family.name;
      assertLabelNames(name, v.labels);
      const k = key(name, v.labels);
      assert.ok(!samples.has(k), `${k} twice`);
      samples.set(k, v.value);
    }
  }
  return { types, samples };
}

/** The registry's text exposition parsed by prom2javascript: `{types,
 * samples}` as readJSON. */
async function readText(registry) {
  const text = await registry.metrics();
  const parsed = await getMetricsFromStream(Readable.from([text]));
  const types = {};
  const samples = new Map();
  const add = (name, labels, value) => {
    assertLabelNames(name, labels);
    const k = key(name, labels);
    assert.ok(!samples.has(k), `${k} twice`);
    samples.set(k, value);
  };
  for (const [name, family] of Object.entries(parsed)) {
    types[name] = family.type;
    assert.ok(family.help.length > 0, `${name} has help text`);
    for (const d of family.data) {
      if (family.type === 'histogram') {
        for (const [le, value] of Object.entries(d.buckets)) add(`${name}_bucket`, { ...d.labels, le }, value);
        add(`${name}_sum`, d.labels, d.sum);
        add(`${name}_count`, d.labels, d.count);
      } else {
        add(name, d.labels, d.value);
      }
    }
  }
  return { types, samples };
}

/** Both readings of `registry` show exactly `expected` (a Map as
 * expectedSamples gives, merged over the buckets) and every family of the
 * table, typed as the table says. `ranges` maps a sample's key to the
 * `[least, most]` its value may read (a level on the machine's clock). */
async function assertRegistry(registry, expected, ranges = {}) {
  for (const reading of [await readJSON(registry), await readText(registry)]) {
    assert.deepEqual(reading.types, Object.fromEntries(Object.entries(FAMILIES).map(([n, f]) => [n, f.type])));
    for (const [k, [least, most]] of Object.entries(ranges)) {
      const value = reading.samples.get(k);
      assert.ok(value >= least && value <= most, `${k} = ${value}, expected ${least}..${most}`);
      reading.samples.delete(k);
    }
    assert.deepEqual(sorted(reading.samples), sorted(expected));
  }
}

function sorted(map) {
  return Object.fromEntries([...map.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

function merged(...maps) {
  return new Map(maps.flatMap((m) => [...m.entries()]));
}

// ---------------------------------------------------------------- in-process pacers

// Rate 60, burst 2, idle 30000, retries 3: refusing, one token a second
// (60 units a ms), wait bound floor((30000 − 2000·(2^3 − 1))/(2·4)) = 2000
// ms, hint cap 2 s, so a booking's horizon with r retries left is
// 2000 + r·2000 ms. Strict releases: only the latest debit is refunded.
const SMALL = { ratePerMinute: 60, burst: 2, idleTimeoutMs: 30000, maxRetries: 3, releasePolicy: 'strict' };
// Rate 1, burst 1, idle 3600000, no retries: it cannot refuse (it shapes);
// bound 15000 ms, max debt 15000 units (a quarter token).
const SHAPING = { ratePerMinute: 1, burst: 1, idleTimeoutMs: 3600000, maxRetries: 0 };

test('in-process pacers: every metric of the table, from decisions derived by hand, read both ways', async () => {
  const registry = new promClient.Registry();
  let t = 0;
  const pacer = new Pacer({ ...SMALL, now: () => t, onNotice: quiet });
  const shaper = new Pacer({ ...SHAPING, now: () => 0, onNotice: quiet });
  registerMetrics(pacer, { bucket: 'api', registry });
  registerMetrics(shaper, { bucket: 'slow', registry });

  // Nothing decided yet: every count 0; the full bucket holds 2 tokens and
  // the shaper's 1; the rates are the configured ones.
  const none = {
    admitted: 0, waited: 0, refused: 0, booked: 0, waits: [], shaped: 0, redeemed: 0, refunded: 0,
    notRefunded: 0, opened: 0, throttled: 0, regressions: 0, pending: 0,
  };
  await assertRegistry(registry, merged(
    expectedSamples('api', { ...none, rate: 60, tokens: 2 }),
    expectedSamples('slow', { ...none, rate: 1, tokens: 1 }),
  ));

  // All at t = 0 (levels in tokens):
  const d1 = pacer.reserve(0); // admitted at once, 2 → 1
  pacer.reserve(0); //            admitted at once, 1 → 0
  assert.equal(pacer.reserve(0).waitMs, 1000); // 0 → −1: one token's refill
  assert.equal(pacer.reserve(0).waitMs, 2000); // −1 → −2: 2000 <= bound
  // The next would wait 3000 > 2000: with 3 retries left its horizon is
  // 8000, so it books (slot 3000, −2 → −3)...
  const booked = pacer.reserveOrBook(0, 3);
  assert.equal(booked.kind, 'booked');
  assert.equal(booked.booking.slotMs, 3000);
  // ...a plain reserve would wait 4000: refused, nothing debited; with no
  // retry left the horizon is 2000: refused, not booked.
  assert.equal(pacer.reserve(0).kind, 'refused');
  assert.equal(pacer.reserveOrBook(0, 0).kind, 'refused');
  // Strict: d1 is not the latest debit, so its release refunds nothing.
  assert.equal(pacer.release(d1.ticket, 0), false);
  // The booking at t = 500: slot − now = 2500 > 2000, not yet (a refusal);
  // at t = 1000: 2000 <= 2000, admitted after 2000 ms, redeemed.
  assert.equal(pacer.redeem(booked.booking, 500).kind, 'booked');
  const redeemed = pacer.redeem(booked.booking, 1000);
  assert.deepEqual([redeemed.kind, redeemed.waitMs, redeemed.path], ['admitted', 2000, 'booked']);
  // Its ticket is the latest debit: refunded at t = 1000, where the level
  // is −3 + 1 (refill) + 1 (refund) = −1.
  assert.equal(pacer.release(redeemed.ticket, 1000), true);
  // A reading behind the latest (500 < 1000) is read as 1000: from −1 the
  // next token is 2000 ms away (<= bound): admitted, clock regressed; −2.
  const regressed = pacer.reserve(500);
  assert.deepEqual([regressed.waitMs, regressed.clockRegressed], [2000, true]);
  // Adaptation off: the outcomes are counted all the same.
  pacer.observe('opened', 1000);
  pacer.observe('opened', 1000);
  pacer.observe('throttled', 1000);
  // A keyed request at t = 1000: 3000 ms away, within the horizon of its 3
  // retries: booked (−2 → −3), pending until admitted or forgotten.
  t = 1000;
  assert.equal((await pacer.admit({ key: 'k' })).kind, 'refused');

  // The shaper at t = 0: the one token at once, then a request that needs
  // 60000 ms > bound is shaped: it waits the bound, 15000 ms (above the last
  // bound, 10000: in no wait bucket), and leaves the level at the floor,
  // −15000 units = −0.25 tokens.
  assert.equal(shaper.reserve(0).waitMs, 0);
  const shaped = shaper.reserve(0);
  assert.deepEqual([shaped.path, shaped.waitMs], ['shaped', 15000]);

  // api: admitted 6 (2 at once; waits 1000, 2000, 2000 redeemed, 2000
  // regressed), refused 5 (2 bookings, 2 refusals, 1 not yet), releases 1
  // refunded and 1 not; level −3 at t = 1000.
  const api = {
    admitted: 2, waited: 4, refused: 3, booked: 2, waits: [1000, 2000, 2000, 2000], shaped: 0, redeemed: 1,
    refunded: 1, notRefunded: 1, opened: 2, throttled: 1, regressions: 1, rate: 60, tokens: -3, pending: 1,
  };
  const slow = { ...none, admitted: 1, waited: 1, waits: [15000], shaped: 1, rate: 1, tokens: -0.25 };
  await assertRegistry(registry, merged(expectedSamples('api', api), expectedSamples('slow', slow)));
  // The counts behind them, as the core keeps them.
  assert.deepEqual(pacer.counters(), {
    admitted: 6, admittedAfterWait: 4, refused: 5, shaped: 0, released: 2, refunded: 1, clockRegressions: 1,
    booked: 2, redeemed: 1, opened: 2, throttled: 1, waitMsTotal: 7000, waitBuckets: [0, 0, 0, 0, 1, 3, 0, 0],
  });

  // Read at collect time: one token of refill later (t = 2000) the level is
  // −2, and forgetting the key refunds its booking (−2 + 1 = −1) and is a
  // refunded release; no registration again.
  t = 2000;
  assert.equal(pacer.forget('k'), true);
  await assertRegistry(registry, merged(
    expectedSamples('api', { ...api, refunded: 2, tokens: -1, pending: 0 }),
    expectedSamples('slow', slow),
  ));

  // A closed pacer keeps its last counts (as counters() answers) and
  // drops its gauges: it decides nothing more.
  shaper.close();
  await assertRegistry(registry, merged(
    expectedSamples('api', { ...api, refunded: 2, tokens: -1, pending: 0 }),
    expectedSamples('slow', { ...slow, rate: undefined, tokens: undefined, pending: undefined }),
  ));

  // Unregistered, a bucket's samples go; with the last, the families too.
  assert.equal(unregisterMetrics({ bucket: 'slow', registry }), true);
  assert.equal(unregisterMetrics({ bucket: 'slow', registry }), false);
  await assertRegistry(registry, expectedSamples('api', { ...api, refunded: 2, tokens: -1, pending: 0 }));
  assert.equal(unregisterMetrics({ bucket: 'api', registry }), true);
  assert.deepEqual(await registry.getMetricsAsJSON(), []);
  assert.equal(await registry.metrics(), '\n');
});

test('this file\'s table is docs/metrics.md\'s: names, types, labels and their values', () => {
  const doc = fs.readFileSync(path.join(__dirname, '..', '..', '..', 'docs', 'metrics.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `(pacer_[a-z_]+)` \| (\w+) \| [^|]+ \| ((?:[^|\\]|\\\|)+) \|/gm)];
  const table = {};
  const values = {};
  for (const [, name, type, labels] of rows) {
    // `bucket`, `decision` = `admitted` \| `waited` …; a histogram's `le` = 0.01, …
    const names = [...labels.matchAll(/`(\w+)`(?: = ([^;,]+(?:, [^;`]+)*))?/g)]
      .filter(([, label]) => label === 'bucket' || new RegExp(`\`${label}\` =`).test(labels));
    table[name] = { type, labels: names.map(([, label]) => label).filter((label) => label !== 'le') };
    for (const [, label, list] of names) {
      if (list !== undefined) values[`${name} ${label}`] = list.split(/ \\\| |, /).map((v) => v.replaceAll('`', '').trim());
    }
  }
  assert.deepEqual(table, FAMILIES);
  assert.deepEqual(values, {
    'pacer_decisions_total decision': ['admitted', 'waited', 'refused', 'booked'],
    'pacer_wait_seconds le': [...LE, '+Inf'],
    'pacer_releases_total refunded': ['true', 'false'],
    'pacer_upstream_outcomes_total outcome': ['opened', 'throttled'],
  });
});

test('without prom-client, importing connpacer/metrics throws one line saying so', () => {
  // A child process where resolving 'prom-client' fails as it does when the
  // package is not installed.
  const script = `
    const Module = require('node:module');
    const resolve = Module._resolveFilename;
    Module._resolveFilename = function (request, ...rest) {
      if (request === 'prom-client') {
        const error = new Error("Cannot find module 'prom-client'");
        error.code = 'MODULE_NOT_FOUND';
        throw error;
      }
      return resolve.call(this, request, ...rest);
    };
    try { require(${JSON.stringify(path.join(__dirname, '..', 'metrics.js'))}); } catch (e) { console.log(e.message); }
  `;
  const out = execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  assert.equal(out, 'pacer: connpacer/metrics needs the prom-client package: npm install prom-client\n');
});

test('the wait buckets are the core\'s bounds, exported once', () => {
  assert.deepEqual(WAIT_BOUNDS_MS, BOUNDS_MS);
  assert.ok(Object.isFrozen(WAIT_BOUNDS_MS));
  assert.equal(constants.waitBoundsMs, WAIT_BOUNDS_MS);
  assert.deepEqual(METRIC_NAMES, Object.keys(FAMILIES));
});

test('tokens() reads the level at a clock reading: refilled, capped at the burst, negative in debt', () => {
  // Rate 60, burst 2 at t = 0: two at once (2 → 0), the third waits 1000 ms
  // (0 → −1). The level at 250 is −1 + 0.25; at 5000 it is capped at 2.
  const pacer = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  for (const wait of [0, 0, 1000]) assert.equal(pacer.reserve(0).waitMs, wait);
  assert.equal(pacer.tokens(0), -1);
  assert.equal(pacer.tokens(250), -0.75);
  assert.equal(pacer.tokens(5000), 2);
  assert.equal(pacer.tokens(), -1, 'the pacer\'s clock by default');
  assert.throws(() => pacer.tokens(-1), RangeError);
  assert.throws(() => pacer.tokens('1'), TypeError);
  pacer.close();
  assert.throws(() => pacer.tokens(0), { code: 'ERR_PACER_CLOSED' });
});

// ---------------------------------------------------------------- one shared bucket

test('SharedPacer: two handles on one file export the bucket\'s counts; a closed handle keeps its last', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pacer-node-metrics-'));
  const file = path.join(dir, 'bucket');
  // Defaults: rate 60, burst 10. The file starts full: the five reserves
  // below find a token at any speed.
  const a = SharedPacer.open(file, { onNotice: quiet });
  const b = SharedPacer.open(file, { onNotice: quiet });
  const registry = new promClient.Registry();
  try {
    registerMetrics(a, { bucket: 'machine', registry });
    const fromA = [a.reserve(), a.reserve(), a.reserve()];
    const fromB = [b.reserve(), b.reserve()];
    assert.ok([...fromA, ...fromB].every((d) => d.kind === 'admitted' && d.waitMs === 0));
    // b's calls count in the bucket, so a's metrics show them: a refunded
    // release, an outcome; a release of a spent ticket reaches nothing.
    assert.equal(b.release(fromB[0].ticket), true);
    assert.equal(b.release(fromB[0].ticket), false);
    b.observe('throttled');
    a.observe('opened');
    const counts = {
      admitted: 5, waited: 0, refused: 0, booked: 0, waits: [], shaped: 0, redeemed: 0, refunded: 1,
      notRefunded: 0, opened: 1, throttled: 1, regressions: 0, rate: 60, pending: 0,
    };
    // The level is read on the machine's clock: 10 − 5 + 1 = 6 tokens plus
    // what refilled since, at most the burst, 10.
    await assertRegistry(registry, expectedSamples('machine', counts),
      { [key('pacer_tokens', { bucket: 'machine' })]: [6, 10] });
    a.close();
    // Closed: a's last counts (those at its close()), no gauges; b goes on
    // counting in the file, which a no longer reads.
    assert.equal(b.reserve().kind, 'admitted');
    await assertRegistry(registry, expectedSamples('machine', {
      ...counts, rate: undefined, pending: undefined,
    }));
    assert.equal(b.counters().admitted, 6);
  } finally {
    a.close();
    b.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------- bad input

test('bad input is refused with a clear error and registers nothing', async () => {
  const registry = new promClient.Registry();
  const pacer = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  const nothing = async () => assert.deepEqual(await registry.getMetricsAsJSON(), []);
  const cases = [
    [() => registerMetrics(pacer, { bucket: '', registry }), TypeError, /bucket must be a non-empty string/],
    [() => registerMetrics(pacer, { bucket: 'a\uD800b', registry }), TypeError, /lone surrogate/],
    [() => registerMetrics(pacer, { bucket: '\uDC00', registry }), TypeError, /lone surrogate/],
    [() => registerMetrics(pacer, { bucket: 7, registry }), TypeError, /bucket must be a non-empty string, got number 7/],
    [() => registerMetrics(pacer, { registry }), TypeError, /bucket must be a non-empty string, got undefined/],
    [() => registerMetrics(pacer), TypeError, /options must be an object/],
    [() => registerMetrics(pacer, 'api'), TypeError, /options must be an object/],
    [() => registerMetrics({}, { bucket: 'api', registry }), TypeError, /Pacer, SharedPacer or RedisPacer/],
    [() => registerMetrics(null, { bucket: 'api', registry }), TypeError, /got null/],
    [() => registerMetrics({ counters: () => pacer.counters(), closed: false }, { bucket: 'api', registry }),
      TypeError, /Pacer, SharedPacer or RedisPacer/],
    [() => registerMetrics(pacer, { bucket: 'api', registry: {} }), TypeError, /registry must be a prom-client Registry/],
    [() => unregisterMetrics({ bucket: '', registry }), TypeError, /bucket/],
    [() => unregisterMetrics({ bucket: 'api', registry: 'r' }), TypeError, /registry/],
  ];
  for (const [call, type, message] of cases) {
    assert.throws(call, (e) => e instanceof type && message.test(e.message), String(call));
    await nothing();
  }

  // One bucket name twice on one registry: the second is refused and the
  // first stays as it was.
  registerMetrics(pacer, { bucket: 'api', registry });
  const other = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  assert.throws(() => registerMetrics(other, { bucket: 'api', registry }),
    { code: 'ERR_PACER_METRICS_REGISTERED', message: 'pacer: the bucket "api" is registered on this registry already' });
  // The same pacer under a second name would count it twice.
  assert.throws(() => registerMetrics(pacer, { bucket: 'api2', registry }),
    { code: 'ERR_PACER_METRICS_REGISTERED', message: /this pacer is registered on this registry already, as the bucket "api"/ });
  assert.equal(pacer.reserve(0).kind, 'admitted');
  other.reserve(0);
  other.reserve(0);
  const { samples } = await readJSON(registry);
  assert.equal(samples.get(key('pacer_decisions_total', { bucket: 'api', decision: 'admitted' })), 1, 'the first pacer\'s');
  assert.equal(samples.size, expectedSamples('api', {
    admitted: 1, waited: 0, refused: 0, booked: 0, waits: [], shaped: 0, redeemed: 0, refunded: 0, notRefunded: 0,
    opened: 0, throttled: 0, regressions: 0, rate: 60, tokens: 1, pending: 0,
  }).size, 'one bucket');
  // Another registry takes the same name.
  const second = new promClient.Registry();
  registerMetrics(other, { bucket: 'api', registry: second });
  assert.equal((await readJSON(second)).samples.get(key('pacer_decisions_total', { bucket: 'api', decision: 'admitted' })), 2);

  // A closed pacer is refused.
  other.close();
  const third = new promClient.Registry();
  assert.throws(() => registerMetrics(other, { bucket: 'closed', registry: third }), { code: 'ERR_PACER_CLOSED' });
  assert.deepEqual(await third.getMetricsAsJSON(), []);

  // A registry with a metric of one of these names that is not ours.
  const foreign = new promClient.Registry();
  const own = new promClient.Gauge({ name: 'pacer_tokens', help: 'not ours', registers: [foreign] });
  const fresh = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  assert.throws(() => registerMetrics(fresh, { bucket: 'api', registry: foreign }),
    { code: 'ERR_PACER_METRICS_REGISTERED', message: /metrics named pacer_tokens already/ });
  assert.deepEqual((await foreign.getMetricsAsJSON()).map((m) => m.name), ['pacer_tokens']);
  assert.equal(foreign.getSingleMetric('pacer_tokens'), own);
});

test('label text is escaped by prom-client and read back whole; the default registry is prom-client\'s', async () => {
  // A quote, a backslash, a newline and a letter outside ASCII.
  const bucket = 'a"b\\c\nd é';
  const pacer = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  registerMetrics(pacer, { bucket });
  try {
    assert.equal(pacer.reserve(0).kind, 'admitted');
    const text = await promClient.register.metrics();
    assert.ok(text.includes('pacer_decisions_total{bucket="a\\"b\\\\c\\nd é",decision="admitted"} 1'), text);
    const { samples } = await readText(promClient.register);
    assert.equal(samples.get(key('pacer_decisions_total', { bucket, decision: 'admitted' })), 1);
  } finally {
    assert.equal(unregisterMetrics({ bucket }), true);
  }
  assert.deepEqual(await promClient.register.getMetricsAsJSON(), []);
});

test('a cleared registry takes the families again at the next registration', async () => {
  const registry = new promClient.Registry();
  const a = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  const b = new Pacer({ ...SMALL, now: () => 0, onNotice: quiet });
  registerMetrics(a, { bucket: 'a', registry });
  registry.clear();
  assert.deepEqual(await registry.getMetricsAsJSON(), []);
  registerMetrics(b, { bucket: 'b', registry });
  const { types, samples } = await readJSON(registry);
  assert.deepEqual(Object.keys(types), Object.keys(FAMILIES));
  assert.equal(samples.get(key('pacer_tokens', { bucket: 'b' })), 2);
});

// ---------------------------------------------------------------- fleet clients (Redis)

describe('RedisPacer', () => {
  let server;
  before(async () => {
    server = await RedisServer.start();
  });
  after(async () => {
    await server?.stop();
  });

  test('each client exports the answers it got, its fallbacks, and no tokens', async () => {
    // LONG: rate 6, burst 2, idle 300000, retries 5: bound 15000 ms, hint
    // cap 15 s, a booking's horizon with 3 retries left 15000 + 3·15000 =
    // 60000 ms (SPEC §11). The server's clock is real: the waits are the
    // answers', counted into the buckets by hand.
    const registry = new promClient.Registry();
    const fleet = await RedisPacer.connect({ url: server.url, key: freshKey(), ...LONG, onNotice: quiet });
    // Nothing listens there: every call is answered by the 'open' policy.
    const down = await RedisPacer.connect({ url: `redis://127.0.0.1:${await freePort()}`, key: freshKey(), ...CONFIG,
      onFailure: 'open', onNotice: quiet });
    try {
      registerMetrics(fleet, { bucket: 'fleet', registry });
      registerMetrics(down, { bucket: 'fleet-down', registry });
      const e = {
        admitted: 0, waited: 0, refused: 0, booked: 0, waits: [], shaped: 0, redeemed: 0, refunded: 0,
        notRefunded: 0, opened: 0, throttled: 0, regressions: 0, rate: 6, pending: 0, fallbacks: 0,
      };
      const count = (d, redemption = false) => {
        if (d.kind === 'admitted') {
          if (d.waitMs > 0) {
            e.waited += 1;
            e.waits.push(d.waitMs);
          } else {
            e.admitted += 1;
          }
          if (redemption) e.redeemed += 1;
          if (d.clockRegressed) e.regressions += 1;
        } else if (d.kind === 'booked' && !redemption) {
          e.booked += 1;
        } else {
          e.refused += 1;
        }
      };
      // A fresh key is a full bucket: two at once, the third waits (0, 10000]
      // (a token is 10 s), and the fourth, 20000 ms less what passed away
      // (past the bound unless 5 s passed, within the horizon), books.
      const first = await fleet.reserve();
      const second = await fleet.reserve();
      const third = await fleet.reserve();
      assert.deepEqual([first.waitMs, second.waitMs], [0, 0]);
      assert.ok(third.waitMs > 0 && third.waitMs <= 10000, `third waits ${third.waitMs}`);
      for (const d of [first, second, third]) count(d);
      const fourth = await fleet.reserveOrBook(3);
      assert.equal(fourth.kind, 'booked');
      count(fourth);
      // Presented at once: its slot is more than the bound away unless 5 s
      // passed, so not yet; or, on a machine that slow, admitted.
      const redeemed = await fleet.redeem(fourth.booking);
      count(redeemed, true);
      // Refund policy: the third's release refunds.
      assert.equal(await fleet.release(third.ticket), true);
      e.refunded += 1;
      // Adaptation off: nothing is sent, the outcomes are counted.
      assert.equal(await fleet.observe('opened'), 6);
      assert.equal(await fleet.observe('throttled'), 6);
      e.opened += 1;
      e.throttled += 1;

      // Redis unreachable, policy 'open': admitted at once with no ticket,
      // each a fallback.
      assert.equal((await down.reserve()).fallback, 'open');
      assert.equal((await down.reserveOrBook(3)).fallback, 'open');
      const d = {
        admitted: 2, waited: 0, refused: 0, booked: 0, waits: [], shaped: 0, redeemed: 0, refunded: 0,
        notRefunded: 0, opened: 0, throttled: 0, regressions: 0, rate: 60, pending: 0, fallbacks: 2,
      };
      await assertRegistry(registry, merged(expectedSamples('fleet', e), expectedSamples('fleet-down', d)));
      const c = fleet.counters();
      assert.equal(c.waitMsTotal, e.waits.reduce((sum, w) => sum + w, 0));
      assert.equal(c.refused, e.refused + e.booked, 'a booking is a refusal too');
    } finally {
      await fleet.close();
      await down.close();
    }
    // Closed: the last counts stay, the gauges go.
    const { samples } = await readJSON(registry);
    assert.equal(samples.has(key('pacer_rate_in_force_per_minute', { bucket: 'fleet' })), false);
    assert.equal(samples.get(key('pacer_fallbacks_total', { bucket: 'fleet-down' })), 2);
  });

  test('the rate in force is the one the server last reported, asked nothing at a scrape', async () => {
    const registry = new promClient.Registry();
    // Rate 60, floor 10: the bucket's first throttle, nothing counted, ends
    // the search at L = 60 − max(1, ⌊60/16⌋) = 57 within a minute of the
    // bucket's creation: paused, it reads the lowest rate, 10, until then
    // (SPEC §14).
    const fleet = await RedisPacer.connect({ url: server.url, key: freshKey(), ...CONFIG,
      adaptive: { floorPerMinute: 10 }, onNotice: quiet });
    try {
      registerMetrics(fleet, { bucket: 'adaptive', registry });
      assert.equal(fleet.lastRateInForce, 60, 'the configured rate before any reply');
      // The first call makes the bucket.
      assert.equal((await fleet.reserve()).kind, 'admitted');
      assert.equal(await fleet.observe('throttled'), 10);
      assert.equal(fleet.lastRateInForce, 10);
      const { samples } = await readJSON(registry);
      assert.equal(samples.get(key('pacer_rate_in_force_per_minute', { bucket: 'adaptive' })), 10);
      assert.equal(samples.get(key('pacer_upstream_outcomes_total', { bucket: 'adaptive', outcome: 'throttled' })), 1);
      assert.equal(samples.has(key('pacer_tokens', { bucket: 'adaptive' })), false);
    } finally {
      await fleet.close();
    }
  });
});
