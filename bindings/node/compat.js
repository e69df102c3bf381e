'use strict';
// Drop-in replacement for the proxy's `ws-upgrade-pacer` module: the same
// export names, shapes, defaults, settings parsing, notice texts and dedupe
// keys, with every decision made by the pacer core. The swap is one file:
// `dropin/ws-upgrade-pacer.ts` replaces the host's module, wires the host's
// notice channel and request budget in (`useHost`) and re-exports this one.
//
// Differences from the module it replaces, all deliberate (README, "Node"):
//   * a clock reading behind one already seen refills nothing (SPEC §5);
//   * the default clock is monotonic (`performance.timeOrigin + now()`, the
//     same scale as Date.now);
//   * the core works in whole numbers: fractional rates, bursts, timeouts and
//     retry counts given to the constructor are floored, a positive rate
//     below 1 paces at 1/minute and a rate above 600 at 600/minute.
//
// Settings text is read as the host reads it (JavaScript's `Number`, then an
// integer check): `1e2` is 100 here, where the idiomatic API (`index.js`) is
// strict decimal.
//
// With PACER_REDIS_URL set, sharedWsUpgradePacer() paces against a fleet
// bucket in Redis (redis.js) instead of this process's own.
//
// Adaptive pacing (SPEC §14) is opt-in: with `adaptive` bounds (the
// constructor's option, or CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN for the shared
// pacer) the host reports each upgrade's answer with `observe()` and the
// rate in force follows the upstream's throttles. Without them nothing
// changes.

const { native, constants, decodeDecision, outcomeCode, reserveCode } = require('./native.js');
const { sleep } = require('./wait.js');
const { KeyedBookings, checkKey } = require('./bookings.js');
const { RedisPacer } = require('./redis.js');

const WS_NEW_CONNECTIONS_PER_MIN_ENV = 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN';
const UPSTREAM_MAX_RETRIES_ENV = 'CLODEX_UPSTREAM_MAX_RETRIES';
const UPSTREAM_IDLE_TIMEOUT_ENV = 'CLODEX_UPSTREAM_IDLE_TIMEOUT_MS';
const UPSTREAM_TOTAL_TIMEOUT_ENV = 'CLODEX_UPSTREAM_TOTAL_TIMEOUT_MS';
// Adaptive pacing of the shared pacer (SPEC §14): on when the floor is set.
const WS_ADAPTIVE_FLOOR_PER_MIN_ENV = 'CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN';
const WS_ADAPTIVE_CEILING_PER_MIN_ENV = 'CLODEX_WS_ADAPTIVE_CEILING_PER_MIN';

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

/** The host's own request budget, once `useHost` wired it; else ours. */
let hostRequestBudget = null;

/**
 * Wires the host's own pieces in, as its module did by importing them:
 * `emitParentNotice(line)` receives every `clodex: …` notice (the host's
 * parent-notice channel), and `upstreamRequestBudget()` is the budget the
 * pacer sizes its wait bound against (the host's settings, parsed and
 * noticed by the host). Either may be left out. `dropin/ws-upgrade-pacer.ts`
 * calls this with both.
 */
function useHost(host) {
  if (host === null || typeof host !== 'object') throw new TypeError('pacer: useHost takes an object');
  const { emitParentNotice, upstreamRequestBudget: budget } = host;
  if (emitParentNotice !== undefined && typeof emitParentNotice !== 'function') {
    throw new TypeError('pacer: useHost: emitParentNotice must be a function');
  }
  if (budget !== undefined && typeof budget !== 'function') {
    throw new TypeError('pacer: useHost: upstreamRequestBudget must be a function');
  }
  if (emitParentNotice !== undefined) setParentNoticeSink(emitParentNotice);
  if (budget !== undefined) hostRequestBudget = budget;
}

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

/**
 * A setting's text as the host reads it: `Number(text)` (so `1e2` is 100,
 * `0x10` 16, ` 90 ` 90), kept when it is an integer; NaN when it is not.
 * The bounds and notices are the caller's.
 */
