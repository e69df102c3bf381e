// Types of the `pacer` entry point (index.js).

/** How a pacer answers a request it cannot admit within the bound. */
export type Mode = 'disabled' | 'refusing' | 'shaping-low-rate' | 'shaping-no-retry';

/** Which rule admitted a request. */
export type AdmitPath = 'disabled' | 'paced' | 'shaped' | 'overflow' | 'booked';

export type ReleasePolicy = 'refund' | 'strict';

/** What the upstream answered to a new connection (SPEC §14): it opened
 * it, or throttled it (its rate limit, not the pacer's). */
export type Outcome = 'opened' | 'throttled';

/** Adaptive pacing's bounds (SPEC §14), new connections per minute. */
export interface AdaptiveOptions {
  /** The lowest rate a throttle may lower the rate in force to (raised to the
   * lowest rate that can refuse, never above the ceiling): 1..ratePerMinute. */
  floorPerMinute: number;
  /** The highest rate it may reach, searching or probing: ratePerMinute..600. Default ratePerMinute. */
  ceilingPerMinute?: number;
}

/** The right to refund one admission's debit; released at most once. */
export declare class Ticket {
  /** Pacers make tickets. One made here is checked: `owner` a Pacer or
   * SharedPacer (else TypeError), `seq` a whole number 0..2^32−1,
   * `debitUnits` 1..60000 (else TypeError/RangeError naming the argument). */
  constructor(owner: Pacer | SharedPacer, seq: number, debitUnits: number);
  /** The debit this ticket refunds, in 1/60000 of a connection. */
  readonly debitUnits: number;
  /** Whether it was released already. */
  readonly spent: boolean;
  static isTicket(value: unknown): value is Ticket;
}

export interface Admitted {
  kind: 'admitted';
  /** Wait this long (ms) before opening; 0 = now. */
  waitMs: number;
  queued: boolean;
  path: AdmitPath;
  /** The clock reading was behind one already seen. */
  clockRegressed: boolean;
  /** Present when something was debited. */
  ticket: Ticket | null;
}

export interface Refused {
  kind: 'refused';
  /** What the rate would have needed, ms (diagnostics). */
  requiredWaitMs: number;
  /** The hint the client is asked to honour, whole seconds. */
  retryAfterSeconds: number;
  clockRegressed: boolean;
}

export type Decision = Admitted | Refused;

/** A place in line (SPEC §11): redeem it on the request's retry, or release
 * its ticket if the request ends without redeeming it. */
export declare class Booking {
  /** `slotMs` a whole number of ms, `ticket` a Ticket (checked, by name). */
  constructor(slotMs: number, ticket: Ticket);
  /** When the connection may open, ms on the pacer's clock. */
  readonly slotMs: number;
  /** The refund right of the booked token. */
  readonly ticket: Ticket;
  static isBooking(value: unknown): value is Booking;
}

export interface Booked {
  kind: 'booked';
  booking: Booking;
  /** Until the slot, ms. */
  requiredWaitMs: number;
  /** The hint for the client's retry, whole seconds. */
  retryAfterSeconds: number;
  clockRegressed: boolean;
}

export interface NotYet {
  kind: 'booked';
  booking: Booking;
  retryAfterSeconds: number;
}

export type BookingDecision = Admitted | Booked | Refused;

export interface Admission {
  kind: 'admitted';
  /** Milliseconds spent queued (0 = admitted on arrival). */
  waitedMs: number;
  queued: boolean;
  /** Gives the slot back if no connection will open; true when refunded.
   * At most once: later calls return false. */
  release(): boolean;
}

export interface Refusal {
  kind: 'refused';
  requiredWaitMs: number;
  retryAfterSeconds: number;
}

export type AdmitOutcome = Admission | Refusal;

export interface Notice {
  /** Stable kind name, e.g. 'rate_malformed', 'pacing_disabled', 'norefuse'. */
  readonly kind: string;
  /** Namespaced dedupe key, e.g. 'rate:abc' or 'disabled:3:14001:60'. */
  readonly key: string;
  /** English text. */
  readonly text: string;
  /** The offending setting text, or ''. */
  readonly raw: string;
  readonly values: readonly number[];
}

