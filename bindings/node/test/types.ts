// Compiled with `tsc --noEmit` (npm run typecheck): the declarations as a
// TypeScript proxy uses them. Lines marked @ts-expect-error must fail.
import {
  Pacer, refusalResponse, resolveBudget, NoticeRegistry, type AdmitOutcome, type Decision, type Notice,
  type Booking, type BookingDecision, type PacerClosedError, Ticket, type SharedPacer,
  RedisPacer, RedisTicket, type RedisAdmitOutcome, type RedisInfo, type Outcome, type AdaptiveOptions,
} from 'connpacer';
import { createClient, createCluster } from 'redis';
import { Registry } from 'prom-client';
import { registerMetrics, unregisterMetrics, METRIC_NAMES } from 'connpacer/metrics';
import { WAIT_BOUNDS_MS, type Counters, type RedisCounters } from 'connpacer';
import {
  WsUpgradePacer, sharedWsUpgradePacer, resetWsUpgradePacerForTests, upstreamRequestBudget,
  wsNewConnectionMaxWaitMs, pacedRetryAfterSeconds, refusalScheduleMs, canRefuseAtRate,
  wsNewConnectionsPerMinute, resolvedPacingBudget, type ConnectionPacer, type UpgradeAdmission,
  WS_NEW_CONNECTIONS_PER_MIN_ENV, REDIS_URL_ENV, WS_ADAPTIVE_FLOOR_PER_MIN_ENV, wsAdaptivePacing,
  type UpgradeOutcome,
} from 'connpacer/compat';

async function idiomatic(signal: AbortSignal): Promise<Response | null> {
  const pacer = Pacer.fromEnv(process.env, { burst: 10, onNotice: (n: Notice) => console.warn(n.text) });
  const outcome: AdmitOutcome = await pacer.admit({ signal });
  if (outcome.kind === 'refused') {
    const { status, headers, body } = refusalResponse(outcome.retryAfterSeconds);
    return new Response(body, { status, headers });
  }
  const refunded: boolean = outcome.release();
  void refunded;
  const decision: Decision = pacer.reserve(performance.now() | 0);
  if (decision.kind === 'admitted' && decision.ticket) pacer.release(decision.ticket, 0);
  // @ts-expect-error a refusal has no waitMs
  if (decision.kind === 'refused') void decision.waitMs;
  // @ts-expect-error release policies are named
  new Pacer({ releasePolicy: 'sometimes' });
  const budget = resolveBudget({ PACER_RATE_PER_MIN: '30' }, { noticeRegistry: new NoticeRegistry() });
  void budget.waitBoundMs;
  return null;
}

async function dropIn(signal?: AbortSignal): Promise<number> {
  const pacer: ConnectionPacer = sharedWsUpgradePacer();
  const admission: UpgradeAdmission = await pacer.admit(signal);
  resetWsUpgradePacerForTests();
  const injected = new WsUpgradePacer({
    ratePerMinute: 60, burst: 10, idleTimeoutMs: 120000, maxRetries: 5,
    now: Date.now, schedule: (ms, fire) => { const t = setTimeout(fire, ms); return () => clearTimeout(t); },
  });
  const { idleTimeoutMs, totalTimeoutMs, maxRetries } = upstreamRequestBudget({ env: process.env, warn: console.warn });
  const bound = wsNewConnectionMaxWaitMs(idleTimeoutMs, maxRetries);
  const envName: 'CLODEX_WS_MAX_NEW_CONNECTIONS_PER_MIN' = WS_NEW_CONNECTIONS_PER_MIN_ENV;
  void envName;
  const fleetEnv: 'PACER_REDIS_URL' = REDIS_URL_ENV;
  void fleetEnv;
  void resolvedPacingBudget().maxRetries;
  void totalTimeoutMs;
  void canRefuseAtRate(bound, maxRetries, wsNewConnectionsPerMinute(process.env, console.warn));
  return injected.maxWaitMs + pacedRetryAfterSeconds(5000, bound) + refusalScheduleMs(bound, maxRetries)
    + (admission.kind === 'admitted' ? admission.waitedMs : admission.retryAfterSeconds);
}

void idiomatic;
void dropIn;

// Bookings (SPEC §11), explicit and keyed.
async function bookings(pacer: Pacer): Promise<number> {
  const d: BookingDecision = pacer.reserveOrBook(0, 5);
  let held: Booking | null = null;
  if (d.kind === 'booked') held = d.booking;
  if (held !== null) {
    const r = pacer.redeem(held, 1000);
    if (r.kind === 'admitted' && r.ticket !== null) pacer.release(r.ticket, 1000);
    else if (r.kind === 'booked') pacer.release(r.booking.ticket, 1000);
  }
  const outcome = await pacer.admit({ key: 'request-1' });
  if (outcome.kind === 'refused') pacer.forget('request-1');
  const dropInWithBookings = new WsUpgradePacer({ bookRefusals: true });
  const a = await dropInWithBookings.admit(undefined, 'request-2');
  if (a.kind === 'refused') dropInWithBookings.forget('request-2');
  return pacer.pendingKeys;
}
void bookings;

// Bookings on a shared pacer: no clock argument anywhere.
async function sharedBookings(shared: SharedPacer): Promise<number> {
  const d: BookingDecision = shared.reserveOrBook(5);
  if (d.kind === 'booked') {
    const r = shared.redeem(d.booking);
    if (r.kind === 'booked') shared.release(r.booking.ticket);
  }
  const outcome = await shared.admit({ key: 'request-3' });
  if (outcome.kind === 'refused') shared.forget('request-3');
  // @ts-expect-error a shared pacer takes no clock
  shared.reserveOrBook(0, 5);
  return shared.pendingKeys;
}
void sharedBookings;

