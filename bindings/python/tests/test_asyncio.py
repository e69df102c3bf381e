"""Pacer.admit under asyncio: waiting, cancellation before, during and after
the wait, asyncio.timeout, refusals, release at most once.

The clock is injected; the sleep is either injected (a gate the test opens)
or the real asyncio.sleep with waits of a few ms, whose length is never
measured (only what was asked of it, and the order of events). Expected
waits come from SPEC §4/§7 by hand: at 60/minute one token refills in
1000 ms; at 600/minute in 100 ms."""

from __future__ import annotations

import asyncio
import sys

import pytest
from conftest import FakeClock, GateSleep, run

import pacer

# SPEC §7: rate 60, burst 1, bound 15000 (idle 3600000, 5 retries).
ONE_SLOT = {"rate_per_minute": 60, "burst": 1, "idle_timeout_ms": 3_600_000, "max_retries": 5}


def make(clock: FakeClock, registry: pacer.NoticeRegistry, **options) -> pacer.Pacer:
    return pacer.Pacer(clock=clock, notice_registry=registry, **{**ONE_SLOT, **options})


async def cancelled(task: asyncio.Task) -> BaseException:
    """Cancels ``task`` and waits for it to end: it must raise CancelledError,
    which is returned (its notes, if any, say what else went wrong)."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as caught:
        await task
    return caught.value


def check_counted(p: pacer.Pacer, now_ms: int, next_wait_ms: int, **counted: int) -> None:
    """``p``'s counters named in ``counted`` have those values, and a request
    reserving at ``now_ms`` now waits ``next_wait_ms``."""
    c = p.counters()
    assert {name: getattr(c, name) for name in counted} == counted
    assert p.reserve(now_ms).wait_ms == next_wait_ms


def test_admit_at_once_does_not_sleep(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    sleep = GateSleep()
    p = make(clock, registry, sleep=sleep)
    outcome = run(p.admit())
    assert isinstance(outcome, pacer.Admitted)
    assert (outcome.wait_ms, outcome.queued, outcome.path) == (0, False, pacer.AdmitPath.PACED)
    assert sleep.calls == []


def test_admit_sleeps_the_granted_wait(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        sleep = GateSleep()
        p = make(clock, registry, sleep=sleep)
        await p.admit()  # the one token
        task = asyncio.create_task(p.admit())
        await sleep.started.wait()
        assert sleep.calls == [1.0]  # 1000 ms for the next token at 60/minute
        assert not task.done()
        sleep.gate.set()
        outcome = await task
        assert isinstance(outcome, pacer.Admitted)
        assert (outcome.wait_ms, outcome.queued) == (1000, True)
        assert outcome.ticket is not None and not outcome.ticket.spent
        assert p.counters().released == 0

    run(main())


def test_cancel_before_the_task_runs_reserves_nothing(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        p = make(clock, registry, sleep=GateSleep())
        await cancelled(asyncio.create_task(p.admit()))
        # The token is still there: the next request is admitted at once.
        check_counted(p, clock.ms, 0, admitted=0, refused=0, released=0)

    run(main())


def test_cancel_during_the_wait_refunds_and_reraises(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        sleep = GateSleep()
        p = make(clock, registry, sleep=sleep)
        first = await p.admit()
        assert first.wait_ms == 0
        task = asyncio.create_task(p.admit())
        await sleep.started.wait()
        await cancelled(task)
        # SPEC §7: a queued request released at t=0 gives its slot back: the
        # next arrival waits 1000, not 2000.
        check_counted(p, clock.ms, 1000, admitted=2, released=1, refunded=1)

    run(main())


def test_cancel_after_the_wait_keeps_the_admission(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        sleep = GateSleep()
        sleep.gate.set()
        p = make(clock, registry, sleep=sleep)
        await p.admit()
        admitted: list[pacer.Admitted] = []

        async def request() -> None:
            outcome = await p.admit()
            assert isinstance(outcome, pacer.Admitted)
            admitted.append(outcome)
            await asyncio.Event().wait()  # the connection's work, cancelled below

        task = asyncio.create_task(request())
        while not admitted:
            await asyncio.sleep(0)
        await cancelled(task)
        # Admission was complete: nothing was given back on the caller's behalf.
        check_counted(p, clock.ms, 2000, released=0)
        # The caller still can: the ticket is live until released.
        assert admitted[0].release() is True
        assert admitted[0].release() is False

    run(main())


@pytest.mark.skipif(sys.version_info < (3, 11), reason="asyncio.timeout is new in 3.11")
def test_asyncio_timeout_refunds(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        p = make(clock, registry)  # the real asyncio.sleep
        await p.admit()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.005):
                await p.admit()  # granted 1000 ms; the timeout fires after 5
        check_counted(p, clock.ms, 1000, admitted=2, released=1, refunded=1)

    run(main())


def test_wait_for_timeout_refunds(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        p = make(clock, registry)
        await p.admit()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.admit(), 0.005)
        assert p.counters().refunded == 1

    run(main())


def test_real_sleep_of_a_few_ms(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        # 600/minute: one token per 100 ms. Take it at t=0, then ask at t=95:
        # 0.95 of a token is back, so the wait is ceil(0.05 · 100) = 5 ms.
        asked: list[float] = []

        async def real_sleep(seconds: float) -> None:
            asked.append(seconds)
            await asyncio.sleep(seconds)

        p = make(clock, registry, rate_per_minute=600, sleep=real_sleep)
        assert (await p.admit()).wait_ms == 0
        clock.advance(95)
        outcome = await p.admit()
        assert isinstance(outcome, pacer.Admitted) and outcome.wait_ms == 5
        assert asked == [0.005]

    run(main())


def test_refusal_is_returned_without_waiting(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        # SPEC §7: rate 60, burst 1, bound 2000 (idle 30000, 3 retries), 5 at
        # once: #0 now, #1 1000, #2 2000, #3 refused (required 3000, hint 2).
        sleep = GateSleep()
        sleep.gate.set()
        p = make(clock, registry, idle_timeout_ms=30_000, max_retries=3, sleep=sleep)
        waits = [(await p.admit()).wait_ms for _ in range(3)]
        assert waits == [0, 1000, 2000]
        outcome = await p.admit()
        assert outcome == pacer.Refused(required_wait_ms=3000, retry_after_s=2, clock_regressed=False)
        assert sleep.calls == [1.0, 2.0]
        status, headers, body = outcome.response()
        assert (status, headers["retry-after"]) == (200, "2")
        assert body.endswith(b'"retry_after_seconds":2}}\n\n')

    run(main())


def test_release_is_at_most_once(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        p = make(clock, registry, sleep=GateSleep())
        outcome = await p.admit()
        assert isinstance(outcome, pacer.Admitted)
        results = [outcome.release() for _ in range(3)]
        assert results == [True, False, False]
        c = p.counters()
        assert (c.released, c.refunded) == (1, 1)

    run(main())


def test_a_failing_sleep_refunds_and_propagates(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def broken_sleep(seconds: float) -> None:
        raise RuntimeError("timer broke")

    async def main() -> None:
        p = make(clock, registry, sleep=broken_sleep)
        await p.admit()
        with pytest.raises(RuntimeError, match="timer broke"):
            await p.admit()
        assert p.counters().refunded == 1

    run(main())


def test_a_failing_release_never_replaces_the_callers_cancellation(clock: FakeClock,
                                                                   registry: pacer.NoticeRegistry) -> None:
    # Cancelled during its wait, admit gives the slot back; if that fails (a
    # library fault, injected here as PACER_STATUS_PANIC from the C release),
    # the caller still sees its own CancelledError, with the failure noted
    # on it (Python 3.11+), not the fault in its place.
    async def main() -> None:
        sleep = GateSleep()
        p = make(clock, registry, sleep=sleep)
        await p.admit()
        p._c_release = lambda *args: pacer._lib.PACER_STATUS_PANIC
        task = asyncio.create_task(p.admit())
        await sleep.started.wait()
        error = await cancelled(task)
        if sys.version_info >= (3, 11):
            notes = getattr(error, "__notes__", [])
            assert len(notes) == 1 and notes[0].startswith("pacer: giving the admission back failed: "), notes
            assert "pacer_release failed with status 2" in notes[0]
        c = p.counters()
        assert (c.admitted, c.released) == (2, 0)
        # Nothing was refunded: two tokens taken from one at t = 0.
        state = p.state()
        assert (state.high_water_ms, state.tokens_units) == (0, -60_000)

    run(main())