export type NoticeSink = (notice: Notice) => void;

/** Remembers which notices were shown, so each shows once. */
export declare class NoticeRegistry {
  firstTime(key: string): boolean;
  clear(): void;
}

/**
 * The error every call on a closed pacer throws or rejects with (after
 * `close()`), and the one an admit still waiting at `close()` rejects with.
 */
export interface PacerClosedError extends Error {
  code: 'ERR_PACER_CLOSED';
}

/**
 * Options: an option left undefined takes its default; null or a value of
 * the wrong type is a TypeError naming it; a number that is NaN, infinite,
 * negative, fractional or out of range is a RangeError naming it.
 */
export interface PacerOptions {
  /** New connections per minute, 0..600; 0 turns pacing off. Default 60. */
  ratePerMinute?: number;
  /** Connections admitted with no wait after an idle spell. Default 10 (0 means 1). */
  burst?: number;
  /** The request's no-data deadline, ms. Default 120000. */
  idleTimeoutMs?: number;
  /** The client's retry count, at most the ladder ceiling. Default min(5, ceiling). */
  maxRetries?: number;
  releasePolicy?: ReleasePolicy;
  /** Adaptive pacing (SPEC §14): the rate in force follows `observe()`'s
   * reports between these bounds. Default off. */
  adaptive?: AdaptiveOptions;
  /** Monotonic clock, ms. Default performance.now (floored). */
  now?: () => number;
  /** Runs `fire` after `ms`; returns a cancel function. Default setTimeout. */
  schedule?: (ms: number, fire: () => void) => () => void;
  /** Receives notices, once per key. Default: a line on stderr. */
  onNotice?: NoticeSink;
  noticeRegistry?: NoticeRegistry;
}

export interface EnvNames {
  ratePerMinute: string;
  idleTimeoutMs: string;
  totalTimeoutMs: string;
  maxRetries: string;
}

export interface ResolveOptions {
  names?: Partial<EnvNames>;
  onNotice?: NoticeSink;
  noticeRegistry?: NoticeRegistry;
}

export interface Budget {
  readonly ratePerMinute: number;
  readonly idleTimeoutMs: number;
  readonly totalTimeoutMs: number;
  readonly maxRetries: number;
  readonly waitBoundMs: number;
  readonly hintCapSeconds: number;
  readonly refusalScheduleMs: number;
  readonly canRefuse: boolean;
  readonly enabled: boolean;
  readonly notices: readonly Notice[];
}

/** What a pacer decided so far: the counts the metric set
 * (docs/metrics.md, `connpacer/metrics`) is derived from. */
export interface Counters {
  /** Admissions, at once or after a wait, by any path. */
  admitted: number;
  /** Admissions with a wait above 0. */
  admittedAfterWait: number;
  /** Refusals: a booking and a redemption's "not yet" are refusals too. */
  refused: number;
  /** Admissions by the shaping rule. */
  shaped: number;
  released: number;
  /** Releases the policy refunded. */
  refunded: number;
  /** Calls whose clock reading was behind the latest one. */
  clockRegressions: number;
  /** Refusals that booked a place in line (SPEC §11). */
  booked: number;
  /** Bookings admitted when presented on their retry. */
  redeemed: number;
  /** Upstream answers reported to observe() as 'opened'. */
  opened: number;
  /** Upstream answers reported to observe() as 'throttled'. */
  throttled: number;
  /** The waits of the admissions, summed, ms. */
  waitMsTotal: number;
  /** Eight counts: admissions whose wait was above WAIT_BOUNDS_MS[i − 1]
   * (0 for the first) and at most WAIT_BOUNDS_MS[i]. Immediate admissions
   * and waits above the last bound are in none. */
  waitBuckets: number[];
}

