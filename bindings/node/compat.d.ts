// Types of `connpacer/compat`: the same names and shapes as the proxy's
// ws-upgrade-pacer module.

export declare const WS_NEW_CONNECTIONS_PER_MIN_ENV: 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN';
export declare const DEFAULT_WS_NEW_CONNECTIONS_PER_MIN: number;
export declare const MAX_WS_NEW_CONNECTIONS_PER_MIN: number;
export declare const WS_NEW_CONNECTION_BURST: number;
export declare const WS_NEW_CONNECTION_MAX_WAIT_CEILING_MS: number;
export declare const UPSTREAM_MAX_RETRIES_ENV: 'CLODEX_UPSTREAM_MAX_RETRIES';
export declare const UPSTREAM_IDLE_TIMEOUT_ENV: 'CLODEX_UPSTREAM_IDLE_TIMEOUT_MS';
export declare const UPSTREAM_TOTAL_TIMEOUT_ENV: 'CLODEX_UPSTREAM_TOTAL_TIMEOUT_MS';
/** Set to a positive integer: the shared pacer paces adaptively (SPEC §14), never below it. */
export declare const WS_ADAPTIVE_FLOOR_PER_MIN_ENV: 'CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN';
/** With the floor set: the highest rate adaptation may reach; default the rate. */
export declare const WS_ADAPTIVE_CEILING_PER_MIN_ENV: 'CLODEX_WS_ADAPTIVE_CEILING_PER_MIN';
/** Set: sharedWsUpgradePacer() paces against a fleet bucket in Redis (a RedisPacer). */
export declare const REDIS_URL_ENV: 'PACER_REDIS_URL';
/** The fleet bucket's key; default 'pacer:ws-upgrade'. */
export declare const REDIS_KEY_ENV: 'PACER_REDIS_KEY';
/** 'local' (default), 'open' or 'closed': what an admit does while Redis cannot answer. */
export declare const REDIS_ON_FAILURE_ENV: 'PACER_REDIS_ON_FAILURE';
/** The number of processes sharing the bucket, for the local fallback's share; default 1. */
export declare const REDIS_FLEET_SIZE_ENV: 'PACER_REDIS_FLEET_SIZE';

type Env = Record<string, string | undefined>;
type Warn = (message: string) => void;

export declare function resolvedPacingBudget(): { idleTimeoutMs: number; maxRetries: number };
export declare function wsNewConnectionMaxWaitMs(idleTimeoutMs: number, maxRetries: number): number;
export declare function pacedRetryAfterSeconds(requiredWaitMs: number, maxWaitMs: number): number;
export declare function refusalScheduleMs(maxWaitMs: number, maxRetries: number): number;
export declare function canRefuseAtRate(maxWaitMs: number, maxRetries: number, ratePerMinute: number): boolean;

/** Outcome of asking the pacer for permission to open a new connection. */
export type UpgradeAdmission =
  | {
    kind: 'admitted';
    /** Milliseconds spent queued. 0 means admitted on arrival. */
    waitedMs: number;
    /** True when the request waited on the bucket (decided by the pacer, so
     * true even when a clock step back makes `waitedMs` read 0). Absent
     * when pacing is off. */
    queued?: boolean;
    /** Hands back what this admission debited (a whole token, or the
     * fraction at the debt floor) when it will open no connection after
     * all; a second call does nothing. Absent when pacing is off. */
    release?: () => void;
  }
  | {
    kind: 'refused';
    /** What the rate would have required, before the bound refused it. */
    requiredWaitMs: number;
    /** Backoff hint for the client, in seconds. */
    retryAfterSeconds: number;
  };

/** The upstream's answer to a websocket upgrade, as the host classifies
 * it: `'throttled'` for its rate limit (403/429), `'opened'` when the
 * upgrade succeeded. */
export type UpgradeOutcome = 'opened' | 'throttled';

export interface ConnectionPacer {
  admit(signal?: AbortSignal): Promise<UpgradeAdmission>;
  /** Reports an upgrade's answer (SPEC §14); the rate in force after it
   * (a Promise of it for the fleet's bucket, which never rejects).
   * Changes nothing unless adaptive bounds were given. */
  observe?(outcome: UpgradeOutcome): number | Promise<number>;
}

