"""Threads: many threads reserving on one pacer never over-admit (SPEC
§6.1), concurrent releases of one admission refund once, and
admit_blocking.

Expected counts by hand from SPEC §3/§4 (one token = 1 connection; a
shared fixed clock, so nothing refills):

* defaults (rate 60, burst 10, idle 120000, 5 retries): bound 4833 ms,
  max_debt = 4833·60/60000 = 4.833 tokens. The burst gives 10 at wait 0;
  then the k-th extra waits k·1000 ms while k·1000 <= 4833, so k = 1..4:
  14 admitted (SPEC §7: #14 is the first refused). §6.1 with W = 0 caps
  admissions at burst + max_debt + 1 = 15.833, so at most 15.
* rate 600, burst 1000, same idle: one token per 100 ms, max_debt =
  4833·600/60000 = 48.33; the k-th extra waits k·100 <= 4833, k = 1..48:
  1048 admitted, at most floor(1000 + 48.33 + 1) = 1049 by §6.1, each wait
  a distinct slot (SPEC §4: distinct slots, floor(60000/600) = 100 ms apart).
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from conftest import FakeClock

import pacer

THREADS = 8


def hammer(p: pacer.Pacer, now_ms: int, calls_per_thread: int) -> list[pacer.Decision]:
    barrier = threading.Barrier(THREADS)
    results: list[list[pacer.Decision]] = [[] for _ in range(THREADS)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait()
            out = results[index]
            for _ in range(calls_per_thread):
                out.append(p.reserve(now_ms))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    return [d for r in results for d in r]


def test_defaults_admit_exactly_fourteen(registry: pacer.NoticeRegistry) -> None:
    p = pacer.Pacer(clock=FakeClock(0), notice_registry=registry)
    decisions = hammer(p, 0, 2000)
    admitted = [d for d in decisions if isinstance(d, pacer.Admitted)]
    assert len(admitted) <= 15  # SPEC §6.1 bound
    assert len(admitted) == 14
    assert sorted(d.wait_ms for d in admitted) == [0] * 10 + [1000, 2000, 3000, 4000]
    refused = [d for d in decisions if isinstance(d, pacer.Refused)]
    assert len(refused) == THREADS * 2000 - 14
    # Each refusal saw the same state: 4 tokens owed, the 5th needs 5000 ms, hint 4.
    assert {(r.required_wait_ms, r.retry_after_s) for r in refused} == {(5000, 4)}
    c = p.counters()
    assert (c.admitted, c.refused) == (14, THREADS * 2000 - 14)


def test_large_burst_distinct_slots(registry: pacer.NoticeRegistry) -> None:
    p = pacer.Pacer(rate_per_minute=600, burst=1000, clock=FakeClock(0), notice_registry=registry)
    decisions = hammer(p, 0, 500)
    admitted = [d for d in decisions if isinstance(d, pacer.Admitted)]
    assert len(admitted) <= 1049  # SPEC §6.1 bound
    assert len(admitted) == 1048
    waits = Counter(d.wait_ms for d in admitted)
    assert waits == Counter({0: 1000, **{100 * k: 1 for k in range(1, 49)}})
    assert all(d.ticket is not None for d in admitted)


def test_concurrent_release_of_one_admission_refunds_once(registry: pacer.NoticeRegistry) -> None:
    clock = FakeClock(0)
    p = pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=clock, notice_registry=registry)
    for _ in range(50):
        p.reserve(0)  # keep the bucket in debt so a refund is never capped away
        admission = p.reserve(0)
        if not isinstance(admission, pacer.Admitted):
            break
        barrier = threading.Barrier(THREADS)
        outcomes: list[bool] = []

        def release(a: pacer.Admitted = admission, start: threading.Barrier = barrier,
                    out: list[bool] = outcomes) -> None:
            start.wait()
            out.append(a.release())

        threads = [threading.Thread(target=release) for _ in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(outcomes) == [False] * (THREADS - 1) + [True]
    c = p.counters()
    assert c.released == c.refunded > 0


def test_reserve_and_release_across_threads_keep_the_bound(registry: pacer.NoticeRegistry) -> None:
    # Refund policy, fixed clock: every release gives back what it took, so
    # with each thread releasing all it got, the pacer ends where it began:
    # the full burst of 10 is available and nothing is owed.
    p = pacer.Pacer(clock=FakeClock(0), notice_registry=registry)
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            for _ in range(500):
                d = p.reserve(0)
                if isinstance(d, pacer.Admitted):
                    assert d.release(0) is True
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert p.state().tokens_units == 10 * 60_000
    assert [p.reserve(0).wait_ms for _ in range(10)] == [0] * 10


# ---------------------------------------------------------------- admit_blocking


def test_admit_blocking_sleeps_a_few_ms(registry: pacer.NoticeRegistry) -> None:
    clock = FakeClock(0)
    p = pacer.Pacer(rate_per_minute=600, burst=1, clock=clock, notice_registry=registry)
    assert p.admit_blocking().wait_ms == 0
    clock.advance(97)  # 0.97 of a token back: wait ceil(0.03 · 100) = 3 ms
    outcome = p.admit_blocking(timeout=1)  # the real time.sleep, 3 ms
    assert isinstance(outcome, pacer.Admitted) and outcome.wait_ms == 3


class Interrupted(BaseException):
    """Stands for a KeyboardInterrupt raised in admit_blocking's sleep."""


