'use strict';
// The process's pacers: Pacer (in this process) and SharedPacer (one
// machine, shared memory), the core's admission decision (a Rust addon) with
// the waiting, clocks, abort signals and notices that belong to JavaScript.
// index.js gathers these with the fleet's RedisPacer (redis.js, which builds
// on this file) into the package's interface.
//
// The addon returns plain numbers; this file builds the objects. The
// decision itself is never re-derived here.

const {
  native, constants, decodeDecision, outcomeCode, PACED_WAIT_SPAN, REFUSAL_HINT_SPAN, PATH_PACED,
} = require('./native.js');
const { sleep } = require('./wait.js');
const { KeyedBookings, checkKey } = require('./bookings.js');

// The hot calls (src/hot.rs): one function for every pacer, given its handle;
// the clock and the code pass through `exchange`.
const { reserveHot, reserveSharedHot, exchange } = native;

const MODES = ['disabled', 'refusing', 'shaping-low-rate', 'shaping-no-retry'];
const PATHS = ['disabled', 'paced', 'shaped', 'overflow', 'booked'];

/** Environment variables `Pacer.fromEnv` and `resolveBudget` read by default. */
const ENV_NAMES = Object.freeze({
  ratePerMinute: 'PACER_RATE_PER_MIN',
  idleTimeoutMs: 'PACER_IDLE_TIMEOUT_MS',
  totalTimeoutMs: 'PACER_TOTAL_TIMEOUT_MS',
  maxRetries: 'PACER_MAX_RETRIES',
});

const DEFAULT_MESSAGE_PREFIX =
  'pacer is limiting how fast new upstream connections open to reduce the chance of an upstream rate limit';

// ---------------------------------------------------------------- validation

function describe(value) {
  if (value === null) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') {
    return `${typeof value} ${String(value)}`;
  }
  return typeof value;
}

/** A whole number in `[min, max]`, else TypeError (not a number) or RangeError. */
function wholeNumber(field, value, min, max) {
  if (typeof value !== 'number') {
    throw new TypeError(`pacer: ${field} must be a number, got ${describe(value)}`);
  }
  if (!Number.isFinite(value)) {
    throw new RangeError(`pacer: ${field} must be finite, got ${value}`);
  }
  if (!Number.isInteger(value)) {
    throw new RangeError(`pacer: ${field} must be a whole number, got ${value}`);
  }
  if (value < min || value > max) {
    throw new RangeError(`pacer: ${field} must be between ${min} and ${max}, got ${value}`);
  }
  return value;
}

// One rule for every option: undefined takes the default; null or a value
// of the wrong type is a TypeError naming the option; a bad number is a
// RangeError (wholeNumber).

/** An optional whole-number option: `fallback` when undefined. */
function optionalWhole(field, value, fallback, min, max) {
  return value === undefined ? fallback : wholeNumber(field, value, min, max);
}

/**
 * The `adaptive` option (SPEC §14) of a pacer whose rate is `rate`: null
 * when undefined (adaptation off), else `{floorPerMinute, ceilingPerMinute}`
 * with a floor from 1 to the rate and a ceiling from the rate to 600 (the
 * rate when undefined). Errors as for every option, naming the field.
 */
function adaptiveOption(value, rate) {
  if (value === undefined) return null;
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`pacer: adaptive must be an object {floorPerMinute, ceilingPerMinute?}, got ${describe(value)}`);
  }
  const max = constants.maxRatePerMinute;
  const floor = wholeNumber('adaptive.floorPerMinute', value.floorPerMinute, 1, max);
  if (floor > rate) {
    throw new RangeError(`pacer: adaptive.floorPerMinute must be at most ratePerMinute (${rate}), got ${floor}`);
  }
  const ceiling = optionalWhole('adaptive.ceilingPerMinute', value.ceilingPerMinute, rate, 1, max);
  if (ceiling < rate) {
    throw new RangeError(`pacer: adaptive.ceilingPerMinute must be at least ratePerMinute (${rate}), got ${ceiling}`);
  }
  return Object.freeze({ floorPerMinute: floor, ceilingPerMinute: ceiling });
}

function optionalFunction(field, value, fallback) {
  if (value === undefined) return fallback;
  if (typeof value !== 'function') {
    throw new TypeError(`pacer: ${field} must be a function, got ${describe(value)}`);
  }
  return value;
}

/** An options argument: `{}` when undefined, else it must be an object. */
function optionsObject(field, value) {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null) {
    throw new TypeError(`pacer: ${field} must be an object, got ${describe(value)}`);
  }
  return value;
}

function optionalRegistry(value) {
  if (value === undefined) return defaultNoticeRegistry;
  if (typeof value !== 'object' || value === null || typeof value.firstTime !== 'function') {
    throw new TypeError(`pacer: noticeRegistry must be a NoticeRegistry, got ${describe(value)}`);
  }
  return value;
}

function checkSignal(signal) {
  if (signal === undefined) return undefined;
  if (typeof signal !== 'object' || signal === null || typeof signal.aborted !== 'boolean'
    || typeof signal.addEventListener !== 'function') {
    throw new TypeError(`pacer: signal must be an AbortSignal, got ${describe(signal)}`);
  }
  return signal;
}

/** The error of every call on a closed pacer (`code` 'ERR_PACER_CLOSED'). */
function closedError(shared) {
  const error = new Error(shared
    ? 'pacer: this shared pacer is closed: close() was called on this handle (the file stays; '
      + 'SharedPacer.open() attaches again)'
    : 'pacer: this pacer is closed: close() was called on it');
  error.code = 'ERR_PACER_CLOSED';
  return error;
}

