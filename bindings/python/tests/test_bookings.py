"""Bookings (SPEC §11): reserve_or_book, redeem, keyed admit/forget.

Every number is worked out by hand. At the defaults (rate 60/minute: one
token of 60000 units refills in 1000 ms, 60 units per ms; burst 10, so
600000 units at the start; idle 120000 ms, 5 retries):

* bound = floor((120000 − 2000·(2^5 − 1)) / (2·6)) = floor(58000 / 12) = 4833 ms;
* hint cap = floor(4833 / 1000) = 4 s;
* horizon with r retries left = 4833 + r·4·1000, so 24833 ms with 5.

Fourteen requests at t = 0 take the ten burst tokens (wait 0) and the next
four at 1000, 2000, 3000, 4000 ms (the last within the bound). The 15th
would wait 5000 ms: beyond the bound (refused by §4) but within the horizon,
so reserve_or_book books it at slot 5000 with hint
clamp(ceil((5000 − 4833)/1000), 1, 4) = 1.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import FakeClock, GateSleep, check_keyed_calls_refuse_bad_keys, run

import pacer

TOKEN = 60_000  # units per connection
START_UNITS = 10 * TOKEN  # burst 10, full at the start


def drained(clock: FakeClock, registry: pacer.NoticeRegistry, **options: Any) -> pacer.Pacer:
    """A default pacer after 14 requests at t = 0 (waits 0×10, 1000..4000)."""
    p = pacer.Pacer(clock=clock, notice_registry=registry, **options)
    waits = []
    for _ in range(14):
        outcome = p.reserve(0)
        assert isinstance(outcome, pacer.Admitted)
        waits.append(outcome.wait_ms)
    assert waits == [0] * 10 + [1000, 2000, 3000, 4000]
    return p


# ---------------------------------------------------------------- reserve_or_book


def test_books_a_place_in_line_up_to_the_horizon(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    assert (p.wait_bound_ms, p.mode) == (4833, pacer.Mode.REFUSING)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    assert (booked.required_wait_ms, booked.retry_after_s, booked.clock_regressed) == (5000, 1, False)
    booking = booked.booking
    assert isinstance(booking, pacer.Booking)
    assert booking.slot_ms == 5000
    assert isinstance(booking.ticket, pacer.Ticket)
    assert booking.ticket.debit_units == TOKEN
    assert not booking.spent and not booking.ticket.spent
    # 14 admitted debits and one booked: 600000 − 15·60000.
    assert p.state().tokens_units == START_UNITS - 15 * TOKEN == -300_000

    # Each further booking lines up 1000 ms behind the last; hints by hand:
    # 6000 → ceil(1.167) = 2, 7000 → 3, 8000 → 4, then the cap of 4.
    expected_hints = {6000: 2, 7000: 3, 8000: 4, **{slot: 4 for slot in range(9000, 24001, 1000)}}
    for slot in range(6000, 24001, 1000):
        b = p.reserve_or_book(0, 5)
        assert isinstance(b, pacer.Booked), slot
        assert (b.booking.slot_ms, b.required_wait_ms, b.retry_after_s) == (slot, slot, expected_hints[slot])

    # 25000 > 24833: a plain refusal with the cap as hint; nothing debited.
    before = p.state()
    assert p.reserve_or_book(0, 5) == pacer.Refused(25000, 4, False)
    assert p.state() == before
    # No retries left: the horizon is the bound.
    assert p.reserve_or_book(0, 0) == pacer.Refused(25000, 4, False)
    assert p.state() == before


def test_no_retries_left_is_a_plain_refusal(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    before = p.state()
    # 5000 > horizon(0) = 4833: refused as by reserve, nothing debited.
    assert p.reserve_or_book(0, 0) == pacer.Refused(5000, 4, False)
    assert p.state() == before
    # One retry left: horizon 4833 + 4000 = 8833 ≥ 5000, booked.
    assert isinstance(p.reserve_or_book(0, 1), pacer.Booked)


def test_admits_like_reserve_when_there_is_room(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = pacer.Pacer(clock=clock, notice_registry=registry)
    first = p.reserve_or_book(0, 5)
    assert isinstance(first, pacer.Admitted)
    assert (first.wait_ms, first.path, first.ticket is not None) == (0, pacer.AdmitPath.PACED, True)
    off = pacer.Pacer(rate_per_minute=0, clock=clock, notice_registry=registry)
    disabled = off.reserve_or_book(0, 5)
    assert disabled == pacer.Admitted(0, pacer.AdmitPath.DISABLED, False, None)


def test_booked_answers_like_a_refusal(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    assert booked.response() == pacer.refusal_response(1)
    assert booked.response().headers["retry-after"] == "1"


def test_a_booking_is_released_at_most_once(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    assert booked.booking.release(0) is True
    assert booked.booking.spent
    assert booked.booking.release(0) is False
    assert p.release(booked.booking.ticket, 0) is False
    # The token came back: the next booking takes slot 5000 again.
    again = p.reserve_or_book(0, 5)
    assert isinstance(again, pacer.Booked) and again.booking.slot_ms == 5000
    with pytest.raises(ValueError, match="redeemed or released already"):
        p.redeem(booked.booking, 167)
    # Only the first release reached the core; the others stopped at the spent ticket.
    c = p.counters()
    assert (c.released, c.refunded) == (1, 1)


# ---------------------------------------------------------------- redeem


def test_redeem_not_yet_then_admitted_pure_and_once(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    booking = booked.booking
    state = p.state()
    # At 0 the slot is 5000 away, 167 beyond the bound: hint 1, same booking.
    not_yet = p.redeem(booking, 0)
    assert not_yet == pacer.Booked(booking, 5000, 1, False)
    assert not_yet.booking is booking and not booking.spent
    # At 167 the slot is exactly the bound away: admitted after 4833.
    admitted = p.redeem(booking, 167)
    assert isinstance(admitted, pacer.Admitted)
    assert (admitted.wait_ms, admitted.queued, admitted.path, admitted.clock_regressed) == (
        4833, True, pacer.AdmitPath.BOOKED, False)
    assert p.state() == state  # redeem changes nothing in the pacer
    # The ticket moved into the admission.
    assert booking.spent and booking.ticket.spent
    assert admitted.ticket is not None and admitted.ticket.debit_units == TOKEN
    assert not admitted.ticket.spent
    with pytest.raises(ValueError, match="redeemed or released already"):
        p.redeem(booking, 200)
    assert booking.release(200) is False
    assert admitted.release(200) is True
    assert admitted.release(200) is False
    # Counters by hand: 14 admitted (4 after a wait); the booking and the
    # not-yet count as refusals; the redemption as an admission after a wait.
    c = p.counters()
    assert (c.admitted, c.admitted_after_wait, c.refused, c.released, c.refunded) == (15, 5, 2, 1, 1)


def test_redeem_past_the_slot_waits_nothing(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    admitted = p.redeem(booked.booking, 6000)
    assert isinstance(admitted, pacer.Admitted)
    assert (admitted.wait_ms, admitted.queued, admitted.path) == (0, False, pacer.AdmitPath.BOOKED)


def test_redeem_hint_counts_down(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    for _ in range(5000, 12001, 1000):
        last = p.reserve_or_book(0, 5)
    assert isinstance(last, pacer.Booked) and last.booking.slot_ms == 12000
    # 12000 − 4833 − now beyond the bound: 7167 → cap 4; at 4000: 3167 → 4;
    # at 5000: 2167 → 3; at 7000: 167 → 1; at 7167: admitted after 4833.
    for now, hint in ((0, 4), (4000, 4), (5000, 3), (7000, 1)):
        assert p.redeem(last.booking, now) == pacer.Booked(last.booking, 12000 - now, hint, False)
    admitted = p.redeem(last.booking, 7167)
    assert isinstance(admitted, pacer.Admitted) and admitted.wait_ms == 4833


def test_concurrent_redeems_take_the_booking_once(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    results: list[object] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def worker(index: int) -> None:
        start.wait()
        try:
            if index % 2:
                outcome: object = p.redeem(booked.booking, 1000)
            else:
                outcome = booked.booking.release(1000)
        except ValueError as error:
            outcome = error
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [r for r in results if isinstance(r, pacer.Admitted) or r is True]
    assert len(taken) == 1
    assert all(isinstance(r, ValueError) or r is False for r in results if r not in taken)


# ---------------------------------------------------------------- keyed admit


def test_keyed_admit_redeems_on_the_retry(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        sleep = GateSleep()
        p = drained(clock, registry, sleep=sleep)
        assert await p.admit(key="a") == pacer.Refused(5000, 1, False)
        assert await p.admit(key="b") == pacer.Refused(6000, 2, False)
        assert p.pending_keys == 2
        # a retries too early: refused again with the same slot, nothing debited.
        tokens = p.state().tokens_units
        assert tokens == START_UNITS - 16 * TOKEN
        assert await p.admit(key="a") == pacer.Refused(5000, 1, False)
        assert p.state().tokens_units == tokens
        assert sleep.calls == []
        # After its 1 s hint: 4000 to the slot, within the bound.
        clock.advance(1000)
        task = asyncio.create_task(p.admit(key="a"))
        await sleep.started.wait()
        assert sleep.calls == [4.0]
        sleep.gate.set()
        outcome = await task
        assert isinstance(outcome, pacer.Admitted)
        assert (outcome.wait_ms, outcome.path) == (4000, pacer.AdmitPath.BOOKED)
        assert p.pending_keys == 1
        # b gives up: forgetting it refunds its token, once.
        assert p.forget("b") is True
        assert p.forget("b") is False
        assert p.pending_keys == 0

    run(main())


def test_keyed_cancel_during_a_redeemed_wait_refunds(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    async def main() -> None:
        sleep = GateSleep()
        p = drained(clock, registry, sleep=sleep)
        assert await p.admit(key="k") == pacer.Refused(5000, 1, False)
        assert p.state().tokens_units == START_UNITS - 15 * TOKEN == -300_000
        clock.advance(1000)
        task = asyncio.create_task(p.admit(key="k"))
        await sleep.started.wait()
        assert sleep.calls == [4.0]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The booked token came back at 1000, with 1000 ms of refill (60 units/ms).
        state = p.state()
        assert (state.high_water_ms, state.tokens_units) == (1000, -300_000 + TOKEN + 1000 * 60)
        c = p.counters()
        assert (c.released, c.refunded) == (1, 1)
        assert p.pending_keys == 0
        assert p.forget("k") is False

    run(main())


def test_keyed_retries_count_down(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    # Rate 60, burst 1, idle 30000, 3 retries: bound
    # floor((30000 − 2000·7) / 8) = 2000, cap 2 s, horizon 2000 + r·2000.
    async def main() -> None:
        p = pacer.Pacer(rate_per_minute=60, burst=1, idle_timeout_ms=30000, max_retries=3,
                        clock=clock, sleep=GateSleep(), notice_registry=registry)
        assert (p.wait_bound_ms, p.config.max_retries) == (2000, 3)
        assert [p.reserve(0).wait_ms for _ in range(3)] == [0, 1000, 2000]  # type: ignore[union-attr]
        held = []
        for slot in range(3000, 8001, 1000):
            b = p.reserve_or_book(0, 3)
            assert isinstance(b, pacer.Booked) and b.booking.slot_ms == slot
            held.append(b.booking)
        # y's first attempt, 3 retries left: 9000 > horizon 8000, refused, nothing held.
        assert await p.admit(key="y") == pacer.Refused(9000, 2, False)
        # The slot-8000 booking goes back: the next wait is 8000 again.
        assert held.pop().release(0) is True
        tokens = p.state().tokens_units
        # y has 2 retries left now: horizon 6000 < 8000, refused, nothing debited.
        assert await p.admit(key="y") == pacer.Refused(8000, 2, False)
        assert p.state().tokens_units == tokens
        # A fresh key has all 3: horizon 8000, booked (hint ceil(6000/1000) → cap 2).
        assert await p.admit(key="z") == pacer.Refused(8000, 2, False)
        assert p.state().tokens_units == tokens - TOKEN
        assert p.pending_keys == 2
        # Past its retries y keeps getting plain refusals (0 left, horizon 2000).
        for _ in range(4):
            assert await p.admit(key="y") == pacer.Refused(9000, 2, False)
        assert p.forget("y") is False  # nothing booked, nothing to refund
        assert p.forget("z") is True
        assert p.pending_keys == 0

    run(main())


def test_keyed_admit_blocking(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    assert p.admit_blocking(key=b"a") == pacer.Refused(5000, 1, False)
    assert p.admit_blocking(key=7) == pacer.Refused(6000, 2, False)
    assert p.pending_keys == 2
    # At 4990, a's slot is 10 ms away: a real 10 ms sleep.
    clock.ms = 4990
    outcome = p.admit_blocking(timeout=5, key=b"a")
    assert isinstance(outcome, pacer.Admitted)
    assert (outcome.wait_ms, outcome.path) == (10, pacer.AdmitPath.BOOKED)
    # 7's slot is 1010 ms away, longer than the timeout: refunded, TimeoutError.
    with pytest.raises(TimeoutError):
        p.admit_blocking(timeout=0.5, key=7)
    c = p.counters()
    assert (c.released, c.refunded) == (1, 1)
    assert p.pending_keys == 0
    assert p.forget(7) is False


def test_keys_are_distinct_by_value(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    assert p.admit_blocking(key="1") == pacer.Refused(5000, 1, False)
    assert p.admit_blocking(key=1) == pacer.Refused(6000, 2, False)
    assert p.admit_blocking(key=b"1") == pacer.Refused(7000, 3, False)
    assert p.admit_blocking(key="1") == pacer.Refused(5000, 1, False)  # its own booking again
    assert p.pending_keys == 3
    assert [p.forget(k) for k in ("1", 1, b"1")] == [True, True, True]


# ---------------------------------------------------------------- bad input


def test_bad_input_raises_and_changes_nothing(clock: FakeClock, registry: pacer.NoticeRegistry) -> None:
    p = drained(clock, registry)
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked)
    state, counters = p.state(), p.counters()

    with pytest.raises(ValueError, match="now_ms"):
        p.reserve_or_book(-1, 5)
    with pytest.raises(ValueError, match="now_ms"):
        p.reserve_or_book(2**64, 5)
    with pytest.raises(TypeError, match="now_ms"):
        p.reserve_or_book("0", 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retries_left"):
        p.reserve_or_book(0, 1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retries_left"):
        p.reserve_or_book(0, True)
    with pytest.raises(TypeError, match="retries_left"):
        p.reserve_or_book(0, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retries_left"):
        p.reserve_or_book(0, -1)
    with pytest.raises(ValueError, match="retries_left"):
        p.reserve_or_book(0, 2**32)

    with pytest.raises(TypeError, match="booking"):
        p.redeem(object(), 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="booking"):
        p.redeem(booked.booking.ticket, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="booking"):
        p.redeem(booked, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now_ms"):
        p.redeem(booked.booking, -1)
    with pytest.raises(TypeError, match="now_ms"):
        p.redeem(booked.booking, 167.0)  # type: ignore[arg-type]

    check_keyed_calls_refuse_bad_keys(p)
    with pytest.raises(ValueError, match="now_ms"):
        p.forget("k", -1)

    # A booking of another pacer is not this pacer's to redeem or release.
    other = drained(FakeClock(), registry)
    foreign = other.reserve_or_book(0, 5)
    assert isinstance(foreign, pacer.Booked)
    other_state = other.state()
    with pytest.raises(ValueError, match="another pacer"):
        p.redeem(foreign.booking, 167)
    assert p.release(foreign.booking.ticket, 0) is False
    assert not foreign.booking.spent
    assert other.state() == other_state

    assert p.state() == state
    assert p.counters() == counters
    assert p.pending_keys == 0
    assert not booked.booking.spent
