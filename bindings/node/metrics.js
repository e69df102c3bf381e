'use strict';
// connpacer/metrics: a pacer's counts as Prometheus metrics through
// prom-client (an optional peer dependency), the metric set of
// docs/metrics.md. Nothing here runs on the admission path: each metric
// reads `counters()` (and the gauges their one reading) when prom-client
// collects it, that is when a scrape asks.

let promClient;
try {
  promClient = require('prom-client');
} catch (error) {
  if (error?.code !== 'MODULE_NOT_FOUND') throw error;
  throw new Error('pacer: connpacer/metrics needs the prom-client package: npm install prom-client',
    { cause: error });
}
const { Counter, Gauge } = promClient;
const { Pacer, SharedPacer, WAIT_BOUNDS_MS, describe } = require('./pacer.js');
const { RedisPacer } = require('./redis.js');

/** Each registry's buckets: `Map<bucket, {pacer, kind}>`, and the metric
 * families made for it (registered while it has a bucket). */
const registries = new WeakMap();

/** The kind of pacer `value` is, or null. */
function kindOf(value) {
  if (value instanceof Pacer) return 'pacer';
  if (value instanceof SharedPacer) return 'shared';
  if (value instanceof RedisPacer) return 'redis';
  return null;
}

function optionsObject(value) {
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`pacer: options must be an object {bucket, registry?}, got ${describe(value)}`);
  }
  return value;
}

/** The `bucket` label: non-empty, well-formed text (no lone surrogate, so
 * it encodes as UTF-8). prom-client escapes it in the exposition. */
function checkBucket(bucket) {
  if (typeof bucket !== 'string' || bucket === '') {
    throw new TypeError(`pacer: bucket must be a non-empty string, got ${describe(bucket)}`);
  }
  if (!bucket.isWellFormed()) {
    throw new TypeError('pacer: bucket must be well-formed text (it has a lone surrogate, which UTF-8 cannot '
      + `encode), got ${JSON.stringify(bucket)}`);
  }
  return bucket;
}

/** The registry given, else prom-client's default one. */
function registryOf(value) {
  if (value === undefined) return promClient.register;
  if (typeof value !== 'object' || value === null || typeof value.registerMetric !== 'function'
    || typeof value.getSingleMetric !== 'function' || typeof value.removeSingleMetric !== 'function') {
    throw new TypeError(`pacer: registry must be a prom-client Registry, got ${describe(value)}`);
  }
  return value;
}

// ---------------------------------------------------------------- the families

const ms = (value) => value / 1000;

/** `a − b` of two counts, at least 0. The counts are read one word at a
 * time (a shared bucket's while other processes count into it), so a count
 * read first can miss a call that one read after it includes. */
const less = (a, b) => Math.max(0, a - b);

/** `counters()` of each bucket that has one family's samples, read now. */
function eachCounts(buckets, kinds, fn) {
  for (const [bucket, { pacer, kind }] of buckets) {
    if (kinds === undefined || kinds.includes(kind)) fn(bucket, pacer.counters());
  }
}

/**
 * A counter family whose samples are computed from each bucket's counts at
 * collect time: `samples(counts)` gives `[labels, value]` pairs (the bucket
 * label added here). prom-client renders it; the values are set by a reset
 * and one inc each, as counts kept elsewhere are exported with prom-client.
 */
function countsCounter(registry, buckets, { name, help, labelNames = [], kinds, samples }) {
  return new Counter({
    name,
    help,
    labelNames: ['bucket', ...labelNames],
    registers: [registry],
    collect() {
      this.reset();
      eachCounts(buckets, kinds, (bucket, counts) => {
        for (const [labels, value] of samples(counts)) this.inc({ bucket, ...labels }, value);
      });
    },
  });
}

/** A gauge family read from each open pacer of the kinds given at collect
 * time; a closed pacer has no sample (it decides nothing more). */
function pacerGauge(registry, buckets, { name, help, kinds, read }) {
  return new Gauge({
    name,
    help,
    labelNames: ['bucket'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [bucket, { pacer, kind }] of buckets) {
        if (kinds.includes(kind) && !pacer.closed) this.set({ bucket }, read(pacer, kind));
      }
    },
  });
}

/**
 * `pacer_wait_seconds`: a histogram of every admission's wait, whose
 * cumulative bucket counts come from the counts (docs/metrics.md). prom-client's
 * Histogram only grows by `observe()`, so this is a metric object of its own
 * that prom-client's registry collects and renders (`get()` answers what
 * a Histogram's `get()` answers).
 */