// ---------------------------------------------------------------- clocks and timers

/** Monotonic milliseconds (whole), the default clock. */
function monotonicNow() {
  return Math.floor(performance.now());
}

/** Runs `fire` after `ms` with setTimeout; returns a cancel function. */
function defaultSchedule(ms, fire) {
  // Not unref'd: a queued request keeps the process alive as it would on
  // the wire.
  const timer = setTimeout(fire, ms);
  return () => clearTimeout(timer);
}

function abortReason(signal) {
  if (signal.reason !== undefined) return signal.reason;
  return new DOMException('The operation was aborted', 'AbortError');
}

// ---------------------------------------------------------------- notices

/** Remembers which notices were shown, so each shows once. */
class NoticeRegistry {
  #seen = new Set();

  /** True the first time `key` is seen. */
  firstTime(key) {
    if (this.#seen.has(key)) return false;
    this.#seen.add(key);
    return true;
  }

  clear() {
    this.#seen.clear();
  }
}

const defaultNoticeRegistry = new NoticeRegistry();

function defaultNoticeSink(notice) {
  process.stderr.write(`pacer: ${notice.text}\n`);
}

/**
 * The structured notice handed to a sink. `given` maps a setting's dedupe
 * namespace (`rate`, `idle`, `total`, `retries`) to its text as the caller
 * gave it: the addon saw that text with each NUL and lone surrogate made
 * U+FFFD, so its `raw` can differ, and the notice keeps (and is keyed by)
 * the text as given.
 */
function noticeFromNative(n, given) {
  const raw = n.raw !== '' && given?.[n.namespace] !== undefined ? given[n.namespace] : n.raw;
  const key = n.keyedByText ? `${n.namespace}:${raw}` : `${n.namespace}:${n.values.join(':')}`;
  return Object.freeze({
    kind: n.name,
    key,
    text: n.text,
    raw,
    values: Object.freeze(n.values.slice()),
  });
}

/** Sends `notice` to `sink` once per key; a failing sink never fails a request. */
function report(notice, sink, registry) {
  if (!registry.firstTime(notice.key)) return;
  try {
    sink(notice);
  } catch {
    // A diagnostic must never turn a setting into a failed request.
  }
}

// ---------------------------------------------------------------- tickets

/** Module-private: marks the pacer's own `new Ticket` calls, whose
 * arguments come from the addon and need no checks (the hot path). */
const TRUSTED = Symbol('pacer.trusted');

/** The right to refund one admission's debit; released at most once. */
class Ticket {
  #owner;
  #seq;
  #debitUnits;
  #spent = false;

  /**
   * Pacers make tickets. A caller may too: `owner` a Pacer or SharedPacer,
   * `seq` the debit's sequence number (0..2^32−1), `debitUnits` its debit
   * (1..60000); each is checked, with a TypeError or RangeError naming it.
   */
  constructor(owner, seq, debitUnits, trusted) {
    if (trusted !== TRUSTED) {
      const pacer = pacerOf(owner);
      if (pacer === null) {
        throw new TypeError(`pacer: owner must be a Pacer or SharedPacer, got ${describe(owner)}`);
      }
      wholeNumber('seq', seq, 0, 0xffffffff);
      wholeNumber('debitUnits', debitUnits, 1, constants.unitsPerToken);
      owner = pacer;
    }
    this.#owner = owner;
    this.#seq = seq;
    this.#debitUnits = debitUnits;
  }

  /** The debit this ticket refunds, in 1/60000 of a connection. */
  get debitUnits() {
    return this.#debitUnits;
  }

  /** Whether it was released already. */
  get spent() {
    return this.#spent;
  }

