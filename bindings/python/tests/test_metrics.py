"""pacer.metrics (docs/metrics.md) through the real prometheus_client: the
registry is scraped with ``generate_latest`` and read back with its own
parser, ``text_string_to_metric_families``. Every name, type and label of
the exposition is checked against the table in docs/metrics.md (read from
the file), and every value against counts derived by hand in the test.

prometheus_client is imported plainly (scripts/test-python.sh installs the
``metrics`` extra): without it this file fails, it is never skipped."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import pacer
from pacer import Admitted, AdmitPath, AsyncRedisPacer, Booked, RedisPacer, Refused, SharedPacer, metrics
from pacer._redis import RedisAdmitted, RedisBooked, RedisBooking, RedisRefused, RedisTicket, _Tally

from conftest import REPO_ROOT, FakeClock
from redis_server import REDIS_SERVER, RedisServer, free_port

# docs/metrics.md's bounds, ms, typed here as the contract states them.
DOC_BOUNDS_MS = [10, 50, 100, 500, 1000, 2500, 5000, 10000]
DOC_LE = ["0.01", "0.05", "0.1", "0.5", "1", "2.5", "5", "10", "+Inf"]
FLEET_ONLY = {"pacer_fallbacks_total"}
NOT_FLEET = {"pacer_tokens"}


# ------------------------------------------------------------ the contract, read from docs/metrics.md


def doc_table() -> dict[str, tuple[str, list[str], dict[str, list[str]]]]:
    """name -> (type, label names, the values of each enumerated label),
    from the table in docs/metrics.md."""
    text = (REPO_ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    cell = r"((?:\\\||[^|])+)"
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^\| `(pacer_\w+)` \| (counter|gauge|histogram) \| " + cell + r" \| " + cell + r" \| ", line)
        if m is None:
            continue
        name, kind, labels = m.group(1), m.group(2), m.group(4).strip()
        assert labels.startswith("`bucket`"), line
        enumerated: dict[str, list[str]] = {}
        for label, values in re.findall(r"`(\w+)` = ([^;]*)", labels):
            quoted = re.findall(r"`([^`]+)`", values)
            enumerated[label] = quoted or [v.strip() for v in values.split(",")]
        rows[name] = (kind, ["bucket", *enumerated], enumerated)
    return rows


DOC = doc_table()


def test_the_doc_table_is_read() -> None:
    # Eleven metrics; the enumerations as the table spells them.
    assert len(DOC) == 11
    assert DOC["pacer_decisions_total"][2] == {"decision": ["admitted", "waited", "refused", "booked"]}
    assert DOC["pacer_wait_seconds"][:2] == ("histogram", ["bucket", "le"])
    assert DOC["pacer_wait_seconds"][2]["le"] == DOC_LE
    assert DOC["pacer_releases_total"][2] == {"refunded": ["true", "false"]}
    assert DOC["pacer_upstream_outcomes_total"][2] == {"outcome": ["opened", "throttled"]}
    # The library's bounds are the documented ones.
    assert list(pacer.WAIT_BOUNDS_MS) == DOC_BOUNDS_MS


# ------------------------------------------------------------ scraping


def scrape(registry: CollectorRegistry) -> dict[str, Any]:
    """The registry's exposition read back: family name (as docs/metrics.md
    writes it: a counter with ``_total``) -> (type, {(sample name, labels
    as a sorted tuple): value})."""
    families = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode("utf-8")):
        name = family.name + "_total" if family.type == "counter" else family.name
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
        families[name] = (family.type, samples)
    return families


def check_contract(families: dict[str, Any], buckets: set[str], fleet: bool) -> None:
    """Every family a pacer of this kind exports is in docs/metrics.md with
    its type; every sample has the documented labels, and each enumerated
    label takes exactly the documented values for each bucket."""
    expected = {name for name in DOC if name not in (NOT_FLEET if fleet else FLEET_ONLY)}
    assert set(families) == expected
    for name, (kind, samples) in families.items():
        doc_kind, doc_labels, enumerated = DOC[name]
        assert kind == doc_kind, name
        for sample_name, labels in samples:
            names = [label for label, _ in labels]
            if kind == "histogram" and not sample_name.endswith("_bucket"):
                assert sorted(names) == ["bucket"], (sample_name, labels)
            else:
                assert sorted(names) == sorted(doc_labels), (sample_name, labels)
        assert {dict(labels)["bucket"] for _, labels in samples} == buckets
        for label, values in enumerated.items():
            for bucket in buckets:
                seen = [dict(labels)[label] for _, labels in samples if dict(labels)["bucket"] == bucket
                        and label in dict(labels)]
                assert sorted(seen) == sorted(values), (name, bucket, label, seen)


def value(families: dict[str, Any], name: str, bucket: str, **labels: str) -> float:
    """One sample's value: the family ``name`` (docs' name), the sample
    name (``name`` itself, or a histogram's ``_bucket``/``_count``/``_sum``
    given as ``sample=``)."""
    sample = labels.pop("sample", name)
    key = (sample, tuple(sorted({"bucket": bucket, **labels}.items())))
    return families[name][1][key]  # type: ignore[no-any-return]


def histogram(families: dict[str, Any], bucket: str) -> tuple[list[float], float, float]:
    """(cumulative counts by DOC_LE, _count, _sum)."""
    counts = [value(families, "pacer_wait_seconds", bucket, sample="pacer_wait_seconds_bucket", le=le)
              for le in DOC_LE]
    return (counts, value(families, "pacer_wait_seconds", bucket, sample="pacer_wait_seconds_count"),
            value(families, "pacer_wait_seconds", bucket, sample="pacer_wait_seconds_sum"))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def quiet(**options: Any) -> dict[str, Any]:
    return {"notice_registry": pacer.NoticeRegistry(), **options}


# ------------------------------------------------------------ an in-process pacer, decisions by hand


# Rate 60 (a token a second), burst 2, idle 30000 ms, 3 retries: wait bound
# min(15000, ⌊(30000 − 14000) / 8⌋) = 2000 ms, hint cap 2 s, a booking's
# horizon with 3 retries left 2000 + 3 · 2 · 1000 = 8000 ms (SPEC §3, §11).
CONFIG = {"rate_per_minute": 60, "burst": 2, "idle_timeout_ms": 30000, "max_retries": 3}


def test_an_in_process_pacer_by_hand(registry: CollectorRegistry, clock: FakeClock) -> None:
    p = pacer.Pacer(**quiet(**CONFIG), clock=clock)
    assert p.wait_bound_ms == 2000
    # t=0, the bucket full (2 tokens): two admitted at once (level 1, 0);
    # the third waits 1000 ms (level −1), the fourth 2000 ms (level −2),
    # both within the bound.
    first, second, third, fourth = (p.reserve(0) for _ in range(4))
    assert [type(d) for d in (first, second, third, fourth)] == [Admitted] * 4
    assert [d.wait_ms for d in (first, second, third, fourth)] == [0, 0, 1000, 2000]
    # A fifth would wait 3000 > 2000: with 3 retries left (horizon 8000) it
    # books the slot at 3000 ms, one token debited (level −3).
    booked = p.reserve_or_book(0, 3)
    assert isinstance(booked, Booked) and booked.booking.slot_ms == 3000
    assert p.level_at(0) == -3 * pacer.UNITS_PER_TOKEN
    # Presented at 0: the slot is 3000 ms away, more than the bound: not yet
    # (a refusal, no new booking). At 1000 it is 2000 ms away: admitted
    # after 2000 ms by the booked path (redeemed).
    assert isinstance(p.redeem(booked.booking, 0), Booked)
    redeemed = p.redeem(booked.booking, 1000)
    assert isinstance(redeemed, Admitted) and (redeemed.wait_ms, redeemed.path) == (2000, AdmitPath.BOOKED)
    # At 1000: one second refilled one token (−3 → −2); the first admission
    # released (refund policy): refunded (−2 → −1); a second release of it
    # is no call.
    assert first.release(1000) is True
    assert first.release(1000) is False
    assert p.level_at(1000) == -1 * pacer.UNITS_PER_TOKEN
    # What the upstream answered (adaptation off: counted all the same).
    assert p.observe("opened", 1000) == 60 and p.observe("throttled", 1000) == 60
    # A clock reading behind the latest (500 < 1000) reads as 1000: at
    # level −1 the admission waits 2000 ms (level −2); counted as a regression.
    late = p.reserve(500)
    assert isinstance(late, Admitted) and late.wait_ms == 2000 and late.clock_regressed
    clock.ms = 1000
    assert p.tokens() == -2.0 and p.level_at() == -2 * pacer.UNITS_PER_TOKEN

    # The counts, by hand: admitted 6 (first, second, third, fourth, the
    # redemption, late), 4 after a wait of 1000, 2000, 2000, 2000 ms (sum
    # 7000); refused 2 (the booking and the "not yet"), 1 of them booked.
    # Waits in (500, 1000]: 1 (bucket 4); in (1000, 2500]: 3 (bucket 5).
    assert p.counters() == pacer.Counters(
        admitted=6, admitted_after_wait=4, refused=2, shaped=0, released=1, refunded=1, clock_regressions=1,
        booked=1, opened=1, throttled=1, wait_ms_total=7000, redeemed=1, wait_buckets=(0, 0, 0, 0, 1, 3, 0, 0))

    metrics.register(p, bucket="api", registry=registry)
    families = scrape(registry)
    check_contract(families, {"api"}, fleet=False)
    decisions = {d: value(families, "pacer_decisions_total", "api", decision=d)
                 for d in ("admitted", "waited", "refused", "booked")}
    # admitted − admitted_after_wait = 2; waited 4; refused − booked = 1; booked 1.
    assert decisions == {"admitted": 2, "waited": 4, "refused": 1, "booked": 1}
    # Cumulative: 2 immediate through le=0.5, +1 at le=1, +3 at le=2.5;
    # +Inf and _count = admitted = 6; _sum = 7000 ms = 7 s.
    assert histogram(families, "api") == ([2, 2, 2, 2, 3, 6, 6, 6, 6], 6, 7.0)
    assert value(families, "pacer_shaped_total", "api") == 0
    assert value(families, "pacer_redeemed_total", "api") == 1
    assert value(families, "pacer_releases_total", "api", refunded="true") == 1
    assert value(families, "pacer_releases_total", "api", refunded="false") == 0
    assert value(families, "pacer_upstream_outcomes_total", "api", outcome="opened") == 1
    assert value(families, "pacer_upstream_outcomes_total", "api", outcome="throttled") == 1
    assert value(families, "pacer_clock_regressions_total", "api") == 1
    assert value(families, "pacer_rate_in_force_per_minute", "api") == 60
    assert value(families, "pacer_tokens", "api") == -2.0  # at the clock's 1000 ms
    assert value(families, "pacer_bookings_pending", "api") == 0
    # A scrape reads only: the same counts and level after it.
    assert p.level_at(1000) == -2 * pacer.UNITS_PER_TOKEN and p.counters().admitted == 6


def test_waits_above_the_last_bound_are_only_in_inf(registry: CollectorRegistry, clock: FakeClock) -> None:
    # Rate 60, burst 1, idle 30000, no retries: bound min(15000, ⌊30000 / 2⌋)
    # = 15000 ms (SPEC §3, backoff(0) = 0). Fourteen reserves at t=0 wait 0,
    # 1000, ..., 13000 ms.
    # Non-cumulative: (500,1000]: 1000; (1000,2500]: 2000; (2500,5000]: 3000,
    # 4000, 5000; (5000,10000]: 6000 ... 10000 (5, the bound 10000 included);
    # above 10000: 11000, 12000, 13000 (in no bucket). Sum 0+1+...+13 = 91 s.
    p = pacer.Pacer(**quiet(rate_per_minute=60, burst=1, idle_timeout_ms=30_000, max_retries=0), clock=clock)
    assert p.wait_bound_ms == 15000
    waits = [p.reserve(0).wait_ms for _ in range(14)]  # type: ignore[union-attr]
    assert waits == [1000 * n for n in range(14)]
    c = p.counters()
    assert (c.admitted, c.admitted_after_wait, c.wait_ms_total) == (14, 13, 91_000)
    assert c.wait_buckets == (0, 0, 0, 0, 1, 1, 3, 5)
    metrics.register(p, bucket="long", registry=registry)
    families = scrape(registry)
    check_contract(families, {"long"}, fleet=False)
    assert histogram(families, "long") == ([1, 1, 1, 1, 2, 3, 6, 11, 14], 14, 91.0)


# ------------------------------------------------------------ shared pacers: the bucket's counts


@pytest.fixture
def shm_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh path (with a '/', so it is not looked up in /dev/shm)."""
    folder = Path(os.environ.get("PACER_SHM_TEST_DIR") or tempfile.mkdtemp(prefix="pacer-py-metrics-"))
    path = folder / f"pacer-py-metrics-{os.getpid()}-{request.node.name}"
    path.unlink(missing_ok=True)
    yield str(path)
    path.unlink(missing_ok=True)
    if "PACER_SHM_TEST_DIR" not in os.environ:
        folder.rmdir()