export declare class Pacer {
  constructor(options?: PacerOptions);
  static fromEnv(
    env?: Record<string, string | undefined>,
    options?: PacerOptions & ResolveOptions,
  ): Pacer;
  readonly config: Readonly<Required<Pick<PacerOptions,
    'ratePerMinute' | 'burst' | 'idleTimeoutMs' | 'maxRetries' | 'releasePolicy'>>>;
  /** The adaptive bounds in force (ceiling filled in), or null when adaptation is off. */
  readonly adaptive: Readonly<Required<AdaptiveOptions>> | null;
  /** At the configured rate. */
  readonly mode: Mode;
  readonly waitBoundMs: number;
  readonly canRefuse: boolean;
  readonly enabled: boolean;
  /** Reports what the upstream answered to a new connection (SPEC §14): an
   * opening is counted (per minute of the clock); a throttle sets the rate
   * in force to what got through (L the count when it ends the search or is
   * below the rate in force, else the rate in force less 1/16), unless one
   * less than a minute before did: then it changes nothing. Before the first
   * throttle the rate doubles every 5 s up to the ceiling (and the first
   * throttle pauses at the lowest rate until a minute after the start);
   * after one it holds at L, then now and then probes a step above it.
   * Returns the rate in force after it. Adaptation off: changes nothing, returns
   * the configured rate. Another outcome is a TypeError. */
  observe(outcome: Outcome, nowMs?: number): number;
  /** The rate in force at `nowMs` (default the clock), per minute. */
  rateInForce(nowMs?: number): number;
  /** Decides at `nowMs` without waiting. */
  reserve(nowMs: number): Decision;
  /** Refunds an admission that will not open a connection. */
  release(ticket: Ticket, nowMs: number): boolean;
  /** `reserve`, booking a place in line where a refusal's wait fits the
   * horizon of `retriesLeft` retries (SPEC §11). */
  reserveOrBook(nowMs: number, retriesLeft: number): BookingDecision;
  /** Presents a booking on the request's retry; changes nothing. */
  redeem(booking: Booking, nowMs: number): Admitted | NotYet;
  /** Releases what the keyed request `key` holds (its booking); call it when
   * a request passed to `admit({key})` ends without being admitted. */
  forget(key: string | number | symbol, nowMs?: number): boolean;
  /** Keyed requests refused and not yet admitted or forgotten. */
  readonly pendingKeys: number;
  /** Waits (setTimeout) for permission; rejects when `signal` aborts first.
   * With `key` (the request's identity across the client's retries), a
   * refusal books a place in line that the key's retry redeems (SPEC §11).
   * Rejects with a PacerClosedError once closed, or if `close()` is called
   * while it waits (its slot is refunded then). */
  admit(options?: { signal?: AbortSignal; key?: string | number | symbol }): Promise<AdmitOutcome>;
  /** What this pacer decided so far (still answers after close()). */
  counters(): Counters;
  /** The tokens in the bucket at `nowMs` (default the clock), refilled at
   * the rate in force and capped at the burst: fractional, negative for the
   * debt of admissions still waiting. Reads only. */
  tokens(nowMs?: number): number;
  state(): { highWaterMs: number; tokensUnits: number; seq: number };
  /** Whether close() was called. */
  readonly closed: boolean;
  /** Refunds and rejects (PacerClosedError) every admit still waiting; from
   * then on every call but the getters and counters() throws a
   * PacerClosedError. Idempotent. */
  close(): void;
}

/** Options of SharedPacer.open: as PacerOptions, but no clock. */
export type SharedPacerOptions = Omit<PacerOptions, 'now'> & { now?: never };

/** The codes of a failed shared-pacer call (Error.code). */
export type SharedErrorCode =
  | 'SHARED_UNSUPPORTED' | 'SHARED_OS' | 'SHARED_INVALID_NAME' | 'SHARED_SYMLINK'
  | 'SHARED_NOT_REGULAR' | 'SHARED_WRONG_OWNER' | 'SHARED_PERMISSIONS' | 'SHARED_TRUNCATED'
  | 'SHARED_FOREIGN' | 'SHARED_LAYOUT_VERSION' | 'SHARED_ABI_VERSION' | 'SHARED_INCOMPLETE'
  | 'SHARED_CONFIG_MISMATCH' | 'SHARED_NOT_FOUND';