  /** Marks the ticket spent and returns `[seq, debitUnits]`, or null when it is
   * not `owner`'s or already spent. */
  static take(ticket, owner) {
    if (ticket.#owner !== owner || ticket.#spent) return null;
    ticket.#spent = true;
    return [ticket.#seq, ticket.#debitUnits];
  }

  /** The ticket's position when it is `owner`'s and live, else null. */
  static peek(ticket, owner) {
    if (!Ticket.isTicket(ticket) || ticket.#owner !== owner || ticket.#spent) return null;
    return ticket.#seq;
  }

  /** A new live ticket for the same debit; `ticket` becomes spent. */
  static transfer(ticket, owner) {
    const raw = Ticket.take(ticket, owner);
    return raw === null ? null : new Ticket(owner, raw[0], raw[1], TRUSTED);
  }

  static isTicket(value) {
    return typeof value === 'object' && value !== null && #owner in value;
  }
}

/**
 * A place in line (SPEC §11): one connection's token, debited when it was
 * booked, for a connection that may open at `slotMs`. Present it with
 * `pacer.redeem()` on the request's retry; release `ticket` if the request
 * ends without redeeming it.
 */
class Booking {
  #slotMs;
  #ticket;

  /** `slotMs` whole ms on the pacer's clock; `ticket` the booked token's. */
  constructor(slotMs, ticket) {
    wholeNumber('slotMs', slotMs, 0, Number.MAX_SAFE_INTEGER);
    if (!Ticket.isTicket(ticket)) {
      throw new TypeError(`pacer: ticket must be a Ticket, got ${describe(ticket)}`);
    }
    this.#slotMs = slotMs;
    this.#ticket = ticket;
    Object.freeze(this);
  }

  /** When the connection may open, ms on the pacer's clock. */
  get slotMs() {
    return this.#slotMs;
  }

  /** The refund right of the booked token. */
  get ticket() {
    return this.#ticket;
  }

  static isBooking(value) {
    return typeof value === 'object' && value !== null && #slotMs in value;
  }
}

// ---------------------------------------------------------------- counts

/** The wait histogram's upper bounds, ms: the core's WAIT_BOUNDS_MS. */
const WAIT_BOUNDS_MS = constants.waitBoundsMs;

/** The index of the wait histogram bucket a wait above 0 falls in (the
 * first bound at or above it), or -1 above the last bound. */
function waitBucketOf(waitMs) {
  return WAIT_BOUNDS_MS.findIndex((bound) => waitMs <= bound);
}

/**
 * The counts as the addon gives them (src/lib.rs, `counters_of`: the core's
 * CounterSnapshot in order) as the object `counters()` answers.
 * `waitBuckets[i]` counts the admissions whose wait was above
 * WAIT_BOUNDS_MS[i − 1] (0 for the first) and at most WAIT_BOUNDS_MS[i];
 * immediate admissions and waits above the last bound are in none.
 */
function countsFrom(words) {
  const [admitted, admittedAfterWait, refused, shaped, released, refunded, clockRegressions, booked, opened,
    throttled, waitMsTotal, redeemed, ...waitBuckets] = words;
  return {
    admitted, admittedAfterWait, refused, shaped, released, refunded, clockRegressions, booked, redeemed,
    opened, throttled, waitMsTotal, waitBuckets,
  };
}

// ---------------------------------------------------------------- the pacer

/** Whether `value` is a Pacer (set in Pacer's static block). */
let isPacer;
/** A SharedPacer's Pacer (set in SharedPacer's static block). */
let pacerOfShared;

/** The Pacer that issues `owner`'s tickets (itself, or a SharedPacer's),
 * or null for anything else. */
function pacerOf(owner) {
  if (isPacer(owner)) return owner;
  return pacerOfShared(owner);
}

/** Module-private: a factory for the native half, used by SharedPacer. */
const NATIVE_FACTORY = Symbol('pacer.nativeFactory');
/** Module-private: `reserve` with no clock, for SharedPacer (its native
 * half reads the machine-wide clock itself). */
const RESERVE_AT_NATIVE_CLOCK = Symbol('pacer.reserveAtNativeClock');

/** A setting's value as text: a string as is, null or undefined as unset,
 * anything else as its String() (or its Object.prototype.toString when that
 * throws): never a throw, however odd the value. */
function settingText(value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  try {
    return String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/** The text the addon parses: each NUL and lone surrogate made U+FFFD, as
 * every binding passes a setting to the core (a NUL can never end a number
 * early), so such a setting is malformed: the default and a notice. */
function coreText(text) {
  return text === undefined ? undefined : text.toWellFormed().replaceAll('\0', '\uFFFD');
}

/** The setting names in force: ENV_NAMES with `names`' entries over them. */
function envNames(names) {
  if (names === undefined) return ENV_NAMES;
  if (typeof names !== 'object' || names === null) {
    throw new TypeError(`pacer: names must be an object, got ${describe(names)}`);
  }
  const merged = { ...ENV_NAMES };
  for (const field of Object.keys(ENV_NAMES)) {
    const name = names[field];
    if (name === undefined) continue;
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`pacer: names.${field} must be a non-empty string, got ${describe(name)}`);
    }
    merged[field] = name;
  }
  return merged;
}

/** The addon's resolution of `env`'s settings and the notices, as given. */
function resolveSettingsFrom(env, names) {
  const given = {
    rate: settingText(env[names.ratePerMinute]),
    idle: settingText(env[names.idleTimeoutMs]),
    total: settingText(env[names.totalTimeoutMs]),
    retries: settingText(env[names.maxRetries]),
  };
  const r = native.resolveSettings(
    coreText(given.rate),
    coreText(given.idle),
    coreText(given.total),
    coreText(given.retries),
    undefined,
  );
  return { r, notices: r.notices.map((n) => noticeFromNative(n, given)) };
}

/**
 * Resolves settings text (SPEC §2) from `env` (default `process.env`):
 * malformed values keep the default and out-of-range values clamp, each with
 * a notice sent once to `onNotice`. Never throws for a bad setting.
 */
function resolveBudget(env = process.env, options = undefined) {
  if (typeof env !== 'object' || env === null) {
    throw new TypeError(`pacer: env must be an object, got ${describe(env)}`);
  }
  options = optionsObject('options', options);
  const names = envNames(options.names);
  const sink = optionalFunction('onNotice', options.onNotice, defaultNoticeSink);
  const registry = optionalRegistry(options.noticeRegistry);
  const { r, notices } = resolveSettingsFrom(env, names);
  for (const notice of notices) report(notice, sink, registry);
  return Object.freeze({
    ratePerMinute: r.ratePerMinute,
    idleTimeoutMs: r.idleTimeoutMs,
    totalTimeoutMs: r.totalTimeoutMs,
    maxRetries: r.maxRetries,
    waitBoundMs: r.waitBoundMs,
    hintCapSeconds: r.hintCapSeconds,
    refusalScheduleMs: r.refusalScheduleMs,
    canRefuse: r.canRefuse,
    enabled: r.enabled,
    notices: Object.freeze(notices),
  });
}

class Pacer {
  #native;
  /** The native half's handle for the hot calls. */
  #handle;
  /** Whether the native half is a shared pacer (`reserveSharedHot`). */
  #shared;
  #now;
  #schedule;
  #mode;
  #waitBoundMs;
  #config;
  /** The adaptive bounds (SPEC §14), or null when adaptation is off. */
  #adaptive;
  /** Keyed requests refused so far (admit with a key): this object's, even
   * on a shared pacer, whose booked slots are the machine's. */
  #keyed;
  /** Set by close(): every call but the getters and counters() throws. */
  #closed = false;
  /** The admits sleeping now, each `{ticket, refunded, outcome, interrupt}`
   * (see wait.js `control`), so close() can refund and end them. */
  #waiting = new Set();

  static {
    isPacer = (value) => typeof value === 'object' && value !== null && #native in value;
  }

  /**
   * @param options.ratePerMinute new connections per minute, 0..600 (0 = off); default 60
   * @param options.burst connections with no wait after an idle spell; default 10 (0 means 1)
   * @param options.idleTimeoutMs the request's no-data deadline, ms; default 120000
   * @param options.maxRetries the client's retry count; default min(5, ladder ceiling)
   * @param options.releasePolicy 'refund' (default) or 'strict'
   * @param options.adaptive `{floorPerMinute, ceilingPerMinute}`: adaptive pacing (SPEC §14)
   *   between them (ceiling default the rate); default off
   * @param options.now monotonic clock in ms; default performance.now
   * @param options.schedule (ms, fire) => cancel; default setTimeout
   * @param options.onNotice receives the `disabled` / `norefuse` notice, once
   */
  constructor(options = undefined) {
    options = optionsObject('options', options);
    const rate = optionalWhole('ratePerMinute', options.ratePerMinute, constants.defaultRatePerMinute,
      0, constants.maxRatePerMinute);
    const burst = optionalWhole('burst', options.burst, constants.defaultBurst, 0, constants.maxBurst);
    const idle = optionalWhole('idleTimeoutMs', options.idleTimeoutMs, constants.defaultIdleTimeoutMs,
      0, Number.MAX_SAFE_INTEGER);
    const ceiling = native.ladderCeiling(idle);
    const retries = optionalWhole('maxRetries', options.maxRetries,
      Math.min(constants.defaultMaxRetries, ceiling), 0, ceiling);
    const policy = options.releasePolicy === undefined ? 'refund' : options.releasePolicy;
    if (typeof policy !== 'string') {
      throw new TypeError(`pacer: releasePolicy must be 'refund' or 'strict', got ${describe(policy)}`);
    }
    if (policy !== 'refund' && policy !== 'strict') {
      throw new RangeError(`pacer: releasePolicy must be 'refund' or 'strict', got ${describe(policy)}`);
    }
    const adaptive = adaptiveOption(options.adaptive, rate);
    const now = optionalFunction('now', options.now, monotonicNow);
    const schedule = optionalFunction('schedule', options.schedule, defaultSchedule);
    const sink = optionalFunction('onNotice', options.onNotice, defaultNoticeSink);
    const registry = optionalRegistry(options.noticeRegistry);
    this.#now = now;
    this.#schedule = schedule;
    const factory = options[NATIVE_FACTORY];
    const nativeConfig = new native.NativeConfig(rate, burst, idle, retries, policy === 'strict',
      adaptive?.floorPerMinute, adaptive?.ceilingPerMinute);
    this.#native = factory ? factory(nativeConfig) : new native.NativePacer(nativeConfig, this.#clock());
    this.#handle = this.#native.handle();
    this.#shared = Boolean(factory);
    // A shared native half books on the machine-wide line, at its clock.
    this.#keyed = new KeyedBookings(this.#native, retries);
    const [mode, waitBoundMs] = this.#native.info();
    this.#mode = MODES[mode];
    this.#waitBoundMs = waitBoundMs;
    this.#config = Object.freeze({
      ratePerMinute: rate,
      burst,
      idleTimeoutMs: idle,
      maxRetries: retries,
      releasePolicy: policy,
    });
    this.#adaptive = adaptive;
    const notice = native.modeNoticeFor(rate, idle, retries);
    if (notice) report(noticeFromNative(notice), sink, registry);
  }

  /**
   * A pacer configured from settings text in `env` (default `process.env`,
   * names in `ENV_NAMES`); `options` as for the constructor plus `names`.
   */
  static fromEnv(env = process.env, options = undefined) {
    const budget = resolveBudget(env, options);
    return new Pacer({
      ...options,
      ratePerMinute: budget.ratePerMinute,
      idleTimeoutMs: budget.idleTimeoutMs,
      maxRetries: budget.maxRetries,
    });
  }

  /** The options in force (defaults filled in). */
  get config() {
    return this.#config;
  }

  /** The adaptive bounds `{floorPerMinute, ceilingPerMinute}` (SPEC §14),
   * or null when adaptation is off. */
  get adaptive() {
    return this.#adaptive;
  }

  /** 'disabled', 'refusing', 'shaping-low-rate' or 'shaping-no-retry' (at
   * the configured rate). */
  get mode() {
    return this.#mode;
  }

  /** The longest wait an admission is given, ms. */
  get waitBoundMs() {
    return this.#waitBoundMs;
  }

  /** Whether overflow is refused (otherwise shaped, or pacing is off). */
  get canRefuse() {
    return this.#mode === 'refusing';
  }

  get enabled() {
    return this.#mode !== 'disabled';
  }

  /** Whether close() was called. */
  get closed() {
    return this.#closed;
  }

  /**
   * Closes the pacer: every call after it (admit, reserve, release,
   * reserveOrBook, redeem, forget, state) throws, or rejects with, an Error
   * whose `code` is 'ERR_PACER_CLOSED'; the getters and counters() still
   * answer. An admit still waiting is ended now: its slot is refunded and
   * its promise rejects with that error, so an abort of its signal later
   * changes nothing. An admit whose signal aborted just before keeps its
   * abort reason (its slot is refunded once). Idempotent. A shared pacer
   * is unmapped after the refunds.
   */
  close() {
    if (this.#closed) return;
    let nowMs = 0;
    try {
      nowMs = this.#clock();
    } catch {
      // A failing clock must not keep the slots: 0 is a reading behind the
      // last one, which refills nothing (SPEC §5).
    }
    for (const waiter of this.#waiting) {
      waiter.interrupt?.(closedError(this.#shared));
      if (waiter.outcome !== 'fired' && !waiter.refunded) {
        waiter.refunded = true;
        const raw = waiter.ticket === null ? null : Ticket.take(waiter.ticket, this);
        if (raw !== null) this.#native.release(raw[0], raw[1], nowMs);
      }
    }
    this.#waiting.clear();
    this.#closed = true;
    if (this.#shared) this.#native.close();
  }

  #clock() {
    const reading = this.#now();
    if (typeof reading !== 'number') {
      throw new TypeError(`pacer: now() must return a number of milliseconds, got ${describe(reading)}`);
    }
    if (!Number.isFinite(reading) || reading < 0) {
      throw new RangeError(`pacer: now() must return finite non-negative milliseconds, got ${describe(reading)}`);
    }
    return Math.min(Math.floor(reading), Number.MAX_SAFE_INTEGER);
  }

  /**
   * Decides now, without waiting: `{kind: 'admitted', waitMs, queued, path,
   * clockRegressed, ticket}` or `{kind: 'refused', requiredWaitMs,
   * retryAfterSeconds, clockRegressed}`. The caller sleeps `waitMs` itself
   * and releases `ticket` if it will not open the connection.
   */
  reserve(nowMs) {
    if (this.#closed) throw closedError(this.#shared);
    // One test for the common case; anything else gets wholeNumber's error.
    if (!(Number.isSafeInteger(nowMs) && nowMs >= 0)) wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    // The clock goes in and the code comes out through `exchange`
    // (native.js, `reserveCode`), written out here to keep the call inline.
    if (this.#shared) {
      reserveSharedHot(this.#handle);
    } else {
      exchange[0] = nowMs;
      reserveHot(this.#handle);
    }
    return this.#decode(exchange[1]);
  }

  /** `reserve` of a shared pacer, which reads the machine-wide clock itself. */
  [RESERVE_AT_NATIVE_CLOCK]() {
    if (this.#closed) throw closedError(true);
    reserveSharedHot(this.#handle);
    return this.#decode(exchange[1]);
  }

  /** Throws the closed error once close() was called. */
  #open() {
    if (this.#closed) throw closedError(this.#shared);
  }

  #decode(code) {
    // The two common answers, a paced admission and a refusal, are decoded
    // here as `decodeDecision` (native.js) would, straight into the result
    // without its intermediate object.
    if (code < 0) {
      // `~code` is `-code - 1` for a code above −2^31 (a required wait under
      // 2^26 ms, as every real one is), in integer operations: no field of
      // the result becomes a heap number. Larger codes go the long way.
      if (code > -0x80000000) {
        const flat = ~code;
        const low = flat & (REFUSAL_HINT_SPAN - 1);
        return {
          kind: 'refused',
          requiredWaitMs: flat >> 5,
          retryAfterSeconds: low >> 1,
          clockRegressed: (low & 1) === 1,
        };
      }
      return this.#result(decodeDecision(code, this.#waitBoundMs));
    }
    if ((code & 3) === PATH_PACED) {
      const payload = (code - (code & 7)) / 8;
      const waitMs = payload & (PACED_WAIT_SPAN - 1);
      return {
        kind: 'admitted',
        waitMs,
        queued: waitMs > 0,
        path: 'paced',
        clockRegressed: (code & 4) !== 0,
        ticket: new Ticket(this, (payload - waitMs) / PACED_WAIT_SPAN, constants.unitsPerToken, TRUSTED),
      };
    }
    return this.#result(decodeDecision(code, this.#waitBoundMs));
  }

  /** The answer of `reserve` for a decoded decision (`decodeDecision`). */
  #result(d) {
    if (!d.admitted) {
      return {
        kind: 'refused',
        requiredWaitMs: d.requiredWaitMs,
        retryAfterSeconds: d.retryAfterSeconds,
        clockRegressed: d.clockRegressed,
      };
    }
    return {
      kind: 'admitted',
      waitMs: d.waitMs,
      queued: d.waitMs > 0,
      path: PATHS[d.path],
      clockRegressed: d.clockRegressed,
      ticket: d.debitUnits > 0 ? new Ticket(this, d.seq, d.debitUnits, TRUSTED) : null,
    };
  }

  /**
   * Refunds an admission that will not open a connection. True when the
   * policy refunded it; false for a ticket already released or not from
   * this pacer (nothing changes then).
   */
  release(ticket, nowMs) {
    this.#open();
    if (!Ticket.isTicket(ticket)) {
      throw new TypeError(`pacer: ticket must be a ticket from reserve(), got ${describe(ticket)}`);
    }
    wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    const raw = Ticket.take(ticket, this);
    if (raw === null) return false;
    return this.#native.release(raw[0], raw[1], nowMs);
  }

  /**
   * `reserve`, except that a refusal whose wait fits the horizon of the
   * request's `retriesLeft` retries books a place in line (SPEC §11):
   * `{kind: 'booked', booking, requiredWaitMs, retryAfterSeconds,
   * clockRegressed}`, one token debited. Answer the client with the
   * refusal, keep `booking` under the request's identity, and present it
   * with `redeem()` on its retry (or release `booking.ticket`).
   */
  reserveOrBook(nowMs, retriesLeft) {
    this.#open();
    wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    wholeNumber('retriesLeft', retriesLeft, 0, 0xffffffff);
    const r = this.#native.reserveOrBook(nowMs, retriesLeft);
    if (r[0] === 0) return this.#decode(r[1]);
    if (r[0] === 1) {
      // The wait is until the slot from the decision's clock reading.
      const [, seq, slotMs, retryAfterSeconds, regressed, requiredWaitMs] = r;
      return {
        kind: 'booked',
        booking: new Booking(slotMs, new Ticket(this, seq, constants.unitsPerToken, TRUSTED)),
        requiredWaitMs,
        retryAfterSeconds,
        clockRegressed: regressed === 1,
      };
    }
    const [, requiredWaitMs, retryAfterSeconds, regressed] = r;
    return { kind: 'refused', requiredWaitMs, retryAfterSeconds, clockRegressed: regressed === 1 };
  }

  /**
   * Presents a booking on the request's retry; changes nothing in the
   * pacer. `{kind: 'admitted', waitMs, queued, path: 'booked', ticket}` when
   * the slot is within the bound (the booking's ticket), else `{kind:
   * 'booked', booking, retryAfterSeconds}` with the same booking. A booking
   * whose ticket was released or redeemed already throws a RangeError.
   */
  redeem(booking, nowMs) {
    this.#open();
    if (!Booking.isBooking(booking)) {
      throw new TypeError(`pacer: booking must be a booking from reserveOrBook(), got ${describe(booking)}`);
    }
    wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    const { ticket } = booking;
    const seq = Ticket.peek(ticket, this);
    if (seq === null) throw new RangeError('pacer: this booking was redeemed or released already, or is not from this pacer');
    const [kind, value] = this.#native.redeem(seq, booking.slotMs, nowMs);
    if (kind === 0) {
      // The admission takes over the booking's ticket.
      return { kind: 'admitted', waitMs: value, queued: value > 0, path: 'booked', clockRegressed: false,
        ticket: Ticket.transfer(ticket, this) };
    }
    return { kind: 'booked', booking, retryAfterSeconds: value };
  }

  /**
   * Gives back what a keyed request holds (its booking) when it ends
   * without opening: aborted, failed, or given up. True when a booking was
   * refunded. Call it for every key passed to `admit` that is not admitted.
   */
  forget(key, nowMs = undefined) {
    this.#open();
    if (nowMs === undefined) nowMs = this.#clock();
    checkKey(key);
    wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    return this.#keyed.forget(key, nowMs);
  }

  /** Keyed requests refused and not yet admitted or forgotten. */
  get pendingKeys() {
    return this.#keyed.size;
  }

  /**
   * Waits for permission to open one new connection. Resolves to
   * `{kind: 'admitted', waitedMs, queued, release()}` or `{kind: 'refused',
   * requiredWaitMs, retryAfterSeconds}`; rejects with the signal's reason (or
   * an AbortError) when `signal` aborts before admission, refunding the slot.
   */
  async admit(options = undefined) {
    options = optionsObject('options', options);
    const signal = checkSignal(options.signal);
    const { key } = options;
    this.#open();
    if (signal?.aborted) throw abortReason(signal);
    const decision = key === undefined ? this.reserve(this.#clock()) : this.#admitKeyed(key);
    if (decision.kind !== 'admitted') {
      return {
        kind: 'refused',
        requiredWaitMs: decision.requiredWaitMs,
        retryAfterSeconds: decision.retryAfterSeconds,
      };
    }
    const { ticket } = decision;
    const release = () => (ticket === null ? false : this.release(ticket, this.#clock()));
    if (!decision.queued) return { kind: 'admitted', waitedMs: 0, queued: false, release };
    const startedAt = this.#clock();
    // close() sees this entry while the sleep is pending, or settled but
    // not yet resumed here, and refunds the slot itself (see close()).
    const waiter = { ticket, refunded: false, outcome: undefined, interrupt: undefined };
    this.#waiting.add(waiter);
    try {
      await sleep(this.#schedule, decision.waitMs, signal, abortReason, waiter);
    } catch (error) {
      // A cancelled request opens no connection: give the slot back.
      if (!waiter.refunded) {
        waiter.refunded = true;
        release();
      }
      throw error;
    } finally {
      this.#waiting.delete(waiter);
    }
    return { kind: 'admitted', waitedMs: Math.max(0, this.#clock() - startedAt), queued: true, release };
  }

  /**
   * Reports what the upstream answered to a new connection (SPEC §14):
   * 'throttled' (its rate limit) or 'opened'. The core's law moves the
   * rate in force: openings are counted per minute; a throttle sets it to
   * just under what got through (a throttle within a minute of the last
   * changes nothing); it searches upward before the first throttle and
   * probes slowly upward after one. Returns the rate in force after it, per
   * minute. With adaptation off it changes nothing and returns the
   * configured rate. `nowMs` defaults to the pacer's clock.
   */
  observe(outcome, nowMs = undefined) {
    this.#open();
    const code = outcomeCode(outcome);
    if (nowMs === undefined) nowMs = this.#clock();
    else wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    return this.#native.observe(code, nowMs);
  }

  /** The rate in force at `nowMs` (default the pacer's clock), per minute:
   * the configured rate unless adaptation is on (SPEC §14). */
  rateInForce(nowMs = undefined) {
    this.#open();
    if (nowMs === undefined) nowMs = this.#clock();
    else wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    return this.#native.rateInForce(nowMs);
  }

  /** One attempt of the keyed request `key` (SPEC §11), decoded as `reserve`. */
  #admitKeyed(key) {
    checkKey(key);
    return this.#result(this.#keyed.attempt(key, this.#clock(), this.#waitBoundMs));
  }

  /** What this pacer decided so far (countsFrom). */
  counters() {
    return countsFrom(this.#native.counters());
  }

  /**
   * The tokens in the bucket at `nowMs` (default the pacer's clock),
   * refilled to it at the rate in force and capped at the burst: fractional,
   * negative for the debt of admissions still waiting. Reads only.
   */
  tokens(nowMs = undefined) {
    this.#open();
    if (nowMs === undefined) nowMs = this.#clock();
    else wholeNumber('nowMs', nowMs, 0, Number.MAX_SAFE_INTEGER);
    return this.#native.levelAt(nowMs) / constants.unitsPerToken;
  }

  /** The state word, for diagnostics: tokens in 1/60000 of a connection. */
  state() {
    this.#open();
    const [highWaterMs, tokensUnits, seq] = this.#native.state();
    return { highWaterMs, tokensUnits, seq };
  }
}

// ---------------------------------------------------------------- shared pacers

/** The machine-wide clock shared pacers read: CLOCK_MONOTONIC in whole ms. */
function sharedClockMs() {
  return native.sharedClockMs();
}

/** An Error for a failed shared-pacer call, with `code` (`SHARED_CONFIG_MISMATCH`, …);
 * a call on a closed handle is the closed error (`ERR_PACER_CLOSED`). */
function sharedError(error) {
  const message = String(error?.message ?? error);
  const match = /^([A-Z_]+): /.exec(message);
  if (match?.[1] === 'SHARED_NOT_OPEN') return closedError(true);
  const e = new Error(`pacer: ${message}`, { cause: error });
  e.code = match ? match[1] : 'SHARED_OS';
  return e;
}

function checkPathOrName(value) {
  if (typeof value !== 'string' || value === '' || value.includes('\0')) {
    throw new TypeError(`pacer: pathOrName must be a non-empty string without NUL, got ${describe(value)}`);
  }
  return value;
}

const SHARED_TOKEN = Symbol('pacer.shared');

/**
 * A pacer whose bucket lives in a shared-memory file: every process on the
 * machine that opens the same name paces against one bucket. Its calls take
 * no clock; they all read `sharedClockMs()`, the clock every process shares.
 */
class SharedPacer {
  #pacer;

  constructor(token, pacer) {
    if (token !== SHARED_TOKEN) throw new TypeError('pacer: use SharedPacer.open(pathOrName, options)');
    this.#pacer = pacer;
  }

  static {
    pacerOfShared = (value) => (typeof value === 'object' && value !== null && #pacer in value ? value.#pacer : null);
  }

  /**
   * Opens the shared pacer `pathOrName`, creating it (mode 0600, full) if it
   * does not exist. A name without '/' lives in /dev/shm; anything with a
   * '/' is a path. Options as for `new Pacer()` except `now`, which a shared
   * pacer refuses: it always reads the machine-wide clock. Throws an Error
   * whose `code` names the check that failed (`SHARED_CONFIG_MISMATCH`,
   * `SHARED_SYMLINK`, `SHARED_WRONG_OWNER`, …).
   */
  static open(pathOrName, options = undefined) {
    checkPathOrName(pathOrName);
    options = optionsObject('options', options);
    if (options.now !== undefined) {
      throw new TypeError('pacer: a shared pacer takes no `now`: every process sharing it reads sharedClockMs()');
    }
    const factory = (nativeConfig) => {
      try {
        return native.NativeSharedPacer.open(pathOrName, nativeConfig);
      } catch (error) {
        if (/^(RATE_TOO_HIGH|BURST_TOO_LARGE|RETRIES_EXCEED_LADDER|ADAPTIVE_RANGE):/.test(String(error?.message))) {
          throw error;
        }
        throw sharedError(error);
      }
    };
    const pacer = new Pacer({ ...options, now: sharedClockMs, [NATIVE_FACTORY]: factory });
    return new SharedPacer(SHARED_TOKEN, pacer);
  }

  /** Removes the shared pacer's name; processes that have it open keep their bucket. */
  static unlink(pathOrName) {
    checkPathOrName(pathOrName);
    try {
      native.unlinkShared(pathOrName);
    } catch (error) {
      throw sharedError(error);
    }
  }

  get config() { return this.#pacer.config; }

  /** As `Pacer.adaptive`. */
  get adaptive() { return this.#pacer.adaptive; }

  get mode() { return this.#pacer.mode; }

  get waitBoundMs() { return this.#pacer.waitBoundMs; }

  get canRefuse() { return this.#pacer.canRefuse; }

  get enabled() { return this.#pacer.enabled; }

  /** Whether close() was called on this handle. */
  get closed() { return this.#pacer.closed; }

  #call(fn) {
    try {
      return fn();
    } catch (error) {
      if (/^SHARED_/.test(String(error?.message))) throw sharedError(error);
      throw error;
    }
  }

  /** As `Pacer.reserve`, at the shared clock. */
  reserve() {
    // The native half reads the clock: no call to sharedClockMs() here.
    try {
      return this.#pacer[RESERVE_AT_NATIVE_CLOCK]();
    } catch (error) {
      if (/^SHARED_/.test(String(error?.message))) throw sharedError(error);
      throw error;
    }
  }

  /** As `Pacer.release`, at the shared clock. */
  release(ticket) {
    return this.#call(() => this.#pacer.release(ticket, sharedClockMs()));
  }

  /**
   * As `Pacer.reserveOrBook`, at the shared clock: a refusal whose wait fits
   * the horizon of `retriesLeft` retries books a place in the bucket's
   * line, which every process on the machine shares (SPEC §11).
   */
  reserveOrBook(retriesLeft) {
    return this.#call(() => this.#pacer.reserveOrBook(sharedClockMs(), retriesLeft));
  }

  /** As `Pacer.redeem`, at the shared clock: a booking from this handle. */
  redeem(booking) {
    return this.#call(() => this.#pacer.redeem(booking, sharedClockMs()));
  }

  /**
   * As `Pacer.admit`: waits on the shared clock, honours `signal`. With
   * `key`, a refusal books a place in the bucket's machine-wide line and
   * the key's retry redeems it, as `Pacer.admit({key})`. Keys are this
   * handle's: another handle or process does not see them.
   */
  admit(options = undefined) {
    return this.#pacer.admit(options);
  }

  /**
   * As `Pacer.forget`, at the shared clock: the keyed request `key` ended
   * without being admitted; its booking goes back to the bucket. Forget
   * the keys before `close()`: a booking a closed handle still holds keeps
   * its slot until the slot's time passes.
   */
  forget(key) {
    return this.#call(() => this.#pacer.forget(key, sharedClockMs()));
  }

  /** Keyed requests this handle refused and has not yet admitted or forgotten. */
  get pendingKeys() {
    return this.#pacer.pendingKeys;
  }

  /**
   * As `Pacer.observe`, at the shared clock: the rate in force is the
   * bucket's, so a throttle reported through one handle or process slows
   * every one sharing it (SPEC §14).
   */
  observe(outcome) {
    return this.#call(() => this.#pacer.observe(outcome, sharedClockMs()));
  }

  /** As `Pacer.rateInForce`, at the shared clock: the bucket's rate in force. */
  rateInForce() {
    return this.#call(() => this.#pacer.rateInForce(sharedClockMs()));
  }

  /**
   * The bucket's counts, as `Pacer.counters()`: every handle and process
   * that opened the bucket counts into its file, so every handle reads the
   * same. After close(), the counts as they were at close().
   */
  counters() {
    return this.#pacer.counters();
  }

  /** As `Pacer.tokens`, at the shared clock: the bucket's tokens now. */
  tokens() {
    return this.#call(() => this.#pacer.tokens(sharedClockMs()));
  }

  /** The machine-wide state word. */
  state() {
    return this.#call(() => this.#pacer.state());
  }

  /**
   * As `Pacer.close()`: refunds (to the shared bucket) and rejects the
   * admits still waiting, then unmaps this handle's view (the file stays).
   * Calls after it throw an Error with code 'ERR_PACER_CLOSED'.
   */
  close() {
    this.#pacer.close();
  }
}

/**
 * The refusal as an HTTP answer (SPEC §9): `{status, headers, body}`, ready
 * for `new Response(body, {status, headers})`.
 */
function refusalResponse(retryAfterSeconds, options = undefined) {
  wholeNumber('retryAfterSeconds', retryAfterSeconds, 0, Number.MAX_SAFE_INTEGER);
  options = optionsObject('options', options);
  const prefix = options.messagePrefix === undefined ? DEFAULT_MESSAGE_PREFIX : options.messagePrefix;
  if (typeof prefix !== 'string') {
    throw new TypeError(`pacer: messagePrefix must be a string, got ${describe(prefix)}`);
  }
  return {
    status: constants.refusalStatus,
    headers: {
      'content-type': constants.refusalContentType,
      'retry-after': String(retryAfterSeconds),
    },
    body: native.refusalBody(prefix, retryAfterSeconds),
  };
}

module.exports = {
  Pacer,
  SharedPacer,
  sharedClockMs,
  Ticket,
  Booking,
  NoticeRegistry,
  resolveBudget,
  refusalResponse,
  ENV_NAMES,
  DEFAULT_MESSAGE_PREFIX,
  WAIT_BOUNDS_MS,
  constants,
  // For redis.js: the checks and clocks every pacer shares, and the wait
  // histogram's bucket of a wait.
  describe,
  waitBucketOf,
  monotonicNow,
  defaultSchedule,
  abortReason,
};