def test_a_shared_pacer_exports_the_buckets_counts(shm_path: str) -> None:
    # Two handles on one file, rate 60, burst 10: the bucket is full, so the
    # 5 reserves (3 through a, 2 through b) are admitted at once at any
    # speed. One released through a (refunded), one "opened" reported
    # through b. The counts are the file's: both handles read admitted 5,
    # released 1, refunded 1, opened 1. Each handle on a registry of its
    # own exports the same numbers (which is why one process per bucket is
    # scraped).
    a = SharedPacer.open(shm_path, **quiet())
    b = SharedPacer.open(shm_path, **quiet())
    first_registry, second_registry = CollectorRegistry(), CollectorRegistry()
    try:
        first = a.reserve()
        a.reserve(), b.reserve(), a.reserve(), b.reserve()
        assert isinstance(first, Admitted) and first.release() is True
        b.observe("opened")
        expected = pacer.Counters(admitted=5, admitted_after_wait=0, refused=0, shaped=0, released=1, refunded=1,
                                  clock_regressions=0, opened=1)
        assert a.counters() == b.counters() == expected
        metrics.register(a, bucket="shared", registry=first_registry)
        metrics.register(b, bucket="shared", registry=second_registry)
        for registry in (first_registry, second_registry):
            families = scrape(registry)
            check_contract(families, {"shared"}, fleet=False)
            assert value(families, "pacer_decisions_total", "shared", decision="admitted") == 5
            assert value(families, "pacer_decisions_total", "shared", decision="waited") == 0
            assert histogram(families, "shared") == ([5] * 9, 5, 0.0)
            assert value(families, "pacer_releases_total", "shared", refunded="true") == 1
            assert value(families, "pacer_upstream_outcomes_total", "shared", outcome="opened") == 1
            assert value(families, "pacer_rate_in_force_per_minute", "shared") == 60
            # 10 − 5 + 1 = 6 tokens, refilled on the shared clock since (at
            # most to the burst, 10).
            assert 6 <= value(families, "pacer_tokens", "shared") <= 10
        # The level read by hand through either handle, on the shared clock.
        assert 6 * pacer.UNITS_PER_TOKEN <= a.level_at() <= 10 * pacer.UNITS_PER_TOKEN
        assert 6.0 <= b.tokens() <= 10.0
        # A closed handle exports nothing (and is refused at registration);
        # the other handle still reads the bucket.
        a.close()
        assert scrape(first_registry) == {}
        with pytest.raises(ValueError, match="closed"):
            metrics.register(a, bucket="again", registry=CollectorRegistry())
        assert scrape(second_registry)["pacer_decisions_total"][1]  # b still exports
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------ fleet clients