class WaitHistogram {
  constructor(registry, buckets) {
    this.name = 'pacer_wait_seconds';
    this.help = 'The wait of every admission (0 for an immediate one), seconds.';
    this.type = 'histogram';
    this.aggregator = 'sum';
    this.labelNames = ['bucket'];
    this.buckets = WAIT_BOUNDS_MS.map(ms);
    this.bucketsOf = buckets;
    registry.registerMetric(this);
  }

  async get() {
    const values = [];
    const bucketName = `${this.name}_bucket`;
    eachCounts(this.bucketsOf, undefined, (bucket, c) => {
      // Cumulative: the immediate admissions, then each bound's waits.
      let cumulative = less(c.admitted, c.admittedAfterWait);
      WAIT_BOUNDS_MS.forEach((boundMs, i) => {
        cumulative += c.waitBuckets[i];
        values.push({ labels: { bucket, le: ms(boundMs) }, value: cumulative, metricName: bucketName });
      });
      values.push(
        { labels: { bucket, le: '+Inf' }, value: c.admitted, metricName: bucketName },
        { labels: { bucket }, value: ms(c.waitMsTotal), metricName: `${this.name}_sum` },
        { labels: { bucket }, value: c.admitted, metricName: `${this.name}_count` },
      );
    });
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** Nothing to reset: the counts are the pacers'. */
  reset() {}
}

/** The metric families of docs/metrics.md over `buckets`, registered on
 * `registry`. */
function makeFamilies(registry, buckets) {
  return [
    countsCounter(registry, buckets, {
      name: 'pacer_decisions_total',
      help: 'Answers to requests for a new connection: admitted at once, admitted after a wait, '
        + 'refused, refused with a booking in line.',
      labelNames: ['decision'],
      samples: (c) => [
        [{ decision: 'admitted' }, less(c.admitted, c.admittedAfterWait)],
        [{ decision: 'waited' }, c.admittedAfterWait],
        [{ decision: 'refused' }, less(c.refused, c.booked)],
        [{ decision: 'booked' }, c.booked],
      ],
    }),
    new WaitHistogram(registry, buckets),
    countsCounter(registry, buckets, {
      name: 'pacer_shaped_total',
      help: 'Admissions by the shaping rule (debited to the floor, or past it).',
      samples: (c) => [[{}, c.shaped]],
    }),
    countsCounter(registry, buckets, {
      name: 'pacer_redeemed_total',
      help: 'Bookings admitted when presented on their retry.',
      samples: (c) => [[{}, c.redeemed]],
    }),
    countsCounter(registry, buckets, {
      name: 'pacer_releases_total',
      help: 'Releases of a ticket: refunded to the bucket, or not.',
      labelNames: ['refunded'],
      samples: (c) => [[{ refunded: 'true' }, c.refunded], [{ refunded: 'false' }, less(c.released, c.refunded)]],
    }),
    countsCounter(registry, buckets, {
      name: 'pacer_upstream_outcomes_total',
      help: 'What the upstream answered to new connections, as reported to observe.',
      labelNames: ['outcome'],
      samples: (c) => [[{ outcome: 'opened' }, c.opened], [{ outcome: 'throttled' }, c.throttled]],
    }),
    countsCounter(registry, buckets, {
      name: 'pacer_clock_regressions_total',
      help: 'Calls whose clock reading was behind the latest one (read as the latest).',
      samples: (c) => [[{}, c.clockRegressions]],
    }),
    pacerGauge(registry, buckets, {
      name: 'pacer_rate_in_force_per_minute',
      help: 'The rate the pacer decides at now, new connections per minute.',
      kinds: ['pacer', 'shared', 'redis'],
      // A fleet client asks nothing at a scrape: the rate the server last reported.
      read: (pacer, kind) => (kind === 'redis' ? pacer.lastRateInForce : pacer.rateInForce()),
    }),
    pacerGauge(registry, buckets, {
      name: 'pacer_tokens',
      help: 'Tokens in the bucket now (fractional; negative: the debt of admissions still waiting).',
      kinds: ['pacer', 'shared'],
      read: (pacer) => pacer.tokens(),
    }),
    pacerGauge(registry, buckets, {
      name: 'pacer_bookings_pending',
      help: 'Keyed requests refused and not yet admitted or forgotten, in this process.',
      kinds: ['pacer', 'shared', 'redis'],
      read: (pacer) => pacer.pendingKeys,
    }),
    countsCounter(registry, buckets, {
      name: 'pacer_fallbacks_total',
      help: 'Answers the failure policy gave because Redis failed.',
      kinds: ['redis'],
      samples: (c) => [[{}, c.fallbacks]],
    }),
  ];
}

/** The names `makeFamilies` registers. */
const METRIC_NAMES = Object.freeze([
  'pacer_decisions_total', 'pacer_wait_seconds', 'pacer_shaped_total', 'pacer_redeemed_total',
  'pacer_releases_total', 'pacer_upstream_outcomes_total', 'pacer_clock_regressions_total',
  'pacer_rate_in_force_per_minute', 'pacer_tokens', 'pacer_bookings_pending', 'pacer_fallbacks_total',
]);

// ---------------------------------------------------------------- the calls

/** A registration refused because the name is taken (`code`
 * 'ERR_PACER_METRICS_REGISTERED'). */
function registeredError(message) {
  const error = new Error(message);
  error.code = 'ERR_PACER_METRICS_REGISTERED';
  return error;
}

/**
 * Exports `pacer`'s counts under the label `bucket` on `registry` (default
 * prom-client's `register`). `pacer` is a Pacer, SharedPacer or RedisPacer.
 * Several pacers go on one registry under different bucket names; a bucket
 * name or a pacer already on the registry, a closed pacer, or a registry
 * holding metrics of these names that are not this module's is refused with
 * an error, and nothing changes.
 */
function registerMetrics(pacer, options) {
  const kind = kindOf(pacer);
  if (kind === null) {
    throw new TypeError(`pacer: registerMetrics takes a Pacer, SharedPacer or RedisPacer, got ${describe(pacer)}`);
  }
  options = optionsObject(options);
  const bucket = checkBucket(options.bucket);
  const registry = registryOf(options.registry);
  if (pacer.closed) {
    const error = new Error('pacer: registerMetrics was given a closed pacer');
    error.code = 'ERR_PACER_CLOSED';
    throw error;
  }
  let state = registries.get(registry);
  if (state !== undefined) {
    // The registry was cleared (`registry.clear()`) since: put the families back.
    const gone = state.families.filter((family) => registry.getSingleMetric(family.name) !== family);
    const taken = gone.filter((family) => registry.getSingleMetric(family.name) !== undefined);
    if (taken.length > 0) {
      throw registeredError(`pacer: the registry has metrics named ${taken.map((f) => f.name).join(', ')} already, `
        + 'not from connpacer/metrics');
    }
    if (state.buckets.has(bucket)) {
      throw registeredError(`pacer: the bucket ${JSON.stringify(bucket)} is registered on this registry already`);
    }
    for (const [other, entry] of state.buckets) {
      if (entry.pacer === pacer) {
        throw registeredError('pacer: this pacer is registered on this registry already, as the bucket '
          + JSON.stringify(other));
      }
    }
    for (const family of gone) registry.registerMetric(family);
  } else {
    const taken = METRIC_NAMES.filter((name) => registry.getSingleMetric(name) !== undefined);
    if (taken.length > 0) {
      throw registeredError(`pacer: the registry has metrics named ${taken.join(', ')} already, `
        + 'not from connpacer/metrics');
    }
    const buckets = new Map();
    state = { buckets, families: makeFamilies(registry, buckets) };
    registries.set(registry, state);
  }
  state.buckets.set(bucket, { pacer, kind });
}

/**
 * Stops exporting the bucket `bucket` from `registry` (default
 * prom-client's `register`): true when it was registered there. With the
 * last bucket gone, the metric families leave the registry too.
 */
function unregisterMetrics(options) {
  options = optionsObject(options);
  const bucket = checkBucket(options.bucket);
  const registry = registryOf(options.registry);
  const state = registries.get(registry);
  if (state === undefined || !state.buckets.delete(bucket)) return false;
  if (state.buckets.size === 0) {
    for (const family of state.families) {
      if (registry.getSingleMetric(family.name) === family) registry.removeSingleMetric(family.name);
    }
    registries.delete(registry);
  }
  return true;
}

module.exports = { registerMetrics, unregisterMetrics, METRIC_NAMES };