function hostInteger(text) {
  const value = Number(text);
  return Number.isInteger(value) ? value : Number.NaN;
}

/** The sustained new-connection rate from the environment (0 = off). */
function wsNewConnectionsPerMinute(env = process.env, warn = defaultWarn) {
  const raw = readSetting(env, WS_NEW_CONNECTIONS_PER_MIN_ENV);
  if (raw === undefined || raw === '') return DEFAULT_WS_NEW_CONNECTIONS_PER_MIN;
  const value = hostInteger(raw);
  if (!(value >= 0)) {
    reportOnce(reportedNotices, `rate:${raw}`,
      `ignoring ${WS_NEW_CONNECTIONS_PER_MIN_ENV}=${raw} `
        + `(expected a non-negative integer; using ${DEFAULT_WS_NEW_CONNECTIONS_PER_MIN})`,
      warn);
    return DEFAULT_WS_NEW_CONNECTIONS_PER_MIN;
  }
  if (value > MAX_WS_NEW_CONNECTIONS_PER_MIN) {
    reportOnce(reportedNotices, `rate:${raw}`,
      `clamping ${WS_NEW_CONNECTIONS_PER_MIN_ENV}=${raw} to ${MAX_WS_NEW_CONNECTIONS_PER_MIN} `
        + '(a higher rate shapes nothing OpenAI throttles on)',
      warn);
    return MAX_WS_NEW_CONNECTIONS_PER_MIN;
  }
  return value;
}

/**
 * Adaptive pacing's bounds from the environment (SPEC §14), read as the
 * rate is: `{floorPerMinute, ceilingPerMinute}` when
 * CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN is a positive integer (the ceiling, from
 * CLODEX_WS_ADAPTIVE_CEILING_PER_MIN, undefined when unset: the rate);
 * undefined, adaptation off, when the floor is unset, or malformed (with a
 * notice). A malformed ceiling is ignored with a notice.
 */
function wsAdaptivePacing(env = process.env, warn = defaultWarn) {
  const floorText = readSetting(env, WS_ADAPTIVE_FLOOR_PER_MIN_ENV);
  if (floorText === undefined || floorText === '') return undefined;
  const floor = hostInteger(floorText);
  if (!(floor >= 1)) {
    reportOnce(reportedNotices, `adaptive-floor:${floorText}`,
      `ignoring ${WS_ADAPTIVE_FLOOR_PER_MIN_ENV}=${floorText} (expected a positive integer; adaptive pacing stays off)`,
      warn);
    return undefined;
  }
  const ceilingText = readSetting(env, WS_ADAPTIVE_CEILING_PER_MIN_ENV);
  let ceiling;
  if (ceilingText !== undefined && ceilingText !== '') {
    const value = hostInteger(ceilingText);
    if (value >= 1) {
      ceiling = value;
    } else {
      reportOnce(reportedNotices, `adaptive-ceiling:${ceilingText}`,
        `ignoring ${WS_ADAPTIVE_CEILING_PER_MIN_ENV}=${ceilingText} (expected a positive integer; using the rate)`,
        warn);
    }
  }
  return { floorPerMinute: floor, ceilingPerMinute: ceiling };
}

/**
 * The adaptive bounds the core takes (SPEC §14) for the `adaptive` option
 * of a pacer at core rate `rate`, read as the constructor reads numbers:
 * `{floorPerMinute, ceilingPerMinute}` with the floor floored and held in
 * 1..rate and the ceiling floored and held in rate..600 (undefined when
 * not given: the rate); null, adaptation off, when `adaptive` is not an
 * object, its floor is not a positive number, or pacing is off.
 */