def test_admit_blocking_interrupted_gives_the_slot_back(registry: pacer.NoticeRegistry,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[float] = []

    def interrupted_sleep(seconds: float) -> None:
        asked.append(seconds)
        raise Interrupted()

    monkeypatch.setattr(pacer._pacer, "_blocking_sleep", interrupted_sleep)
    p = pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=FakeClock(0), notice_registry=registry)
    assert p.admit_blocking().wait_ms == 0  # the one token: no sleep
    with pytest.raises(Interrupted):
        p.admit_blocking()  # granted 1000 ms, interrupted in the sleep
    assert asked == [1.0]
    c = p.counters()
    assert (c.admitted, c.released, c.refunded) == (2, 1, 1)
    # SPEC §7: the slot came back; the next arrival waits 1000, not 2000.
    assert p.reserve(0).wait_ms == 1000

    # A release that fails (a library fault) never replaces the interruption.
    p._c_release = lambda *args: pacer._lib.PACER_STATUS_PANIC
    with pytest.raises(Interrupted):
        p.admit_blocking()


def test_admit_blocking_timeout_refunds_at_once(registry: pacer.NoticeRegistry) -> None:
    p = pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=FakeClock(0), notice_registry=registry)
    p.admit_blocking()
    with pytest.raises(TimeoutError):
        p.admit_blocking(timeout=0.5)  # the wait would be 1000 ms
    c = p.counters()
    assert (c.admitted, c.released, c.refunded) == (2, 1, 1)
    assert p.reserve(0).wait_ms == 1000


def test_admit_blocking_refusal(registry: pacer.NoticeRegistry) -> None:
    # SPEC §7: rate 60, burst 1, bound 2000: #3 refused (3000, hint 2).
    p = pacer.Pacer(burst=1, idle_timeout_ms=30_000, max_retries=3, clock=FakeClock(0), notice_registry=registry)
    for _ in range(3):
        p.reserve(0)
    assert p.admit_blocking(timeout=0) == pacer.Refused(3000, 2, False)


def test_release_at_the_debt_floor_refunds_the_fraction_debited(registry: pacer.NoticeRegistry) -> None:
    """SPEC §4 and §13, by hand: rate 60, burst 1, idle 9667, no retries:
    bound 9667/2 = 4833 ms, shaping, a floor of 4.833 tokens of debt. Six
    at t=0 wait 0, 1000 … 4000, then the sixth debits the 0.833 left above
    the floor and waits the bound. At 4833 the bucket is back at 0; its
    release adds 0.833, so by 4900 it holds 0.9 and the next waits 100 ms
    (a whole token refunded would admit it at once)."""
    p = pacer.Pacer(rate_per_minute=60, burst=1, idle_timeout_ms=9667, max_retries=0,
                    clock=FakeClock(0), notice_registry=registry)
    decisions = [p.reserve(0) for _ in range(6)]
    assert all(isinstance(d, pacer.Admitted) for d in decisions)
    assert [(d.wait_ms, d.queued) for d in decisions] == [  # type: ignore[union-attr]
        (0, False), (1000, True), (2000, True), (3000, True), (4000, True), (4833, True)]
    sixth = decisions[5]
    assert isinstance(sixth, pacer.Admitted)
    assert sixth.release(4833) is True
    assert sixth.release(4833) is False
    after = p.reserve(4900)
    assert isinstance(after, pacer.Admitted)
    assert (after.wait_ms, after.queued) == (100, True)
