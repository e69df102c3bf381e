"""Prometheus metrics for pacers (docs/metrics.md), through prometheus_client.

    from pacer import metrics
    metrics.register(pacer, bucket="openai")              # on prometheus_client's REGISTRY
    metrics.register(shared, bucket="anthropic", registry=my_registry)

Each registry gets one collector that holds its pacers by bucket name;
nothing is computed until a scrape asks, and a scrape only reads the counts
the pacers keep (``counters()``, ``pending_keys``, the rate in force and,
for an in-process or shared pacer, ``tokens()``): never a call to Redis.

prometheus_client is an optional dependency: ``pip install 'connpacer[metrics]'``.
``import pacer`` never imports it; this module does.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
    from prometheus_client.registry import REGISTRY, CollectorRegistry
except ModuleNotFoundError as error:  # tests/test_metrics.py hides the module
    if error.name is None or error.name.split(".")[0] != "prometheus_client":
        raise
    raise ImportError(
        "pacer: pacer.metrics needs prometheus_client, which is not installed; "
        "install it with pip install 'connpacer[metrics]'"
    ) from None

from . import _check
from ._pacer import WAIT_BOUNDS_MS, Pacer
from ._redis import AsyncRedisPacer, RedisPacer, _FleetCore
from ._shared import SharedPacer, SharedPacerError

__all__ = ["register", "registered", "unregister"]

#: The histogram's ``le`` values: the library's bounds in seconds, written
#: as docs/metrics.md writes them (0.01 ... 1, 2.5, 5, 10).
_LE = tuple(f"{bound_ms / 1000:g}" for bound_ms in WAIT_BOUNDS_MS)
_KINDS = (Pacer, SharedPacer, RedisPacer, AsyncRedisPacer)
_lock = threading.Lock()
#: Each registry's collector (made by the first register on it, dropped by
#: the last unregister).
_collectors: weakref.WeakKeyDictionary[CollectorRegistry, _PacerCollector] = weakref.WeakKeyDictionary()


class _Families:
    """One scrape's metric families, in docs/metrics.md's order."""

    def __init__(self) -> None:
        self.decisions = CounterMetricFamily(
            "pacer_decisions_total", "Answers to requests for a new connection, by decision.",
            labels=["bucket", "decision"])
        self.wait = HistogramMetricFamily(
            "pacer_wait_seconds", "The wait of every admission (0 for an immediate one).",
            labels=["bucket"], unit="seconds")
        self.shaped = CounterMetricFamily(
            "pacer_shaped_total", "Admissions by the shaping rule.", labels=["bucket"])
        self.redeemed = CounterMetricFamily(
            "pacer_redeemed_total", "Bookings admitted when presented on their retry.", labels=["bucket"])
        self.releases = CounterMetricFamily(
            "pacer_releases_total", "Releases of a ticket, refunded to the bucket or not.",
            labels=["bucket", "refunded"])
        self.outcomes = CounterMetricFamily(
            "pacer_upstream_outcomes_total", "What the upstream answered, as reported to observe.",
            labels=["bucket", "outcome"])
        self.clock_regressions = CounterMetricFamily(
            "pacer_clock_regressions_total", "Calls whose clock reading was behind the latest one.",
            labels=["bucket"])
        self.rate = GaugeMetricFamily(
            "pacer_rate_in_force_per_minute", "The rate the pacer decides at now, new connections per minute.",
            labels=["bucket"])
        self.tokens = GaugeMetricFamily(
            "pacer_tokens", "Tokens in the bucket now (negative: the debt of admissions still waiting).",
            labels=["bucket"])
        self.pending = GaugeMetricFamily(
            "pacer_bookings_pending", "Keyed requests refused and not yet admitted or forgotten, in this process.",
            labels=["bucket"])
        self.fallbacks = CounterMetricFamily(
            "pacer_fallbacks_total", "Answers the failure policy gave because Redis failed.", labels=["bucket"])

    def all(self) -> list[Metric]:
        return [self.decisions, self.wait, self.shaped, self.redeemed, self.releases, self.outcomes,
                self.clock_regressions, self.rate, self.tokens, self.pending, self.fallbacks]


def _read(pacer: Any) -> tuple[Any, int, int, float | None, int | None] | None:
    """What a scrape exports of ``pacer``: its counts, pending keys, rate in
    force, tokens (None for a fleet client) and fallbacks (None but for a
    fleet client); None for a closed pacer (it exports nothing)."""
    if isinstance(pacer, _FleetCore):
        if pacer._closed:
            return None
        counts = pacer.counters()
        return counts, pacer.pending_keys, pacer._last_rate_in_force(), None, counts.fallbacks
    try:
        counts = pacer.counters()
        return counts, pacer.pending_keys, pacer.rate_in_force(), pacer.tokens(), None
    except SharedPacerError as error:  # closed meanwhile (only a shared pacer can be)
        if error.status_name == "SHARED_NOT_OPEN":
            return None
        raise


class _PacerCollector:
    """The pacers registered on one registry, by bucket name: a custom
    collector (``collect``, ``describe``) for prometheus_client."""

    def __init__(self) -> None:
        self.pacers: dict[str, Any] = {}

    def describe(self) -> list[Metric]:
        # The names it exports, so that the registry refuses a clash
        # without a scrape.
        return _Families().all()

    def collect(self) -> Iterator[Metric]:
        with _lock:
            pacers = list(self.pacers.items())
        families = _Families()
        for bucket, pacer in pacers:
            read = _read(pacer)
            if read is None:
                continue
            c, pending, rate, tokens, fallbacks = read
            immediate = c.admitted - c.admitted_after_wait
            families.decisions.add_metric([bucket, "admitted"], immediate)
            families.decisions.add_metric([bucket, "waited"], c.admitted_after_wait)
            families.decisions.add_metric([bucket, "refused"], c.refused - c.booked)
            families.decisions.add_metric([bucket, "booked"], c.booked)
            # Cumulative: the immediate admissions, then each bucket's waits.
            cumulative, buckets = immediate, []
            for le, count in zip(_LE, c.wait_buckets):
                cumulative += count
                buckets.append((le, cumulative))
            buckets.append(("+Inf", c.admitted))
            families.wait.add_metric([bucket], buckets, c.wait_ms_total / 1000)
            families.shaped.add_metric([bucket], c.shaped)
            families.redeemed.add_metric([bucket], c.redeemed)
            families.releases.add_metric([bucket, "true"], c.refunded)
            families.releases.add_metric([bucket, "false"], c.released - c.refunded)
            families.outcomes.add_metric([bucket, "opened"], c.opened)
            families.outcomes.add_metric([bucket, "throttled"], c.throttled)
            families.clock_regressions.add_metric([bucket], c.clock_regressions)
            families.rate.add_metric([bucket], rate)
            if tokens is not None:
                families.tokens.add_metric([bucket], tokens)
            families.pending.add_metric([bucket], pending)
            if fallbacks is not None:
                families.fallbacks.add_metric([bucket], fallbacks)
        # A family with no sample (no fleet client: no fallbacks) is left out.
        yield from (family for family in families.all() if family.samples)


def _bucket_name(bucket: Any) -> str:
    if not isinstance(bucket, str):
        raise TypeError(f"pacer: bucket must be a str, got {_check.describe(bucket)}")
    if bucket == "":
        raise ValueError("pacer: bucket must not be empty")
    try:
        bucket.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"pacer: bucket must be text that UTF-8 can encode, got {bucket!r} "
            f"(a lone surrogate at index {error.start})"
        ) from None
    return bucket


def _registry_of(registry: Any) -> CollectorRegistry:
    if not isinstance(registry, CollectorRegistry):
        raise TypeError(
            f"pacer: registry must be a prometheus_client CollectorRegistry, got {_check.describe(registry)}"
        )
    return registry


def _closed(pacer: Any) -> bool:
    return bool(pacer._closed) if isinstance(pacer, _FleetCore) else isinstance(pacer, SharedPacer) and pacer.closed


def register(pacer: Pacer | SharedPacer | RedisPacer | AsyncRedisPacer, *, bucket: str,
             registry: CollectorRegistry = REGISTRY) -> None:
    """Exports ``pacer``'s metrics on ``registry`` (default
    prometheus_client's ``REGISTRY``) with the label ``bucket``.

    Refused, changing nothing: a pacer of another kind or a registry that
    is not a ``CollectorRegistry`` (TypeError); a bucket that is not a str
    (TypeError), empty, or not encodable as UTF-8 (a lone surrogate), a
    bucket name taken on this registry, a pacer registered on it already,
    or a closed pacer (ValueError); the registry's own error if another
    collector there exports these names already. The registry keeps the
    pacer until ``unregister``."""
    if not isinstance(pacer, _KINDS):
        raise TypeError(
            "pacer: register takes a Pacer, SharedPacer, RedisPacer or AsyncRedisPacer, "
            f"got {_check.describe(pacer)}"
        )
    name = _bucket_name(bucket)
    target = _registry_of(registry)
    if _closed(pacer):
        raise ValueError(f"pacer: this pacer is closed; nothing to export for the bucket {name!r}")
    with _lock:
        collector = _collectors.get(target)
        if collector is not None:
            if name in collector.pacers:
                raise ValueError(f"pacer: the bucket {name!r} is registered already on this registry")
            for other, registered_pacer in collector.pacers.items():
                if registered_pacer is pacer:
                    raise ValueError(f"pacer: this pacer is registered already on this registry, "
                                     f"as the bucket {other!r}")
            collector.pacers[name] = pacer
            return
        collector = _PacerCollector()
        collector.pacers[name] = pacer
        target.register(collector)  # raises (and nothing is kept) on a clash of names
        _collectors[target] = collector


def unregister(pacer: Any, *, registry: CollectorRegistry = REGISTRY) -> bool:
    """Stops exporting ``pacer`` on ``registry``: True if it was registered
    there, False if not. Its bucket name is free again; the registry's
    last pacer takes the collector off the registry."""
    target = _registry_of(registry)
    with _lock:
        collector = _collectors.get(target)
        if collector is None:
            return False
        for name, registered_pacer in collector.pacers.items():
            if registered_pacer is pacer:
                del collector.pacers[name]
                break
        else:
            return False
        if not collector.pacers:
            del _collectors[target]
            target.unregister(collector)
        return True


def registered(registry: CollectorRegistry = REGISTRY) -> dict[str, Any]:
    """The pacers registered on ``registry``, by bucket name (a copy)."""
    target = _registry_of(registry)
    with _lock:
        collector = _collectors.get(target)
        return {} if collector is None else dict(collector.pacers)
