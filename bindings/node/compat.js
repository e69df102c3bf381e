'use strict';
// Drop-in replacement for the proxy's `ws-upgrade-pacer` module: the same
// export names, shapes, defaults, notice texts and dedupe keys, with every
// decision made by the pacer core. Swap one import:
//
//   import { sharedWsUpgradePacer } from 'pacer/compat';
//
// Differences from the module it replaces, all deliberate (README, "Node"):
//   * settings text is strict decimal (`1e2`, `0x10`, `60.0` are malformed),
//     and an idle/total timeout of 0 is clamped to its minimum (SPEC §2, §10);
//   * a clock reading behind one already seen refills nothing (SPEC §5);
//   * the default clock is monotonic (`performance.timeOrigin + now()`, the
//     same scale as Date.now);
//   * the core works in whole numbers: fractional rates, bursts, timeouts and
//     retry counts are floored, a positive rate below 1 paces at 1/minute and
//     a rate above 600 at 600/minute.
//
// With PACER_REDIS_URL set, sharedWsUpgradePacer() paces against a fleet
// bucket in Redis (redis.js) instead of this process's own.

const { native, constants, decodeDecision } = require('./native.js');
const { sleep } = require('./wait.js');
const { KeyedBookings, checkKey } = require('./bookings.js');
const { RedisPacer } = require('./redis.js');

const WS_NEW_CONNECTIONS_PER_MIN_ENV = 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN';
const UPSTREAM_MAX_RETRIES_ENV = 'CLODEX_UPSTREAM_MAX_RETRIES';
const UPSTREAM_IDLE_TIMEOUT_ENV = 'CLODEX_UPSTREAM_IDLE_TIMEOUT_MS';
const UPSTREAM_TOTAL_TIMEOUT_ENV = 'CLODEX_UPSTREAM_TOTAL_TIMEOUT_MS';

// A fleet bucket for sharedWsUpgradePacer() (SPEC §12): set the URL and every
// process that has it paces against one bucket in Redis (RedisPacer).
const REDIS_URL_ENV = 'PACER_REDIS_URL';
const REDIS_KEY_ENV = 'PACER_REDIS_KEY';
const REDIS_ON_FAILURE_ENV = 'PACER_REDIS_ON_FAILURE';
const REDIS_FLEET_SIZE_ENV = 'PACER_REDIS_FLEET_SIZE';
const DEFAULT_REDIS_KEY = 'pacer:ws-upgrade';

const DEFAULT_WS_NEW_CONNECTIONS_PER_MIN = constants.defaultRatePerMinute;
const MAX_WS_NEW_CONNECTIONS_PER_MIN = constants.maxRatePerMinute;
const WS_NEW_CONNECTION_BURST = constants.defaultBurst;
const WS_NEW_CONNECTION_MAX_WAIT_CEILING_MS = constants.waitBoundCeilingMs;

const MODE_DISABLED = 0;
const MODE_SHAPING_LOW_RATE = 2;

// ---------------------------------------------------------------- notices

let parentNoticeSink = (line) => process.stderr.write(`${line}\n`);

/** Where `clodex: …` notices go when no `warn` is passed (default stderr). */
function setParentNoticeSink(sink) {
  if (typeof sink !== 'function') throw new TypeError('pacer: the notice sink must be a function');
  parentNoticeSink = sink;
}

const defaultWarn = (message) => parentNoticeSink(`clodex: ${message}`);

// Two dedupe sets, as in the original: the pacer's (cleared by
// resetWsUpgradePacerForTests) and the request budget's.
const reportedNotices = new Set();
const reportedBudgetNotices = new Set();

function reportOnce(seen, key, message, warn) {
  if (seen.has(key)) return;
  seen.add(key);
  try {
    warn(message);
  } catch {
    // A diagnostic must never turn a setting into a failed request.
  }
}

function readSetting(env, name) {
  const value = env[name];
  return value === undefined || value === null ? undefined : String(value).trim();
}

// ---------------------------------------------------------------- JS numbers into core integers