/**
 * A pacer whose bucket lives in a shared-memory file, shared by every
 * process on the machine that opens the same name. Its calls take no clock:
 * they read sharedClockMs(), the clock every process shares.
 */
export declare class SharedPacer {
  private constructor();
  /** Opens `pathOrName` (a bare name lives in /dev/shm), creating it 0600 if missing. */
  static open(pathOrName: string, options?: SharedPacerOptions): SharedPacer;
  /** Removes the name; processes that have it open keep their bucket. */
  static unlink(pathOrName: string): void;
  readonly config: Pacer['config'];
  readonly adaptive: Pacer['adaptive'];
  readonly mode: Mode;
  readonly waitBoundMs: number;
  readonly canRefuse: boolean;
  readonly enabled: boolean;
  /** As `Pacer.observe`, at the shared clock: the rate in force is the
   * bucket's, so every handle and process sharing it sees the change. */
  observe(outcome: Outcome): number;
  /** The bucket's rate in force now (shared clock), per minute. */
  rateInForce(): number;
  /** Decides now (shared clock) without waiting. */
  reserve(): Decision;
  /** Refunds an admission that will not open a connection. */
  release(ticket: Ticket): boolean;
  /** `reserve`, booking a place in the bucket's machine-wide line where a
   * refusal's wait fits the horizon of `retriesLeft` retries (SPEC §11). */
  reserveOrBook(retriesLeft: number): BookingDecision;
  /** Presents a booking from this handle on the request's retry (shared
   * clock); changes nothing. */
  redeem(booking: Booking): Admitted | NotYet;
  /** Releases what the keyed request `key` holds (its booking) back to the
   * bucket; call it when a request passed to `admit({key})` ends without
   * being admitted, and before close(). */
  forget(key: string | number | symbol): boolean;
  /** Keyed requests this handle refused and has not yet admitted or forgotten. */
  readonly pendingKeys: number;
  /** Waits for permission; rejects when `signal` aborts first, or with a
   * PacerClosedError as `Pacer.admit`. With `key`, a refusal books a place
   * in the bucket's machine-wide line that the key's retry (through this
   * handle: keys are per handle) redeems, as `Pacer.admit`. */
  admit(options?: { signal?: AbortSignal; key?: string | number | symbol }): Promise<AdmitOutcome>;
  /** The bucket's counts: every handle and process that opened the bucket
   * counts into its file, so every handle reads the same. After close(),
   * the counts as they were at close(). */
  counters(): Counters;
  /** The bucket's tokens now (shared clock), as `Pacer.tokens`. */
  tokens(): number;
  /** The machine-wide state word. */
  state(): { highWaterMs: number; tokensUnits: number; seq: number };
  /** Whether close() was called on this handle. */
  readonly closed: boolean;
  /** As `Pacer.close()`: refunds the waiting admits to the shared bucket and
   * rejects them, then unmaps this handle's view; the file stays. */
  close(): void;
}

/** The machine-wide clock shared pacers read: CLOCK_MONOTONIC in whole ms. */
export declare function sharedClockMs(): number;

export declare function resolveBudget(
  env?: Record<string, string | undefined>,
  options?: ResolveOptions,
): Budget;

export interface RefusalResponse {
  status: number;
  headers: { 'content-type': string; 'retry-after': string };
  body: string;
}

export declare function refusalResponse(
  retryAfterSeconds: number,
  options?: { messagePrefix?: string },
): RefusalResponse;

export declare const ENV_NAMES: Readonly<EnvNames>;
export declare const DEFAULT_MESSAGE_PREFIX: string;

