"""The C ``reserve`` (pacer._fast): its answers are the package's own
``Admitted``/``Refused``/``Ticket`` objects, with everything those classes
promise; its arguments are checked as a Python method's would be; it holds
no references it should not. Expected values are worked out by hand from
SPEC §4 (rate 60/min: one token per 1000 ms; wait bound 15000 ms for a
one-hour idle timeout)."""

from __future__ import annotations

import dataclasses
import gc
import math
import sys

import pytest
from conftest import FakeClock

import pacer
from pacer import _fast


def fresh(registry: pacer.NoticeRegistry) -> pacer.Pacer:
    return pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=FakeClock(0), notice_registry=registry)


def test_admitted_is_the_dataclass(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    first = p.reserve(0)
    assert type(first) is pacer.Admitted
    assert (first.wait_ms, first.path, first.clock_regressed) == (0, pacer.AdmitPath.PACED, False)
    assert type(first.ticket) is pacer.Ticket
    assert first.ticket.debit_units == 60000 and not first.ticket.spent
    # Equality and hashing are the dataclass's (the ticket compares by identity).
    assert first == pacer.Admitted(0, pacer.AdmitPath.PACED, False, first.ticket)
    assert hash(first) == hash(pacer.Admitted(0, pacer.AdmitPath.PACED, False, first.ticket))
    assert [f.name for f in dataclasses.fields(first)] == ["wait_ms", "path", "clock_regressed", "ticket"]
    assert dataclasses.replace(first, wait_ms=7).wait_ms == 7
    assert repr(first).startswith("Admitted(wait_ms=0, path=<AdmitPath.PACED: 'paced'>, clock_regressed=False, ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.wait_ms = 5  # type: ignore[misc]
    second = p.reserve(0)
    assert isinstance(second, pacer.Admitted) and second.wait_ms == 1000 and second.queued


def test_refused_is_the_dataclass(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    # 1 token, then 15 more at 1000 ms each within the 15000 ms bound.
    waits = [p.reserve(0).wait_ms for _ in range(16)]
    assert waits == [1000 * i for i in range(16)]
    refused = p.reserve(0)
    assert type(refused) is pacer.Refused
    # The 17th would wait 16000 ms; the hint is capped at 15 s.
    assert refused == pacer.Refused(required_wait_ms=16000, retry_after_s=15, clock_regressed=False)
    assert hash(refused) == hash(pacer.Refused(16000, 15, False))
    with pytest.raises(dataclasses.FrozenInstanceError):
        refused.retry_after_s = 1  # type: ignore[misc]


def test_ticket_from_c_releases_once(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    admission = p.reserve(0)
    assert isinstance(admission, pacer.Admitted) and admission.ticket is not None
    assert admission.release(0) is True
    assert admission.ticket.spent
    assert admission.release(0) is False
    assert p.counters().refunded == 1
    assert p.reserve(0).wait_ms == 0  # the refunded token is back


def test_clock_regressed_from_c(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    p.reserve(5000)
    later = p.reserve(4000)
    assert isinstance(later, pacer.Admitted) and later.clock_regressed and later.wait_ms == 1000


def test_reserve_by_keyword(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    assert p.reserve(now_ms=0).wait_ms == 0
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'now_ms'"):
        p.reserve()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'now'"):
        p.reserve(now=0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'now_ms'"):
        p.reserve(0, now_ms=0)  # type: ignore[misc]
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        p.reserve(0, 0)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="now_ms"):
        p.reserve(now_ms=1.5)  # type: ignore[arg-type]
    assert p.counters().admitted == 1


def test_int_subclass_takes_the_checked_path(registry: pacer.NoticeRegistry) -> None:
    class Millis(int):
        pass

    p = fresh(registry)
    assert p.reserve(Millis(0)).wait_ms == 0
    assert p.reserve(Millis(500)).wait_ms == 500  # one token per 1000 ms: the next one is 500 ms away
    with pytest.raises(ValueError, match="now_ms"):
        p.reserve(Millis(-1))


def test_no_references_kept(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    path = pacer.AdmitPath.PACED
    p.reserve(0)
    gc.collect()
    pacer_refs, path_refs = sys.getrefcount(p), sys.getrefcount(path)
    blocks = sys.getallocatedblocks()
    for step in range(1, 2001):
        admission = p.reserve(step * 1000)  # a token a second: each admits at once, with a ticket
        assert isinstance(admission, pacer.Admitted) and admission.ticket is not None
        admission.release(step * 1000)
        p.reserve(step * 1000 - 1000)  # behind the clock: refused or admitted, then dropped
    del admission
    gc.collect()
    assert sys.getrefcount(p) == pacer_refs
    assert sys.getrefcount(path) == path_refs
    # 4000 decisions and 2000 releases later, nothing was left allocated
    # (a margin for the interpreter's own caches).
    assert sys.getallocatedblocks() - blocks < 200


def test_fast_module_guards() -> None:
    with pytest.raises(RuntimeError, match="called already"):
        _fast.setup(pacer.Admitted, pacer.Refused, {}, pacer.PacerError, int, int)
    p = pacer.Pacer(clock=FakeClock(0))
    with pytest.raises(RuntimeError, match="bound already"):
        p._bind(None, 16, 16)
    assert _fast.noop() is None


def test_unbound_pacer_reserves_through_its_calls(registry: pacer.NoticeRegistry) -> None:
    # A pacer object that was never set up (no storage) is not bound: the C
    # reserve hands over to _reserve_calls, which needs the calls it lacks.
    bare = pacer.Pacer.__new__(pacer.Pacer)
    with pytest.raises(AttributeError):
        bare.reserve(0)


@pytest.mark.parametrize(
    ("reading", "ms"),
    [
        (0, 0),
        (3, 3000),
        (0.0, 0),
        (-0.0, 0),
        (1.001, 1001),  # 1000.999… ms in binary: rounded to the microsecond first
        (2.9999999, 3000),  # 2999999.9 µs rounds to 3000000 µs
        (0.0004994, 0),  # 499.4 µs
        (12345.678, 12345678),
        (2**40, 2**40 * 1000),
    ],
    ids=repr,
)
def test_clock_ms_in_c(reading: float, ms: int) -> None:
    got = _fast.clock_ms(lambda: reading)
    assert type(got) is int and got == ms


@pytest.mark.parametrize(
    ("reading", "error"),
    [(True, TypeError), ("1", TypeError), (None, TypeError), (-1, ValueError), (-1e-7, ValueError),
     (math.nan, ValueError), (math.inf, ValueError), (1e300, ValueError), (2**64, ValueError)],
    ids=repr,
)
def test_clock_ms_in_c_bad_readings(reading: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="clock"):
        _fast.clock_ms(lambda: reading)


def test_clock_ms_reads_the_clock_once() -> None:
    class Seconds(int):  # not an exact int: converted by the Python check
        pass

    calls = []

    def clock() -> int:
        calls.append(1)
        return Seconds(7)

    assert _fast.clock_ms(clock) == 7000
    assert len(calls) == 1
    with pytest.raises(ZeroDivisionError):
        _fast.clock_ms(lambda: 1 / 0)


def test_pacer_clock_goes_through_c(registry: pacer.NoticeRegistry) -> None:
    clock = FakeClock(0)
    p = pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=clock, notice_registry=registry)
    clock.advance(1234)
    assert p.now_ms() == 1234


def test_tickets_carry_the_owner_tag(registry: pacer.NoticeRegistry) -> None:
    # ABI 2: a C ticket names the pacer that issued it (a nonzero owner tag),
    # and a release rebuilds the C ticket with it, or the library refuses
    # it (PACER_STATUS_FOREIGN_TICKET, 27), changing nothing.
    p = fresh(registry)
    admission = p.reserve(0)
    assert isinstance(admission, pacer.Admitted) and admission.ticket is not None
    ticket = admission.ticket
    assert ticket._owner != 0
    # Tickets made through the cffi path carry it too: admitted by
    # reserve_or_book (the 2nd token, 1000 ms out), and booked once the
    # bound (15000 ms) is full: the 17th would wait 16000 ms.
    second = p.reserve_or_book(0, 5)
    assert isinstance(second, pacer.Admitted) and second.ticket is not None
    assert second.ticket._owner == ticket._owner
    assert [p.reserve(0).wait_ms for _ in range(14)] == [1000 * k for k in range(2, 16)]  # type: ignore[union-attr]
    booked = p.reserve_or_book(0, 5)
    assert isinstance(booked, pacer.Booked) and booked.booking.ticket._owner == ticket._owner
    # A ticket rebuilt with another tag is foreign to this pacer.
    forged = pacer.Ticket(p, ticket._seq, ticket._debit_units, ticket._owner ^ 1)
    assert forged._owner == ticket._owner ^ 1
    with pytest.raises(pacer.PacerError, match="status 27"):
        p.release(forged, 0)
    assert not forged.spent and p.counters().released == 0
    assert admission.release(0) is True
    with pytest.raises(ValueError, match="owner"):
        pacer.Ticket(p, 1, 1, 2**32)
