// connpacer/metrics: a pacer's counts as Prometheus metrics through
// prom-client (docs/metrics.md). prom-client is an optional peer
// dependency: install it to use this module.
import type { Registry } from 'prom-client';
import type { Pacer, SharedPacer, RedisPacer } from './index';

export interface MetricsOptions {
  /** The `bucket` label: non-empty, well-formed text (no lone surrogate). */
  bucket: string;
  /** Default: prom-client's `register`. */
  registry?: Registry;
}

/**
 * Exports the pacer's counts under `bucket` on the registry, read at each
 * collection (a scrape): pacer_decisions_total, pacer_wait_seconds,
 * pacer_shaped_total, pacer_redeemed_total, pacer_releases_total,
 * pacer_upstream_outcomes_total, pacer_clock_regressions_total,
 * pacer_rate_in_force_per_minute, pacer_tokens (not for a RedisPacer),
 * pacer_bookings_pending, pacer_fallbacks_total (a RedisPacer's). Throws a
 * TypeError for a bad bucket, options, registry or pacer; an Error with
 * code 'ERR_PACER_METRICS_REGISTERED' when the bucket name, or the pacer,
 * is on the registry already, or the registry holds metrics of these names
 * from elsewhere; 'ERR_PACER_CLOSED' for a closed pacer. A pacer closed
 * later keeps its last counts and loses its gauges.
 */
export declare function registerMetrics(
  pacer: Pacer | SharedPacer | RedisPacer,
  options: MetricsOptions,
): void;

/** Stops exporting `bucket` from the registry: true when it was there. With
 * the last bucket gone, the metrics leave the registry. */
export declare function unregisterMetrics(options: MetricsOptions): boolean;

/** The metric names registerMetrics puts on a registry. */
export declare const METRIC_NAMES: readonly string[];