export interface Constants {
  readonly version: string;
  readonly defaultRatePerMinute: number;
  readonly maxRatePerMinute: number;
  readonly defaultBurst: number;
  readonly maxBurst: number;
  readonly defaultIdleTimeoutMs: number;
  readonly minIdleTimeoutMs: number;
  readonly maxIdleTimeoutMs: number;
  readonly defaultTotalTimeoutMs: number;
  readonly minTotalTimeoutMs: number;
  readonly maxTotalTimeoutMs: number;
  readonly defaultMaxRetries: number;
  readonly waitBoundCeilingMs: number;
  readonly unitsPerToken: number;
  readonly refusalStatus: number;
  readonly refusalContentType: string;
  /** The wait histogram's upper bounds, ms (the same array as WAIT_BOUNDS_MS). */
  readonly waitBoundsMs: readonly number[];
}

export declare const constants: Constants;

/** The wait histogram's upper bounds, ms, the core's: 10, 50, 100, 500,
 * 1000, 2500, 5000, 10000 (docs/metrics.md). Frozen. */
export declare const WAIT_BOUNDS_MS: readonly number[];

// ---------------------------------------------------------------- fleet pacing (Redis)

/** Where a RedisPacer's decision runs (docs/redis.md). */
export type RedisEngine = 'module' | 'function' | 'script';

/** What a RedisPacer does while Redis cannot answer (docs/fleet-clients.md). */
export type FailurePolicy = 'local' | 'open' | 'closed';

/** The parts of a node-redis client a RedisPacer uses (`createClient()` from `redis`). */
export interface RedisClientLike {
  sendCommand(args: ReadonlyArray<string | Buffer>): Promise<unknown>;
  connect(): Promise<unknown>;
  readonly isOpen: boolean;
  readonly isReady: boolean;
  on(event: 'ready' | 'error', listener: (...args: any[]) => void): unknown;
  off(event: 'ready' | 'error', listener: (...args: any[]) => void): unknown;
}

/** The parts of a node-redis cluster client a RedisPacer uses (`createCluster()` from `redis`):
 * commands on the bucket's key go by its routing (it follows MOVED and ASK); the keyless ones
 * (`MODULE LIST`, `FUNCTION LIST`, `SCRIPT LOAD`) go to each of `masters` by `nodeClient()`. */
export interface RedisClusterLike {
  sendCommand(firstKey: string | Buffer | undefined, isReadonly: boolean | undefined,
    args: ReadonlyArray<string | Buffer>): Promise<unknown>;
  readonly masters: ReadonlyArray<unknown>;
  nodeClient(node: any): Promise<{ sendCommand(args: ReadonlyArray<string | Buffer>): Promise<unknown> }>;
  connect(): Promise<unknown>;
  readonly isOpen: boolean;
  readonly isReady: boolean;
  on(event: 'connect' | 'node-ready' | 'error', listener: (...args: any[]) => void): unknown;
  off(event: 'connect' | 'node-ready' | 'error', listener: (...args: any[]) => void): unknown;
}

/** Seed nodes of a Redis Cluster: redis:// URLs, or node-redis client options
 * (`{ url }`, `{ socket: { host, port } }`) as `createCluster({ rootNodes })` takes them. */
export type RedisRootNode = string | { url?: string; socket?: object; [option: string]: unknown };

/** A ticket the server issued: its string and the key of its bucket. */
export declare class RedisTicket {
  constructor(key: string, text: string);
  readonly key: string;
  /** The server's ticket string (docs/redis.md, "Tickets"). */
  readonly text: string;
  /** Whether it was released through this object already. */
  readonly spent: boolean;
  static isRedisTicket(value: unknown): value is RedisTicket;
}

/** A place in the fleet's line: its slot on the server's clock and its ticket. */
export declare class RedisBooking {
  constructor(slotMs: number, ticket: RedisTicket);
  readonly slotMs: number;
  readonly ticket: RedisTicket;
  static isRedisBooking(value: unknown): value is RedisBooking;
}

/** Present when the failure policy decided an answer, not Redis. */
export interface DecidedBy {
  fallback?: FailurePolicy;
}

export interface RedisAdmitted extends Omit<Admitted, 'ticket'>, DecidedBy {
  /** A RedisTicket; a Ticket when the local fallback decided; null when nothing was debited. */
  ticket: RedisTicket | Ticket | null;
}