function coreAdaptive(adaptive, rate) {
  if (rate === 0 || typeof adaptive !== 'object' || adaptive === null) return null;
  const floor = coreRate(adaptive.floorPerMinute);
  if (floor === 0) return null;
  const ceiling = adaptive.ceilingPerMinute === undefined ? undefined
    : Math.min(MAX_WS_NEW_CONNECTIONS_PER_MIN, Math.max(rate, coreRate(adaptive.ceilingPerMinute)));
  return { floorPerMinute: Math.min(floor, rate), ceilingPerMinute: ceiling };
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
  // The host's reading of each text (Number, an integer, positive for a
  // timeout); what passes goes to the core as plain decimal for its ranges,
  // the pair rule and the retry ceiling.
  const notices = [];
  const decimal = {};
  for (const [namespace, name, positive, expected] of [
    ['idle', UPSTREAM_IDLE_TIMEOUT_ENV, true, 'a positive integer number of milliseconds'],
    ['total', UPSTREAM_TOTAL_TIMEOUT_ENV, true, 'a positive integer number of milliseconds'],
    ['retries', UPSTREAM_MAX_RETRIES_ENV, false, 'a non-negative integer'],
  ]) {
    const raw = given[namespace];
    if (raw === undefined || raw === '') continue;
    const value = hostInteger(raw);
    if (positive ? value > 0 : value >= 0) {
      decimal[namespace] = String(Math.min(value, Number.MAX_SAFE_INTEGER));
    } else {
      notices.push({ rank: NOTICE_ORDER[`${namespace}_malformed`], key: `${name}=${raw}`,
        text: `ignoring ${name}=${raw} (expected ${expected})` });
    }
  }
  const resolution = native.resolveSettings(undefined, decimal.idle, decimal.total, decimal.retries, override);
  for (const notice of resolution.notices) {
    const text = budgetNoticeText(notice, given);
    if (text !== null) notices.push({ rank: NOTICE_ORDER[notice.name] ?? 4, key: text[0], text: text[1] });
  }
  // In the order the host gives them: idle, total, the pair, retries.
  notices.sort((a, b) => a.rank - b.rank);
  for (const { key, text } of notices) reportOnce(reportedBudgetNotices, key, text, warn);
  return {
    idleTimeoutMs: resolution.idleTimeoutMs,
    totalTimeoutMs: resolution.totalTimeoutMs,
    maxRetries: resolution.maxRetries,
  };
}

const NOTICE_ORDER = {
  idle_malformed: 0,
  idle_clamped: 0,
  total_malformed: 1,
  total_clamped: 1,
  idle_lowered: 2,
  total_raised: 2,
  retries_malformed: 3,
  retries_clamped: 3,
};