def doc_bucket(wait_ms: int) -> int | None:
    """The non-cumulative bucket of a wait by docs/metrics.md: the first
    bound at or above it; None for an immediate admission or a wait above
    the last bound."""
    if wait_ms == 0:
        return None
    return next((i for i, bound in enumerate(DOC_BOUNDS_MS) if wait_ms <= bound), None)


def test_the_fleet_tally_buckets_waits_at_the_bounds() -> None:
    # The fleet client counts in Python: each bound belongs to its own
    # bucket, one ms above it to the next; 10001 ms to none.
    tally = _Tally()
    waits = [0, 1, 10, 11, 50, 51, 100, 101, 500, 501, 1000, 1001, 2500, 2501, 5000, 5001, 10000, 10001]
    for wait in waits:
        tally.decided(RedisAdmitted(wait, AdmitPath.PACED, False, None))
    c = tally.read()
    # (0, 10]: 1, 10; (10, 50]: 11, 50; ...; (5000, 10000]: 5001, 10000.
    assert c.wait_buckets == (2, 2, 2, 2, 2, 2, 2, 2)
    assert [doc_bucket(w) for w in waits].count(None) == 2  # 0 and 10001
    assert (c.admitted, c.admitted_after_wait, c.wait_ms_total) == (18, 17, sum(waits))