export interface RedisRefused extends Refused, DecidedBy {}

export interface RedisBooked extends DecidedBy {
  kind: 'booked';
  booking: RedisBooking | Booking;
  /** Until the slot, ms: only from the local fallback (the server's reply has none). */
  requiredWaitMs?: number;
  retryAfterSeconds: number;
  clockRegressed: boolean;
}

export interface RedisNotYet extends DecidedBy {
  kind: 'booked';
  booking: RedisBooking | Booking;
  retryAfterSeconds: number;
}

export type RedisDecision = RedisAdmitted | RedisRefused;
export type RedisBookingDecision = RedisAdmitted | RedisBooked | RedisRefused;

export interface RedisAdmission extends DecidedBy {
  kind: 'admitted';
  waitedMs: number;
  queued: boolean;
  /** Gives the debit back if no connection will open; resolves true when refunded. */
  release(): Promise<boolean>;
}

export interface RedisRefusal extends Refusal, DecidedBy {}

export type RedisAdmitOutcome = RedisAdmission | RedisRefusal;

export interface RedisPacerOptions {
  /** A redis:// URL: the pacer makes its own client and closes it on close(). */
  url?: string;
  /** Or a node-redis client or cluster client (`createCluster()`) of yours (close() leaves it
   * open). On a cluster, the engine is asked of every primary and the script loaded on each. */
  client?: RedisClientLike | RedisClusterLike;
  /** Or seed nodes of a Redis Cluster: the pacer makes its own cluster client,
   * `createCluster({ rootNodes })`, and closes it on close(). */
  rootNodes?: ReadonlyArray<RedisRootNode>;
  /** The bucket's key; every process of the fleet uses the same key and configuration. */
  key: string;
  ratePerMinute?: number;
  burst?: number;
  idleTimeoutMs?: number;
  maxRetries?: number;
  releasePolicy?: ReleasePolicy;
  /** Adaptive pacing of the fleet's bucket (SPEC §14), sent as `ADAPT floor ceiling`. Default off. */
  adaptive?: AdaptiveOptions;
  /** 'auto' (default): the module, else the function, else the script. */
  engine?: 'auto' | RedisEngine;
  /** Default 'local'. */
  onFailure?: FailurePolicy;
  /** The local fallback paces at ⌊rate/fleetSize⌋, ⌊burst/fleetSize⌋ (at least 1). Default 1. */
  fleetSize?: number;
  /** Longest wait for Redis, ms: default min(wait bound, 1000), at most the wait bound. */
  timeoutMs?: number;
  /** After a failure, how long to answer by the policy before asking Redis again, ms. Default 1000. */
  retryAfterMs?: number;
  /** Receives the configuration's notices and one notice when an outage starts and one when it ends. */
  onNotice?: NoticeSink;
  noticeRegistry?: NoticeRegistry;
  now?: never;
}