// Closing: the closed error's code is typed.
async function closing(pacer: Pacer): Promise<string | null> {
  pacer.close();
  const closed: boolean = pacer.closed;
  void closed;
  try {
    await pacer.admit();
  } catch (error) {
    const e = error as PacerClosedError;
    const code: 'ERR_PACER_CLOSED' = e.code;
    return code;
  }
  // @ts-expect-error tickets are made with their owner and numbers
  new Ticket();
  return null;
}
void closing;

// Fleet pacing: a RedisPacer over a node-redis client or a URL; async calls.

async function fleet(signal: AbortSignal): Promise<number> {
  const client = createClient({ url: 'redis://127.0.0.1:6379' });
  await client.connect();
  const pacer = await RedisPacer.connect({ client, key: 'pacer:openai', ratePerMinute: 60, onFailure: 'local',
    fleetSize: 3 });
  const outcome: RedisAdmitOutcome = await pacer.admit({ signal, key: 'request-4' });
  if (outcome.kind === 'admitted') {
    const refunded: boolean = await outcome.release();
    void refunded;
  } else if (outcome.fallback === 'closed') {
    await pacer.forget('request-4');
  }
  const d = await pacer.reserve();
  if (d.kind === 'admitted' && d.ticket !== null) await pacer.release(d.ticket);
  const b = await pacer.reserveOrBook(3);
  if (b.kind === 'booked') await pacer.redeem(b.booking);
  const info: RedisInfo | null = await pacer.info();
  void new RedisTicket('pacer:openai', '0.1.60000.0.0000000000000000');
  // A Redis Cluster: a cluster client of node-redis's, or seed nodes.
  const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }] });
  await cluster.connect();
  const sharded = await RedisPacer.connect({ client: cluster, key: 'pacer:openai', ratePerMinute: 60 });
  const seeded = await RedisPacer.connect({ rootNodes: ['redis://127.0.0.1:7000', { url: 'redis://127.0.0.1:7001' }],
    key: 'pacer:openai', ratePerMinute: 60, engine: 'script' });
  await Promise.all([sharded.close(), seeded.close()]);
  // @ts-expect-error seed nodes are URLs or client options
  await RedisPacer.connect({ rootNodes: [7000], key: 'k' });
  // @ts-expect-error engines are named
  await RedisPacer.connect({ url: 'redis://127.0.0.1:6379', key: 'k', engine: 'lua' });
  // @ts-expect-error a Redis pacer takes no clock
  await RedisPacer.connect({ url: 'redis://127.0.0.1:6379', key: 'k', now: () => 0 });
  await pacer.close();
  return (info?.admitted ?? 0) + pacer.counters().fallbacks;
}
void fleet;

// Adaptive pacing (SPEC §14): the option, observe and the rate in force on
// every pacer; the drop-in's observe on its pacer objects.
async function adaptive(shared: SharedPacer, signal?: AbortSignal): Promise<number> {
  const bounds: AdaptiveOptions = { floorPerMinute: 10 };
  const pacer = new Pacer({ ratePerMinute: 60, adaptive: bounds });
  const outcome: Outcome = 'throttled';
  const lowered: number = pacer.observe(outcome, 1000) + pacer.observe('opened') + pacer.rateInForce();
  const floor: number | undefined = pacer.adaptive?.floorPerMinute;
  // @ts-expect-error outcomes are named
  pacer.observe('throttle');
  // @ts-expect-error the floor is required
  new Pacer({ adaptive: { ceilingPerMinute: 90 } });
  const machine: number = shared.observe('throttled') + shared.rateInForce();
  // @ts-expect-error a shared pacer takes no clock
  shared.observe('opened', 1000);
  const fleet = await RedisPacer.connect({ url: 'redis://127.0.0.1:6379', key: 'k', adaptive: { floorPerMinute: 10,
    ceilingPerMinute: 90 } });
  const fleetRate: number = await fleet.observe('throttled');
  const dropIn = new WsUpgradePacer({ adaptive: { floorPerMinute: 10 } });
  const host: ConnectionPacer = sharedWsUpgradePacer();
  const answer: UpgradeOutcome = 'opened';
  void host.observe?.(answer);
  const admission = await host.admit(signal);
  void admission;
  const envName: 'CLODEX_WS_ADAPTIVE_FLOOR_PER_MIN' = WS_ADAPTIVE_FLOOR_PER_MIN_ENV;
  void envName;
  const fromEnv = wsAdaptivePacing(process.env, console.warn);
  return lowered + (floor ?? 0) + machine + fleetRate + dropIn.observe('throttled') + dropIn.rateInForce()
    + (fromEnv?.ceilingPerMinute ?? 0);
}
void adaptive;

function metrics(pacer: Pacer, shared: SharedPacer, fleet: RedisPacer): void {
  const registry = new Registry();
  registerMetrics(pacer, { bucket: 'api', registry });
  registerMetrics(shared, { bucket: 'machine' });
  registerMetrics(fleet, { bucket: 'fleet', registry });
  const gone: boolean = unregisterMetrics({ bucket: 'api', registry });
  void gone;
  // @ts-expect-error the bucket is required
  registerMetrics(pacer, { registry });
  // @ts-expect-error a pacer, not its counts
  registerMetrics(pacer.counters(), { bucket: 'api' });
  const counts: Counters = shared.counters();
  const buckets: number[] = counts.waitBuckets;
  const fleetCounts: RedisCounters = fleet.counters();
  const tokens: number = pacer.tokens(0) + shared.tokens() + fleetCounts.fallbacks + fleet.lastRateInForce;
  // @ts-expect-error the bounds are read-only
  WAIT_BOUNDS_MS.push(1);
  void [buckets, tokens, METRIC_NAMES.length];
}
void metrics;