/** The idle timeout and retry count the pacer sizes its wait bound against. */
function resolvedPacingBudget() {
  const { idleTimeoutMs, maxRetries } = (hostRequestBudget ?? upstreamRequestBudget)();
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
    const adaptive = coreAdaptive(options.adaptive, paced ? rate : 0);
    this.#now = options.now ?? monotonicEpochNow;
    this.#schedule = options.schedule ?? defaultSchedule;
    this.#native = new native.NativePacer(new native.NativeConfig(
      paced ? rate : 0,
      Number.isFinite(burst) ? Math.min(constants.maxBurst, Math.max(1, Math.floor(burst))) : WS_NEW_CONNECTION_BURST,
      idle,
      paced ? retries : 0,
      false,
      adaptive?.floorPerMinute,
      adaptive?.ceilingPerMinute,
    ), this.#clock());
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
          + `${Math.round(60_000 / ratePerMinute)}ms wait for a free connection slot, so clodex `
          + 'shapes the opening burst and then admits remaining overflow instead of failing it',
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
   * (`{kind: 'admitted', waitedMs, queued, release}`), or to a refusal the
   * caller reports as a retryable rate limit (`{kind: 'refused',
   * requiredWaitMs, retryAfterSeconds}`). Rejects when `signal` aborts while
   * queued, and gives the slot back.
   *
   * `queued` is true when the request waited on the bucket (the core's
   * decision, not the clock's: a clock that steps back mid-wait still reads
   * queued). `release()` hands back what this admission debited (a whole
   * token, or the fraction at the debt floor) when it will open no
   * connection after all; a second call does nothing. With pacing off the
   * admission is `{kind: 'admitted', waitedMs: 0}` alone, as the host's.
   */
  async admit(signal, key) {
    if (!this.#enabled) return { kind: 'admitted', waitedMs: 0 };
    if (signal?.aborted) throw abortError(signal);
    const keyed = this.#bookings !== null && key !== undefined;
    const d = keyed
      ? this.#bookings.attempt(checkKey(key), this.#clock(), this.maxWaitMs)
      : decodeDecision(reserveCode(this.#handle, this.#clock()), this.maxWaitMs);
    if (!d.admitted) {
      return { kind: 'refused', requiredWaitMs: d.requiredWaitMs, retryAfterSeconds: d.retryAfterSeconds };
    }
    const { waitMs, seq, debitUnits } = d;
    const release = this.#releaser(seq, debitUnits);
    if (waitMs <= 0) return { kind: 'admitted', waitedMs: 0, queued: false, release };

    const startedAt = this.#now();
    try {
      await sleep(this.#schedule, waitMs, signal, abortError);
    } catch (error) {
      // A cancelled request opens no connection: its reservation goes back.
      release();
      throw error;
    }
    return { kind: 'admitted', waitedMs: Math.max(0, this.#now() - startedAt), queued: true, release };
  }

  /**
   * Reports the upstream's answer to a websocket upgrade (SPEC §14):
   * `'throttled'` where the host classifies it as the upstream's rate
   * limit (its 403/429), `'opened'` when the upgrade succeeded. With
   * adaptive bounds an opening is counted and a throttle sets the rate in
   * force to just under what got through by the core's law (SPEC §14: a
   * throttle within a minute of the last changes nothing); the rate then
   * probes slowly upward with time. Returns the rate in force after it, per
   * minute; without adaptive bounds it changes nothing and returns the
   * configured rate (0 when pacing is off). Any other outcome is a
   * TypeError.
   */
  observe(outcome) {
    return this.#native.observe(outcomeCode(outcome), this.#clock());
  }

  /** The rate in force now, per minute (diagnostics): the configured rate
   * unless adaptive bounds were given. */
  rateInForce() {
    return this.#native.rateInForce(this.#clock());
  }

  /** The one-shot refund of one admission's debit (nothing for a debit of 0). */
  #releaser(seq, debitUnits) {
    let released = debitUnits === 0;
    return () => {
      if (released) return;
      released = true;
      this.#native.release(seq, debitUnits, this.#clock());
    };
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
      adaptive: coreAdaptive(options.adaptive, paced ? rate : 0) ?? undefined,
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
    if (outcome.kind === 'admitted') {
      // The host's release() returns nothing; the fleet's answers a Promise
      // whose outcome (refunded, or Redis down) the host never reads.
      const release = () => {
        outcome.release().catch(() => {});
      };
      return { kind: 'admitted', waitedMs: outcome.waitedMs, queued: outcome.queued, release };
    }
    return { kind: 'refused', requiredWaitMs: outcome.requiredWaitMs, retryAfterSeconds: outcome.retryAfterSeconds };
  }

  /**
   * As WsUpgradePacer's, for the fleet's bucket (a throttle one process
   * saw slows the whole fleet): resolves to the bucket's rate in force
   * after it. Never rejects, as the host does not await it: an error reply
   * is said once as a notice and resolves to the configured rate. A bad
   * outcome throws a TypeError at once.
   */
  observe(outcome) {
    outcomeCode(outcome);
    return this.#connection().then((pacer) => (pacer === null ? this.#local.observe(outcome) : pacer.observe(outcome)))
      .catch((error) => {
        reportOnce(reportedNotices, `redis-observe:${error?.message ?? error}`,
          `could not report an upgrade's answer to the fleet bucket: ${error?.message ?? error}`, defaultWarn);
        return this.#options.ratePerMinute;
      });
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
    const options = { ratePerMinute: wsNewConnectionsPerMinute(), adaptive: wsAdaptivePacing() };
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
  WS_ADAPTIVE_FLOOR_PER_MIN_ENV,
  WS_ADAPTIVE_CEILING_PER_MIN_ENV,
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
  wsAdaptivePacing,
  sharedWsUpgradePacer,
  resetWsUpgradePacerForTests,
  upstreamRequestBudget,
  setParentNoticeSink,
  useHost,
};