/** PACER.INFO's pairs, camelCase, and the engine that answered. */
export interface RedisInfo {
  ratePerMin: number;
  burst: number;
  idleTimeoutMs: number;
  maxRetries: number;
  releasePolicy: ReleasePolicy;
  mode: Mode;
  waitBoundMs: number;
  capacityUnits: number;
  maxDebtUnits: number;
  highWaterMs: number;
  tokensUnits: number;
  levelUnits: number;
  seq: number;
  serial: number;
  admitted: number;
  refused: number;
  booked: number;
  released: number;
  releaseRefused: number;
  /** Adaptive pacing (SPEC §14): the rate in force now; the bounds (0, 0
   * when off; the ceiling as stored, the rate when left out); the rate the
   * law's state (core/src/adaptive.rs: its origin, the minute of the
   * counts, the openings counted in it and in the one before, L, and the
   * probing and again bits, each 0 or 1). */
  rateInForce: number;
  adaptiveFloorPerMin: number;
  adaptiveCeilingPerMin: number;
  originMs: number;
  window: number;
  opened: number;
  openedBefore: number;
  limitPerMin: number;
  probing: number;
  again: number;
  /** The key's second block (key format 2, docs/redis.md "The key"): the
   * core's counts for the whole fleet. Admissions with a wait above 0, by
   * the shaping rule, of a redeemed booking; the upstream answers observe()
   * counted (every one on an adaptive bucket, a throttle within the hold
   * too; none on a fixed-rate bucket, where observe() sends nothing); the
   * waits' sum, ms; and the admissions with a wait in (previous bound,
   * bound] for each bound of WAIT_BOUNDS_MS (INFO's `wait_bucket_<bound>`,
   * camelCased as the other names: `waitBucket_<bound>`). */
  admittedAfterWait: number;
  shaped: number;
  redeemed: number;
  upstreamOpened: number;
  upstreamThrottled: number;
  waitMsTotal: number;
  waitBucket_10: number;
  waitBucket_50: number;
  waitBucket_100: number;
  waitBucket_500: number;
  waitBucket_1000: number;
  waitBucket_2500: number;
  waitBucket_5000: number;
  waitBucket_10000: number;
  /** The server's clock at this call. */
  nowMs: number;
  engine: RedisEngine;
}

/** The answers one RedisPacer got, counted as `Counters` counts a pacer's
 * decisions, and how many of them the failure policy gave. */
export interface RedisCounters extends Counters {
  /** Answers the failure policy decided. */
  fallbacks: number;
}

/**
 * A pacer whose bucket lives in one Redis key, shared by every process of a
 * fleet, decided on the server's clock. Every call is async.
 */
export declare class RedisPacer {
  private constructor();
  /** Resolves once the client connected or failed to within the timeout (then the policy answers). */
  static connect(options: RedisPacerOptions): Promise<RedisPacer>;
  readonly key: string;
  readonly config: Pacer['config'];
  readonly adaptive: Pacer['adaptive'];
  readonly mode: Mode;
  readonly waitBoundMs: number;
  readonly canRefuse: boolean;
  readonly enabled: boolean;
  /** The engine in use; null until a call asked the server (again after a reconnect or a failure). */
  readonly engine: RedisEngine | null;
  readonly onFailure: FailurePolicy;
  readonly timeoutMs: number;
  /** Whether the last call found Redis failing. */
  readonly outage: boolean;
  readonly closed: boolean;
  readonly pendingKeys: number;
  /** The bucket's rate in force per minute as the server last reported it
   * (an observe() reply); the configured rate before any, and always with
   * adaptation off. Asks nothing. */
  readonly lastRateInForce: number;
  reserve(): Promise<RedisDecision>;
  /** True when refunded; false when refused by the release policy, spent, or Redis is down. */
  release(ticket: RedisTicket | Ticket): Promise<boolean>;
  reserveOrBook(retriesLeft: number): Promise<RedisBookingDecision>;
  /** Admitted: the ticket is the one the reply carries, and the booking is spent. */
  redeem(booking: RedisBooking | Booking): Promise<RedisAdmitted | RedisNotYet>;
  /** An abort of `signal` rejects at once with its reason; a ticket Redis
   * gave the call, then or later, is released. */
  admit(options?: { signal?: AbortSignal; key?: string | number | symbol }): Promise<RedisAdmitOutcome>;
  forget(key: string | number | symbol): Promise<boolean>;
  /** Reports what the upstream answered (SPEC §14) to the fleet's bucket
   * (PACER.OBSERVE); resolves to its rate in force after it. Adaptation
   * off: nothing is sent, the configured rate. During an outage `local`
   * reports to the fallback (its rate in force), `open` and `closed`
   * resolve to the configured rate. */
  observe(outcome: Outcome): Promise<number>;
  /** Null when the mode is disabled (no bucket is kept). */
  info(): Promise<RedisInfo | null>;
  /** The answers this object got (refusals include bookings and a
   * redemption's "not yet"; outcomes every observe() call), and how many the
   * policy gave. Still answers after close(). */
  counters(): RedisCounters;
  close(): Promise<void>;
}