/** A finite non-negative number floored; NaN, infinities and negatives are 0. */
function wholeOrZero(value) {
  return typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/** The integer rate the core paces at: 0 (off) unless finite and positive. */
function coreRate(ratePerMinute) {
  if (typeof ratePerMinute !== 'number' || !Number.isFinite(ratePerMinute) || ratePerMinute <= 0) return 0;
  return Math.min(MAX_WS_NEW_CONNECTIONS_PER_MIN, Math.max(1, Math.floor(ratePerMinute)));
}

// ---------------------------------------------------------------- settings

/** The sustained new-connection rate from the environment (0 = off). */
function wsNewConnectionsPerMinute(env = process.env, warn = defaultWarn) {
  const raw = readSetting(env, WS_NEW_CONNECTIONS_PER_MIN_ENV);
  if (raw === undefined || raw === '') return DEFAULT_WS_NEW_CONNECTIONS_PER_MIN;
  const resolution = native.resolveSettings(raw, undefined, undefined, undefined, undefined);
  for (const notice of resolution.notices) {
    if (notice.name === 'rate_malformed') {
      reportOnce(reportedNotices, `rate:${raw}`,
        `ignoring ${WS_NEW_CONNECTIONS_PER_MIN_ENV}=${raw} `
          + `(expected a non-negative integer; using ${DEFAULT_WS_NEW_CONNECTIONS_PER_MIN})`,
        warn);
    } else if (notice.name === 'rate_clamped') {
      reportOnce(reportedNotices, `rate:${raw}`,
        `clamping ${WS_NEW_CONNECTIONS_PER_MIN_ENV}=${raw} to ${MAX_WS_NEW_CONNECTIONS_PER_MIN} `
          + '(a higher rate shapes nothing OpenAI throttles on)',
        warn);
    }
  }
  return resolution.ratePerMinute;
}

function timeoutRange(name) {
  return name === UPSTREAM_IDLE_TIMEOUT_ENV
    ? `${constants.minIdleTimeoutMs}-${constants.maxIdleTimeoutMs}ms`
    : `${constants.minTotalTimeoutMs}-${constants.maxTotalTimeoutMs}ms`;
}

/** The original's text and key for one budget notice of the core. `given`
 * maps the notice's namespace (`idle`, `total`, `retries`) to the setting's
 * text as read: the addon saw it with lone surrogates made U+FFFD, and the
 * original names the setting as it was given. */
function budgetNoticeText(notice, given) {
  const [a, b] = notice.values;
  const raw = given[notice.namespace] ?? notice.raw;
  switch (notice.name) {
    case 'idle_malformed':
    case 'total_malformed': {
      const name = notice.name === 'idle_malformed' ? UPSTREAM_IDLE_TIMEOUT_ENV : UPSTREAM_TOTAL_TIMEOUT_ENV;
      return [`${name}=${raw}`, `ignoring ${name}=${raw} (expected a positive integer number of milliseconds)`];
    }
    case 'idle_clamped':
    case 'total_clamped': {
      const name = notice.name === 'idle_clamped' ? UPSTREAM_IDLE_TIMEOUT_ENV : UPSTREAM_TOTAL_TIMEOUT_ENV;
      return [`${name}=${raw}`, `clamping ${name}=${raw} to ${a}ms (supported range is ${timeoutRange(name)})`];
    }
    case 'retries_malformed':
      return [`${UPSTREAM_MAX_RETRIES_ENV}=${raw}`,
        `ignoring ${UPSTREAM_MAX_RETRIES_ENV}=${raw} (expected a non-negative integer)`];
    case 'retries_clamped': {
      const value = Number(raw);
      return [`${UPSTREAM_MAX_RETRIES_ENV}=${value}:idle=${b}`,
        `clamping ${UPSTREAM_MAX_RETRIES_ENV}=${value} to ${a} `
          + `(estimated from the SDK fallback backoff and resolved ${b}ms idle timeout; `
          + 'provider delays may allow fewer retries)'];
    }
    case 'idle_lowered':
      return [`timeout-pair:lower-idle:${a}:${b}`,
        `lowering the resolved idle timeout from ${a}ms to ${b}ms `
          + `because it cannot exceed ${UPSTREAM_TOTAL_TIMEOUT_ENV}`];
    case 'total_raised':
      return [`timeout-pair:raise-total:${b}:${a}`,
        `raising the resolved total timeout from ${a}ms to ${b}ms `
          + `so it is not shorter than ${UPSTREAM_IDLE_TIMEOUT_ENV}`];
    default:
      return null;
  }
}

/**
 * The request budget: idle timeout, total timeout and retry count resolved
 * together (the retry count is capped by what the idle timeout can hold).
 * `idleTimeoutMs` is a caller's own deadline: used as given, lowered to the
 * total timeout silently.
 */
function upstreamRequestBudget(options = {}) {
  const env = options.env ?? process.env;
  const warn = options.warn ?? defaultWarn;
  const override = options.idleTimeoutMs === undefined ? undefined : wholeOrZero(options.idleTimeoutMs);
  const given = {
    idle: override === undefined ? readSetting(env, UPSTREAM_IDLE_TIMEOUT_ENV) : undefined,
    total: readSetting(env, UPSTREAM_TOTAL_TIMEOUT_ENV),
    retries: readSetting(env, UPSTREAM_MAX_RETRIES_ENV),
  };
  const resolution = native.resolveSettings(undefined, given.idle, given.total, given.retries, override);
  for (const notice of resolution.notices) {
    const text = budgetNoticeText(notice, given);
    if (text !== null) reportOnce(reportedBudgetNotices, text[0], text[1], warn);
  }
  return {
    idleTimeoutMs: resolution.idleTimeoutMs,
    totalTimeoutMs: resolution.totalTimeoutMs,
    maxRetries: resolution.maxRetries,
  };
}

/** The idle timeout and retry count the pacer sizes its wait bound against. */
function resolvedPacingBudget() {
  const { idleTimeoutMs, maxRetries } = upstreamRequestBudget();
  return { idleTimeoutMs, maxRetries };
}

// ---------------------------------------------------------------- SPEC §3 helpers on JS numbers

/** Longest a single request may be queued: 0 for NaN, infinities, negatives. */
function wsNewConnectionMaxWaitMs(idleTimeoutMs, maxRetries) {
  if (!Number.isFinite(idleTimeoutMs) || !Number.isFinite(maxRetries)
    || idleTimeoutMs <= 0 || maxRetries < 0) {
    return 0;
  }
  return native.waitBoundMs(Math.floor(idleTimeoutMs), Math.floor(maxRetries));
}

/** The hint a refusal sends, whole seconds, capped at the bound, at least 1. */
function pacedRetryAfterSeconds(requiredWaitMs, maxWaitMs) {
  const required = Number.isFinite(requiredWaitMs) && requiredWaitMs > 0 ? Math.ceil(requiredWaitMs) : 0;
  return native.retryAfterSeconds(required, wholeOrZero(maxWaitMs));
}

/** How long a refused request's retry schedule spans, ms; 0 without retries. */
function refusalScheduleMs(maxWaitMs, maxRetries) {
  if (!Number.isFinite(maxRetries) || maxRetries <= 0) return 0;
  return native.refusalScheduleMs(Math.floor(maxRetries), wholeOrZero(maxWaitMs));
}

/** Whether refusing can make progress at this rate. */
function canRefuseAtRate(maxWaitMs, maxRetries, ratePerMinute) {
  const rate = coreRate(ratePerMinute);
  if (rate === 0 || !Number.isFinite(maxRetries) || maxRetries <= 0) return false;
  return native.canRefuse(rate, Math.floor(maxRetries), wholeOrZero(maxWaitMs));
}

// ---------------------------------------------------------------- the pacer

function defaultSchedule(ms, fire) {
  // Not unref'd: a queued request keeps the process alive as it would on
  // the wire.
  const timer = setTimeout(fire, ms);
  return () => clearTimeout(timer);
}

function monotonicEpochNow() {
  return performance.timeOrigin + performance.now();
}

/** An Error reason as is; anything else as an AbortError (never retried by the SDK). */
function abortError(signal) {
  if (signal?.reason instanceof Error) return signal.reason;
  const error = new Error(
    typeof signal?.reason === 'string' ? signal.reason : 'WebSocket connection pacing aborted',
  );
  error.name = 'AbortError';
  return error;
}

/** Token bucket over new-connection creation; decisions by the pacer core. */
class WsUpgradePacer {
  #native;
  /** The native half's handle for the hot call `reserveHot` (src/hot.rs). */
  #handle;
  #enabled;
  #now;
  #schedule;
  /** Opt-in (`bookRefusals: true`): keyed requests book a place in line. */
  #bookings = null;

  constructor(options = {}) {
    const ratePerMinute = options.ratePerMinute ?? DEFAULT_WS_NEW_CONNECTIONS_PER_MIN;
    const burst = options.burst ?? WS_NEW_CONNECTION_BURST;
    const budget = options.idleTimeoutMs === undefined || options.maxRetries === undefined
      ? resolvedPacingBudget()
      : { idleTimeoutMs: options.idleTimeoutMs, maxRetries: options.maxRetries };
    const idleTimeoutMs = options.idleTimeoutMs ?? budget.idleTimeoutMs;
    const maxRetries = options.maxRetries ?? budget.maxRetries;
    /** Longest any one request will be queued, ms. */
    this.maxWaitMs = wsNewConnectionMaxWaitMs(idleTimeoutMs, maxRetries);

    const rate = coreRate(ratePerMinute);
    const idle = wholeOrZero(idleTimeoutMs);
    const retries = wholeOrZero(maxRetries);
    // A bound of 0 (including a retry count beyond what the deadline holds)
    // leaves no room to queue: the core is built with pacing off.
    const paced = rate > 0 && this.maxWaitMs > 0;
    this.#now = options.now ?? monotonicEpochNow;
    this.#schedule = options.schedule ?? defaultSchedule;
    this.#native = new native.NativePacer(
      paced ? rate : 0,
      Number.isFinite(burst) ? Math.min(constants.maxBurst, Math.max(1, Math.floor(burst))) : WS_NEW_CONNECTION_BURST,
      idle,
      paced ? retries : 0,
      false,
      this.#clock(),
    );
    this.#handle = this.#native.handle();
    const mode = this.#native.info()[0];
    this.#enabled = mode !== MODE_DISABLED;
    if (options.bookRefusals === true) this.#bookings = new KeyedBookings(this.#native, paced ? retries : 0);
    if (rate > 0 && !this.#enabled) {
      reportOnce(reportedNotices, `disabled:${maxRetries}:${idleTimeoutMs}`,
        `not pacing new OpenAI connections: a ${maxRetries}-retry budget leaves no room to `
          + `queue inside the resolved ${idleTimeoutMs}ms request deadline`,
        defaultWarn);
    }
    if (mode === MODE_SHAPING_LOW_RATE) {
      reportOnce(reportedNotices, `norefuse:${ratePerMinute}:${maxRetries}:${this.maxWaitMs}`,
        `pacing new OpenAI connections at ${ratePerMinute}/minute without refusing overflow: a `
          + `${maxRetries}-retry schedule spans only `
          + `${refusalScheduleMs(this.maxWaitMs, maxRetries)}ms, which cannot outlast the `
          + `${Math.round(60_000 / ratePerMinute)}ms wait for a free connection slot, so excess `
          + 'connections are admitted late rather than failed',
        defaultWarn);
    }
  }

  /** The clock as core milliseconds: NaN and negatives read as 0, which the
   * core treats as a reading behind the last one (refills nothing). */
  #clock() {
    return Math.min(wholeOrZero(this.#now()), Number.MAX_SAFE_INTEGER);
  }

  /**
   * Resolves when this request may open a new connection
   * (`{kind: 'admitted', waitedMs}`), or to a refusal the caller reports as
   * a retryable rate limit (`{kind: 'refused', requiredWaitMs,
   * retryAfterSeconds}`). Rejects when `signal` aborts while queued, and
   * gives the slot back.
   */
  async admit(signal, key) {
    if (!this.#enabled) return { kind: 'admitted', waitedMs: 0 };
    if (signal?.aborted) throw abortError(signal);
    const keyed = this.#bookings !== null && key !== undefined;
    const d = keyed
      ? this.#bookings.attempt(checkKey(key), this.#clock(), this.maxWaitMs)
      : decodeDecision(native.reserveHot(this.#handle, this.#clock()), this.maxWaitMs);
    if (!d.admitted) {
      return { kind: 'refused', requiredWaitMs: d.requiredWaitMs, retryAfterSeconds: d.retryAfterSeconds };
    }
    const { waitMs, seq, debitUnits } = d;
    if (waitMs <= 0) return { kind: 'admitted', waitedMs: 0 };

    const startedAt = this.#now();
    try {
      await sleep(this.#schedule, waitMs, signal, abortError);
    } catch (error) {
      // A cancelled request opens no connection: its reservation goes back.
      this.#native.release(seq, debitUnits, this.#clock());
      throw error;
    }
    return { kind: 'admitted', waitedMs: Math.max(0, this.#now() - startedAt) };
  }

  /**
   * With `bookRefusals`: releases the booking the request keyed `key` holds
   * when it ends without a connection (aborted, failed, gave up). True when
   * a booking was refunded.
   */
  forget(key) {
    if (this.#bookings === null) return false;
    return this.#bookings.forget(checkKey(key), this.#clock());
  }
}

/** The fleet settings from `env`: undefined when PACER_REDIS_URL is unset or
 * empty. A malformed policy or fleet size keeps its default, with a notice. */
function fleetSettings(env, warn) {
  const url = readSetting(env, REDIS_URL_ENV);
  if (url === undefined || url === '') return undefined;
  const key = readSetting(env, REDIS_KEY_ENV) || DEFAULT_REDIS_KEY;
  let onFailure = readSetting(env, REDIS_ON_FAILURE_ENV) || 'local';
  if (!['local', 'open', 'closed'].includes(onFailure)) {
    reportOnce(reportedNotices, `redis-on-failure:${onFailure}`,
      `ignoring ${REDIS_ON_FAILURE_ENV}=${onFailure} (expected local, open or closed; using local)`, warn);
    onFailure = 'local';
  }
  const sizeText = readSetting(env, REDIS_FLEET_SIZE_ENV);
  let fleetSize = 1;
  if (sizeText !== undefined && sizeText !== '') {
    if (/^[1-9][0-9]{0,5}$/.test(sizeText)) {
      fleetSize = Number(sizeText);
    } else {
      reportOnce(reportedNotices, `redis-fleet-size:${sizeText}`,
        `ignoring ${REDIS_FLEET_SIZE_ENV}=${sizeText} (expected a whole number from 1 to 999999; using 1)`, warn);
    }
  }
  return { url, key, onFailure, fleetSize };
}

/**
 * The drop-in's pacer over a fleet bucket: `admit(signal)` as
 * WsUpgradePacer's, decided by a RedisPacer of the same configuration (its
 * failure policy answers while Redis cannot). It connects on the first
 * admit; if it cannot be made at all (the `redis` package missing), it says
 * so once and the process paces alone with `local`.
 */
class FleetWsUpgradePacer {
  #local;
  #options;
  #connecting = null;
  #pacer = null;

  constructor(fleet, options) {
    // Resolves the budget, gives the mode notices and is the fallback if no
    // RedisPacer can be made.
    this.#local = new WsUpgradePacer(options);
    this.maxWaitMs = this.#local.maxWaitMs;
    const budget = resolvedPacingBudget();
    const rate = coreRate(options.ratePerMinute);
    const paced = rate > 0 && this.maxWaitMs > 0;
    this.#options = {
      url: fleet.url,
      key: fleet.key,
      onFailure: fleet.onFailure,
      fleetSize: fleet.fleetSize,
      ratePerMinute: paced ? rate : 0,
      burst: WS_NEW_CONNECTION_BURST,
      idleTimeoutMs: wholeOrZero(budget.idleTimeoutMs),
      maxRetries: paced ? wholeOrZero(budget.maxRetries) : 0,
      // The outage notices, in the drop-in's voice; the mode notices came
      // from the WsUpgradePacer above.
      onNotice: (notice) => {
        if (notice.kind.startsWith('redis_')) defaultWarn(notice.text);
      },
    };
  }

  #connection() {
    this.#connecting ??= RedisPacer.connect(this.#options).then((pacer) => {
      this.#pacer = pacer;
      return pacer;
    }, (error) => {
      reportOnce(reportedNotices, 'redis-unusable',
        `not using the fleet bucket at ${REDIS_URL_ENV}: ${error?.message ?? error}; pacing this process alone`,
        defaultWarn);
      return null;
    });
    return this.#connecting;
  }

  async admit(signal) {
    if (signal?.aborted) throw abortError(signal);
    const pacer = await this.#connection();
    if (pacer === null) return this.#local.admit(signal);
    let outcome;
    try {
      outcome = await pacer.admit({ signal });
    } catch (error) {
      if (signal?.aborted) throw abortError(signal);
      throw error;
    }
    if (outcome.kind === 'admitted') return { kind: 'admitted', waitedMs: outcome.waitedMs };
    return { kind: 'refused', requiredWaitMs: outcome.requiredWaitMs, retryAfterSeconds: outcome.retryAfterSeconds };
  }

  /** Ends the Redis connection (waiting admits release their tickets). */
  async close() {
    const pacer = await this.#connecting;
    await pacer?.close();
  }
}

let sharedPacer;

/** The process-wide pacer (one bucket for every transport). With
 * PACER_REDIS_URL set, the bucket is the fleet's, in Redis. */
function sharedWsUpgradePacer() {
  if (sharedPacer === undefined) {
    const options = { ratePerMinute: wsNewConnectionsPerMinute() };
    const fleet = fleetSettings(process.env, defaultWarn);
    sharedPacer = fleet === undefined ? new WsUpgradePacer(options) : new FleetWsUpgradePacer(fleet, options);
  }
  return sharedPacer;
}

/** Test-only: drop the shared bucket and the pacer's notice memory (a fleet
 * pacer's connection is closed). */
function resetWsUpgradePacerForTests() {
  if (sharedPacer instanceof FleetWsUpgradePacer) sharedPacer.close().catch(() => {});
  sharedPacer = undefined;
  reportedNotices.clear();
}

module.exports = {
  WS_NEW_CONNECTIONS_PER_MIN_ENV,
  DEFAULT_WS_NEW_CONNECTIONS_PER_MIN,
  MAX_WS_NEW_CONNECTIONS_PER_MIN,
  WS_NEW_CONNECTION_BURST,
  WS_NEW_CONNECTION_MAX_WAIT_CEILING_MS,
  UPSTREAM_MAX_RETRIES_ENV,
  UPSTREAM_IDLE_TIMEOUT_ENV,
  UPSTREAM_TOTAL_TIMEOUT_ENV,
  REDIS_URL_ENV,
  REDIS_KEY_ENV,
  REDIS_ON_FAILURE_ENV,
  REDIS_FLEET_SIZE_ENV,
  resolvedPacingBudget,
  wsNewConnectionMaxWaitMs,
  pacedRetryAfterSeconds,
  refusalScheduleMs,
  canRefuseAtRate,
  WsUpgradePacer,
  wsNewConnectionsPerMinute,
  sharedWsUpgradePacer,
  resetWsUpgradePacerForTests,
  upstreamRequestBudget,
  setParentNoticeSink,
};
