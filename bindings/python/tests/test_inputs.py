"""Bad input raises and changes nothing: a wrong type (bool, float, str,
None where an int is needed) is a TypeError; an out-of-range value
(negative, past u64/u32, past the limits, NaN/inf) a ValueError naming the
field."""

from __future__ import annotations

import math

import pytest
from conftest import FakeClock

import pacer

U64_MAX = 2**64 - 1
WRONG_TYPES = [True, False, 1.0, 0.5, "5", b"5", None, [1], 10**0 * 1j]
OUT_OF_RANGE_U64 = [-1, U64_MAX + 1, 2**100]


def fresh(registry: pacer.NoticeRegistry, **options) -> pacer.Pacer:
    return pacer.Pacer(burst=1, idle_timeout_ms=3_600_000, clock=FakeClock(0), notice_registry=registry, **options)


@pytest.mark.parametrize("value", WRONG_TYPES, ids=repr)
def test_reserve_wrong_type(value: object, registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    with pytest.raises(TypeError, match="now_ms"):
        p.reserve(value)  # type: ignore[arg-type]
    assert p.counters().admitted == 0
    assert p.reserve(0).wait_ms == 0  # the one token is still there


@pytest.mark.parametrize("value", OUT_OF_RANGE_U64)
def test_reserve_out_of_range(value: int, registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    with pytest.raises(ValueError, match="now_ms"):
        p.reserve(value)
    assert p.counters().admitted == 0
    assert p.reserve(0).wait_ms == 0


def test_reserve_accepts_the_u64_range(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    assert p.reserve(U64_MAX).wait_ms == 0
    # Behind the high-water mark: treated as it (SPEC §5), flagged.
    later = p.reserve(0)
    assert isinstance(later, pacer.Admitted) and later.clock_regressed and later.wait_ms == 1000


def test_reserve_accepts_int_like_objects(registry: pacer.NoticeRegistry) -> None:
    class Millis:
        def __index__(self) -> int:
            return 0

    assert fresh(registry).reserve(Millis()).wait_ms == 0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_per_minute", True), ("rate_per_minute", 60.0), ("rate_per_minute", "60"),
        ("burst", False), ("burst", 10.0), ("burst", "10"), ("burst", None),
        ("idle_timeout_ms", True), ("idle_timeout_ms", 120000.0), ("idle_timeout_ms", "120000"),
        ("max_retries", True), ("max_retries", 5.0), ("max_retries", "5"),
        ("release_policy", 0), ("release_policy", None), ("release_policy", True),
        ("clock", 5), ("clock", "time.monotonic"),
        ("sleep", 1.0),
        ("notice_registry", object()),
    ],
)
def test_constructor_wrong_types(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=field):
        pacer.Pacer(**{field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rate_per_minute", -1), ("rate_per_minute", 601), ("rate_per_minute", 2**32),
        ("burst", -1), ("burst", 1_000_001), ("burst", 2**64),
        ("idle_timeout_ms", -1), ("idle_timeout_ms", U64_MAX + 1),
        ("max_retries", -1), ("max_retries", 6), ("max_retries", 2**32),
        ("release_policy", "Refund"), ("release_policy", "none"),
    ],
)
def test_constructor_out_of_range(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        pacer.Pacer(**{field: value})  # type: ignore[arg-type]


def test_constructor_limits_are_accepted(registry: pacer.NoticeRegistry) -> None:
    # SPEC §2: rate 0..=600, burst up to PACER_MAX_BURST (1000000), burst 0 means 1;
    # retries up to the ladder ceiling (3600000 → 10).
    p = pacer.Pacer(rate_per_minute=600, burst=1_000_000, idle_timeout_ms=3_600_000, max_retries=10,
                    clock=FakeClock(0), notice_registry=registry)
    assert p.config.max_retries == 10
    q = pacer.Pacer(burst=0, clock=FakeClock(0), notice_registry=registry)
    assert [q.reserve(0).wait_ms for _ in range(2)] == [0, 1000]
    assert pacer.Pacer(idle_timeout_ms=U64_MAX, clock=FakeClock(0), notice_registry=registry).wait_bound_ms == 15000
    # Default retries: min(5, ceiling); idle 10000 → ceiling 2 (SPEC §2).
    assert pacer.Pacer(idle_timeout_ms=10_000, clock=FakeClock(0), notice_registry=registry).config.max_retries == 2


@pytest.mark.parametrize("reading", [math.nan, math.inf, -math.inf, -0.001, -1, "0", None, True])
def test_bad_clock_readings(reading: object, registry: pacer.NoticeRegistry) -> None:
    expected = TypeError if isinstance(reading, (str, bool)) or reading is None else ValueError
    with pytest.raises(expected, match=r"clock\(\)"):
        pacer.Pacer(clock=lambda: reading, notice_registry=registry)  # type: ignore[arg-type,return-value]
    # A pacer whose clock goes bad later: admit raises, nothing changes.
    value: object = 0.0
    p = pacer.Pacer(burst=1, clock=lambda: value, notice_registry=registry)  # type: ignore[arg-type,return-value]
    value = reading
    with pytest.raises(expected, match=r"clock\(\)"):
        p.admit_blocking()
    assert p.counters().admitted == 0


def test_clock_past_u64_ms(registry: pacer.NoticeRegistry) -> None:
    with pytest.raises(ValueError, match=r"clock\(\)"):
        pacer.Pacer(clock=lambda: 2**64, notice_registry=registry)
    with pytest.raises(ValueError, match=r"clock\(\)"):
        pacer.Pacer(clock=lambda: 1e20, notice_registry=registry)


def test_clock_seconds_to_whole_ms(registry: pacer.NoticeRegistry) -> None:
    readings = iter([1.001, 2.0009994, 7])
    p = pacer.Pacer(burst=1, clock=lambda: next(readings), notice_registry=registry)
    assert p.state().high_water_ms == 1001  # 1.001 s is 1001 ms, not 1000.999…
    assert p.now_ms() == 2000  # 2000999.4 µs: rounded to the µs, floored to the ms
    assert p.now_ms() == 7000  # int seconds


@pytest.mark.parametrize(("value", "error"), [(math.nan, ValueError), (math.inf, ValueError), (-1, ValueError),
                                              (True, TypeError), ("1", TypeError)])
def test_admit_blocking_bad_timeout(value: object, error: type, registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    with pytest.raises(error, match="timeout"):
        p.admit_blocking(timeout=value)  # type: ignore[arg-type]
    assert p.counters().admitted == 0


def test_release_bad_arguments_change_nothing(registry: pacer.NoticeRegistry) -> None:
    p = fresh(registry)
    p.reserve(0)
    admission = p.reserve(0)
    assert isinstance(admission, pacer.Admitted) and admission.ticket is not None
    with pytest.raises(TypeError, match="ticket"):
        p.release(admission)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ticket"):
        p.release(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now_ms"):
        p.release(admission.ticket, 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="now_ms"):
        admission.release(-1)
    with pytest.raises(TypeError, match="now_ms"):
        admission.release(True)  # type: ignore[arg-type]
    assert not admission.ticket.spent
    assert p.counters().released == 0
    assert admission.release(0) is True


def test_ticket_from_another_pacer_is_not_released(registry: pacer.NoticeRegistry) -> None:
    a, b = fresh(registry), fresh(registry)
    a.reserve(0)
    admission = a.reserve(0)
    assert isinstance(admission, pacer.Admitted) and admission.ticket is not None
    assert b.release(admission.ticket, 0) is False
    assert b.counters().released == 0 and not admission.ticket.spent
    assert a.release(admission.ticket, 0) is True


@pytest.mark.parametrize(("args", "error", "field"), [
    ((1.0,), TypeError, "idle_timeout_ms"), ((-1,), ValueError, "idle_timeout_ms"),
    ((True,), TypeError, "idle_timeout_ms"), ((U64_MAX + 1,), ValueError, "idle_timeout_ms"),
])
def test_ladder_ceiling_bad_input(args: tuple, error: type, field: str) -> None:
    with pytest.raises(error, match=field):
        pacer.ladder_ceiling(*args)


@pytest.mark.parametrize(("function", "args", "error", "field"), [
    (pacer.wait_bound_ms, (120000, 2**32), ValueError, "max_retries"),
    (pacer.wait_bound_ms, (120000, 5.0), TypeError, "max_retries"),
    (pacer.hint_cap_s, (math.inf,), TypeError, "wait_bound_ms"),
    (pacer.retry_after_s, (-1, 4833), ValueError, "required_wait_ms"),
    (pacer.can_refuse, (False, 5, 4833), TypeError, "rate_per_minute"),
    (pacer.can_refuse, (60, 5, U64_MAX + 1), ValueError, "wait_bound_ms"),
])
def test_formula_bad_input(function, args: tuple, error: type, field: str) -> None:
    with pytest.raises(error, match=field):
        function(*args)


@pytest.mark.parametrize(("kwargs", "error", "field"), [
    ({"rate_per_minute": 60}, TypeError, "rate_per_minute"),
    ({"idle_timeout_ms": b"1000"}, TypeError, "idle_timeout_ms"),
    ({"notice_registry": {}}, TypeError, "notice_registry"),
])
def test_budget_resolve_bad_input(kwargs: dict, error: type, field: str) -> None:
    with pytest.raises(error, match=field):
        pacer.Budget.resolve(**kwargs)


def test_budget_from_env_bad_input() -> None:
    with pytest.raises(TypeError, match="env"):
        pacer.Budget.from_env([("PACER_RATE_PER_MIN", "60")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="PACER_RATE_PER_MIN"):
        pacer.Budget.from_env({"PACER_RATE_PER_MIN": 60})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="names"):
        pacer.Budget.from_env({}, names={"rate": "RATE"})


def test_refusal_response_bad_input() -> None:
    for value in (True, 4.0, "4", None):
        with pytest.raises(TypeError, match="retry_after_s"):
            pacer.refusal_response(value)  # type: ignore[arg-type]
    for number in (-1, U64_MAX + 1):
        with pytest.raises(ValueError, match="retry_after_s"):
            pacer.refusal_response(number)
    with pytest.raises(TypeError, match="message_prefix"):
        pacer.refusal_response(4, message_prefix=b"x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="message_prefix"):
        pacer.refusal_response(4, message_prefix="a\x00b")


def test_results_are_frozen(registry: pacer.NoticeRegistry) -> None:
    import dataclasses

    p = fresh(registry)
    admission = p.reserve(0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        admission.wait_ms = 0  # type: ignore[misc]
    budget = pacer.Budget.resolve(notice_registry=registry)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.rate_per_minute = 1  # type: ignore[misc]