/** Adaptive pacing's bounds (SPEC §14), per minute. */
export interface WsAdaptivePacing {
  /** The lowest rate a throttle may lower the rate in force to (floored,
   * held between 1 and the rate). */
  floorPerMinute: number;
  /** The highest rate it may reach, searching or probing (floored, held
   * between the rate and 600); default the rate. */
  ceilingPerMinute?: number;
}

export interface WsUpgradePacerOptions {
  /** New connections per minute; 0 disables pacing entirely. */
  ratePerMinute?: number;
  burst?: number;
  /** No-data deadline the queued request is spending. */
  idleTimeoutMs?: number;
  /** Retry attempts that deadline has to cover. */
  maxRetries?: number;
  now?: () => number;
  /** Runs `fire` after `ms`; returns a cancel function. Injected by tests. */
  schedule?: (ms: number, fire: () => void) => () => void;
  /** Opt-in (SPEC §11): a refused request called with a `key` keeps a place
   * in line that the same key's retry redeems. Off by default. */
  bookRefusals?: boolean;
  /** Opt-in (SPEC §14): the rate in force follows the upgrades' answers
   * the host reports with `observe()`, between these bounds. Off by default. */
  adaptive?: WsAdaptivePacing;
}

export declare class WsUpgradePacer implements ConnectionPacer {
  constructor(options?: WsUpgradePacerOptions);
  /** Longest any one request will be queued. Derived; exposed for diagnostics. */
  readonly maxWaitMs: number;
  /** `key`: the request's identity across the client's retries (used only
   * with `bookRefusals`). */
  admit(signal?: AbortSignal, key?: string | number | symbol): Promise<UpgradeAdmission>;
  /** With `bookRefusals`: gives back the booking of a keyed request that
   * ends without a connection. */
  forget(key: string | number | symbol): boolean;
  /** `'throttled'` where the host classifies an upgrade's answer as the
   * upstream's rate limit, `'opened'` when an upgrade succeeded: the rate
   * in force after it (the configured rate, changed by nothing, without
   * `adaptive`). */
  observe(outcome: UpgradeOutcome): number;
  /** The rate in force now, per minute (diagnostics). */
  rateInForce(): number;
}

export declare function wsNewConnectionsPerMinute(env?: Env, warn?: Warn): number;
/** The shared pacer's adaptive bounds from CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN and
 * CLODEX_WS_ADAPTIVE_CEILING_PER_MIN; undefined (off) when the floor is unset or malformed. */
export declare function wsAdaptivePacing(env?: Env, warn?: Warn): WsAdaptivePacing | undefined;
/** The process-wide pacer; with PACER_REDIS_URL set, over the fleet's bucket in Redis. */
export declare function sharedWsUpgradePacer(): ConnectionPacer;
export declare function resetWsUpgradePacerForTests(): void;

export interface UpstreamRequestBudget {
  idleTimeoutMs: number;
  totalTimeoutMs: number;
  maxRetries: number;
}

export declare function upstreamRequestBudget(options?: {
  env?: Env;
  warn?: Warn;
  /** A caller's own idle timeout: used as given (lowered to the total timeout silently). */
  idleTimeoutMs?: number;
}): UpstreamRequestBudget;

/** Where `clodex: …` notices go when no `warn` is given (default: stderr). */
export declare function setParentNoticeSink(sink: (line: string) => void): void;

/** The host's own pieces, as its pacer module imported them. */
export interface HostPieces {
  /** The host's parent-notice channel: receives each `clodex: …` line. */
  emitParentNotice?: (line: string) => void;
  /** The host's request budget; the wait bound is sized against its
   * `idleTimeoutMs` and `maxRetries`. */
  upstreamRequestBudget?: () => { idleTimeoutMs: number; maxRetries: number };
}
/** Wires the host's notice channel and request budget in
 * (`dropin/ws-upgrade-pacer.ts` does it for the host). */
export declare function useHost(host: HostPieces): void;