def test_the_fleet_tally_counts_each_kind_of_answer() -> None:
    tally = _Tally()
    booking = RedisBooking(RedisTicket(None, "k", "t"), 5)
    tally.decided(RedisAdmitted(0, AdmitPath.SHAPED, True, None, "local"))  # shaped, regressed, a fallback
    tally.decided(RedisAdmitted(20, AdmitPath.BOOKED, False, None))  # a redemption that admits
    tally.decided(RedisRefused(3000, 2, False, "closed"))  # refused by the closed policy
    tally.decided(RedisBooked(booking, 0, 2, False))  # booked
    tally.decided(RedisBooked(booking, 0, 2, False), redemption=True)  # a redemption's "not yet"
    tally.released(True), tally.released(False)
    tally.observed(pacer.Outcome.OPENED), tally.observed(pacer.Outcome.THROTTLED)
    assert tally.read() == pacer.FleetCounters(
        admitted=2, admitted_after_wait=1, refused=3, shaped=1, released=2, refunded=1, clock_regressions=1,
        booked=1, opened=1, throttled=1, wait_ms_total=20, redeemed=1, wait_buckets=(0, 1, 0, 0, 0, 0, 0, 0),
        fallbacks=2)


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    # Never skipped: scripts/test-python.sh installs redis-server (scripts/redis-deps.sh).
    assert REDIS_SERVER is not None, "redis-server is not installed: run scripts/redis-deps.sh"
    with RedisServer() as running:  # plain: the script engine
        yield running


@pytest.fixture
def flavor_run(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(the class, ``run``): ``run(x)`` is x itself for RedisPacer, the
    awaited x for AsyncRedisPacer (one event loop for the test)."""
    if request.param == "sync":
        yield RedisPacer, lambda x: x
        return
    loop = asyncio.new_event_loop()
    try:
        yield AsyncRedisPacer, loop.run_until_complete
    finally:
        loop.close()


@pytest.mark.parametrize("flavor_run", ["sync", "async"], indirect=True)
def test_a_fleet_client_counts_the_answers_it_got(server: RedisServer, flavor_run: tuple[Any, Any],
                                                  registry: CollectorRegistry,
                                                  request: pytest.FixtureRequest) -> None:
    cls, run = flavor_run
    key = f"pacer:metrics:{request.node.name}"
    fleet = cls(key=key, url=server.url, engine="script", **quiet(**CONFIG))
    try:
        # The server's clock moves between calls, so the waits are the
        # server's answers, read from them; the counting is checked against
        # them by docs/metrics.md's rules (doc_bucket).
        answers: list[tuple[str, Any]] = []
        # A fresh bucket: two admitted at once (burst 2) at any speed.
        first, second = run(fleet.reserve()), run(fleet.reserve())
        assert isinstance(first, RedisAdmitted) and isinstance(second, RedisAdmitted)
        assert (first.wait_ms, second.wait_ms, first.fallback) == (0, 0, None)
        answers += [("decision", first), ("decision", second)]
        # Reserves until one is refused (the debt past the 2000 ms bound).
        for _ in range(20):
            d = run(fleet.reserve())
            answers.append(("decision", d))
            if isinstance(d, RedisRefused):
                break
        else:
            raise AssertionError("20 reserves at 60/min were never refused")
        # Books (a wait past the bound, within the 8000 ms horizon).
        for _ in range(20):
            d = run(fleet.reserve_or_book(3))
            answers.append(("decision", d))
            if isinstance(d, RedisBooked):
                break
        else:
            raise AssertionError("20 reserve_or_book calls never booked")
        redemption = run(fleet.redeem(d.booking))
        answers.append(("redemption", redemption))
        # A release the server refunds; a second one is no call.
        assert run(first.release()) is True
        assert run(first.release()) is False
        assert run(fleet.observe("opened")) == 60 and run(fleet.observe("throttled")) == 60

        admitted = [a for _, a in answers if isinstance(a, Admitted)]
        waited = [a.wait_ms for a in admitted if a.wait_ms > 0]
        booked = [a for kind, a in answers if kind == "decision" and isinstance(a, RedisBooked)]
        refused = [a for _, a in answers if not isinstance(a, Admitted)]
        buckets = [0] * 8
        for wait in waited:
            if doc_bucket(wait) is not None:
                buckets[doc_bucket(wait)] += 1  # type: ignore[index]
        c = fleet.counters()
        assert c == pacer.FleetCounters(
            admitted=len(admitted), admitted_after_wait=len(waited), refused=len(refused),
            shaped=0, released=1, refunded=1, clock_regressions=sum(a.clock_regressed for _, a in answers),
            booked=len(booked), opened=1, throttled=1, wait_ms_total=sum(waited),
            redeemed=sum(a.path is AdmitPath.BOOKED for a in admitted), wait_buckets=tuple(buckets), fallbacks=0)
        assert len(booked) == 1 and len(admitted) >= 3 and c.refused >= 2

        metrics.register(fleet, bucket="fleet", registry=registry)
        families = scrape(registry)
        check_contract(families, {"fleet"}, fleet=True)  # no pacer_tokens, pacer_fallbacks_total there
        assert value(families, "pacer_decisions_total", "fleet", decision="admitted") == len(admitted) - len(waited)
        assert value(families, "pacer_decisions_total", "fleet", decision="waited") == len(waited)
        assert value(families, "pacer_decisions_total", "fleet", decision="refused") == len(refused) - 1
        assert value(families, "pacer_decisions_total", "fleet", decision="booked") == 1
        cumulative, running = [], len(admitted) - len(waited)
        for count in buckets:
            running += count
            cumulative.append(running)
        assert histogram(families, "fleet") == (cumulative + [len(admitted)], len(admitted), sum(waited) / 1000)
        assert value(families, "pacer_releases_total", "fleet", refunded="true") == 1
        assert value(families, "pacer_releases_total", "fleet", refunded="false") == 0
        assert value(families, "pacer_upstream_outcomes_total", "fleet", outcome="throttled") == 1
        assert value(families, "pacer_rate_in_force_per_minute", "fleet") == 60  # adaptation off
        assert value(families, "pacer_fallbacks_total", "fleet") == 0
    finally:
        metrics.unregister(fleet, registry=registry)
        result = fleet.close()
        if cls is AsyncRedisPacer:
            run(result)


@pytest.mark.parametrize("policy", ["open", "closed", "local"])
def test_a_fleet_client_counts_its_fallbacks(policy: str, registry: CollectorRegistry) -> None:
    # Nothing listens on the port: the first call fails (connection
    # refused), and every call within retry_after_ms is answered by the
    # policy without asking. open: admitted at once; closed: refused;
    # local: the fallback pacer (rate 60, burst 2 for a fleet of 1) admits
    # the first two at once. Three reserves, three fallbacks.
    fleet = RedisPacer(key="k", url=f"redis://127.0.0.1:{free_port()}/0", on_failure=policy,
                       retry_after_ms=3_600_000, **quiet(**CONFIG))
    try:
        answers = [fleet.reserve() for _ in range(3)]
        assert [a.fallback for a in answers] == [policy] * 3
        c = fleet.counters()
        assert c.fallbacks == 3
        # local: the third waits at most 1000 ms, within the 2000 ms bound.
        expected_admitted = {"open": 3, "closed": 0, "local": 3}[policy]
        assert c.admitted == expected_admitted and c.refused == 3 - expected_admitted
        if policy == "local":
            assert [a.wait_ms for a in answers[:2]] == [0, 0]  # the burst of 2
            # The local pacer's ticket: released there, refunded; a second
            # release of it is no call and counts nothing.
            assert answers[0].release() is True and answers[0].release() is False
            assert (fleet.counters().released, fleet.counters().refunded) == (1, 1)
        metrics.register(fleet, bucket="down", registry=registry)
        families = scrape(registry)
        check_contract(families, {"down"}, fleet=True)
        assert value(families, "pacer_fallbacks_total", "down") == 3
        # A closed fleet client exports nothing; a scrape never asks Redis.
        fleet.close()
        assert scrape(registry) == {}
    finally:
        fleet.close()


# ------------------------------------------------------------ several pacers, one registry


def test_several_buckets_on_one_registry(registry: CollectorRegistry, clock: FakeClock) -> None:
    # Each pacer under its own name; the label escaped by the library and
    # read back unchanged by its parser (quotes, a backslash, a newline,
    # non-ASCII).
    names = ["plain", 'a "quoted" \\ name\nwith a newline', "café ☕"]
    pacers = [pacer.Pacer(**quiet(**CONFIG), clock=clock) for _ in names]
    for count, (name, p) in enumerate(zip(names, pacers), start=1):
        for _ in range(count):
            p.reserve(0)  # the first two at once, the third after 1000 ms
        metrics.register(p, bucket=name, registry=registry)
    assert metrics.registered(registry) == dict(zip(names, pacers))
    families = scrape(registry)
    check_contract(families, set(names), fleet=False)
    assert [value(families, "pacer_decisions_total", n, decision="admitted") for n in names] == [1, 2, 2]
    assert [value(families, "pacer_decisions_total", n, decision="waited") for n in names] == [0, 0, 1]
    # Unregistering frees the name; the last one takes the collector off.
    assert metrics.unregister(pacers[0], registry=registry) is True
    assert metrics.unregister(pacers[0], registry=registry) is False
    assert set(families) == set(scrape(registry))
    assert {dict(labels)["bucket"] for _, labels in scrape(registry)["pacer_tokens"][1]} == set(names[1:])
    metrics.register(pacers[0], bucket=names[1] + " again", registry=registry)
    for p in pacers:
        assert metrics.unregister(p, registry=registry) is True
    assert generate_latest(registry) == b""
    assert metrics.registered(registry) == {}


def test_the_default_registry(clock: FakeClock) -> None:
    p = pacer.Pacer(**quiet(**CONFIG), clock=clock)
    metrics.register(p, bucket="default-registry-test")
    try:
        assert metrics.registered()["default-registry-test"] is p
        families = scrape(prometheus_client.REGISTRY)
        assert value(families, "pacer_rate_in_force_per_minute", "default-registry-test") == 60
    finally:
        assert metrics.unregister(p) is True


# ------------------------------------------------------------ bad input


def test_bad_input_is_refused_and_changes_nothing(registry: CollectorRegistry, clock: FakeClock) -> None:
    p = pacer.Pacer(**quiet(**CONFIG), clock=clock)
    other = pacer.Pacer(**quiet(**CONFIG), clock=clock)
    metrics.register(p, bucket="taken", registry=registry)
    before = generate_latest(registry)
    refused: list[tuple[type[Exception], str, Any]] = [
        (ValueError, "must not be empty", lambda: metrics.register(other, bucket="", registry=registry)),
        (ValueError, "lone surrogate at index 1",
         lambda: metrics.register(other, bucket="a\ud800b", registry=registry)),
        (TypeError, "bucket must be a str, got bytes",
         lambda: metrics.register(other, bucket=b"bytes", registry=registry)),
        (TypeError, "bucket must be a str", lambda: metrics.register(other, bucket=None, registry=registry)),
        (ValueError, "'taken' is registered already",
         lambda: metrics.register(other, bucket="taken", registry=registry)),
        (ValueError, "registered already on this registry, as the bucket 'taken'",
         lambda: metrics.register(p, bucket="elsewhere", registry=registry)),
        (TypeError, "registry must be a prometheus_client CollectorRegistry",
         lambda: metrics.register(other, bucket="x", registry="registry")),
        (TypeError, "register takes a Pacer", lambda: metrics.register(object(), bucket="x", registry=registry)),
        (TypeError, "registry must be", lambda: metrics.unregister(p, registry=None)),
    ]
    for error, message, call in refused:
        with pytest.raises(error, match=re.escape(message)):
            call()
    assert generate_latest(registry) == before
    assert metrics.registered(registry) == {"taken": p}
    assert metrics.unregister(other, registry=registry) is False


def test_a_clash_with_another_collector_is_the_registrys_error(clock: FakeClock) -> None:
    # Another metric named pacer_tokens on the registry: prometheus_client
    # refuses the collector, and nothing is kept.
    registry = CollectorRegistry()
    Gauge("pacer_tokens", "someone else's", registry=registry)
    p = pacer.Pacer(**quiet(**CONFIG), clock=clock)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        metrics.register(p, bucket="x", registry=registry)
    assert metrics.registered(registry) == {}
    assert metrics.unregister(p, registry=registry) is False


# ------------------------------------------------------------ the optional dependency


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                          cwd=tempfile.gettempdir())


def test_import_pacer_does_not_import_prometheus_client() -> None:
    done = python("import sys, pacer; print('prometheus_client' in sys.modules)")
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


def test_without_prometheus_client_one_clear_import_error() -> None:
    # None in sys.modules: the import of prometheus_client fails as if it
    # were not installed.
    done = python("import sys; sys.modules['prometheus_client'] = None; import pacer.metrics")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == ("ImportError: pacer: pacer.metrics needs prometheus_client, which is not installed; "
                         "install it with pip install 'connpacer[metrics]'")
    assert "During handling" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_a_fleet_clients_rate_is_the_last_the_server_answered(server: RedisServer,
                                                              request: pytest.FixtureRequest) -> None:
    # Adaptive, floor 10 (tests/test_redis.py derives it: with CONFIG's
    # budget the rate in force is clamped to [10, 60]; a throttle on a new
    # bucket pauses it at the lowest, 10, for the rest of its first
    # minute). A scrape never asks Redis: each client exports the rate the
    # server last answered it, the configured 60 until then.
    key = f"pacer:metrics:{request.node.name}"
    one = RedisPacer(key=key, url=server.url, engine="script", **quiet(**CONFIG, adaptive_floor_per_min=10))
    two = RedisPacer(key=key, url=server.url, engine="script", **quiet(**CONFIG, adaptive_floor_per_min=10))
    registry = CollectorRegistry()
    try:
        assert one.create() is True
        metrics.register(one, bucket="one", registry=registry)
        metrics.register(two, bucket="two", registry=registry)

        def rates() -> list[float]:
            families = scrape(registry)
            return [value(families, "pacer_rate_in_force_per_minute", b) for b in ("one", "two")]

        assert rates() == [60, 60]
        assert one.observe("throttled") == 10
        assert rates() == [10, 60]  # two was not told yet
        assert two.rate_in_force() == 10
        assert rates() == [10, 10]
        assert (one.counters().throttled, two.counters().throttled) == (1, 0)
    finally:
        one.close()
        two.close()
