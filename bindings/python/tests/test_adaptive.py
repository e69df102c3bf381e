"""Adaptive pacing (SPEC §14) on the in-process pacer: ``observe``,
``rate_in_force``, the refill at the rate in force, and the checks of the
settings and of the outcome.

Expected rates are worked out by hand from the law (core/src/adaptive.rs):
a throttle a minute or more after the last decrease (or the first one) sets
the rate to max(floor, ⌊rate·8/10⌋); one sooner holds it there; an opened
connection changes nothing. Before the first throttle the curve is at or
above the configured rate, and the default ceiling (0: the rate) clamps it
there."""

from __future__ import annotations

import math

import pytest
from conftest import FakeClock

import pacer
from pacer import Outcome


def adaptive(registry: pacer.NoticeRegistry, clock: FakeClock | None = None, **options: object) -> pacer.Pacer:
    """SPEC §2's defaults (60/min, burst 10, idle 120 s, 5 retries, refund:
    bound 4833 ms), adapting down to a floor of 10 unless told."""
    settings: dict[str, object] = {"adaptive_floor_per_min": 10, **options}
    return pacer.Pacer(clock=clock or FakeClock(0), notice_registry=registry, **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("floor", "last"), [(10, 38), (40, 40)])
def test_the_laws_sequence(registry: pacer.NoticeRegistry, floor: int, last: int) -> None:
    p = adaptive(registry, adaptive_floor_per_min=floor)
    assert p.rate_in_force(0) == 60
    assert p.observe("throttled", 1000) == 48  # ⌊60·8/10⌋
    assert p.observe(Outcome.THROTTLED, 1000) == 48  # the same instant: nothing written
    assert p.observe("opened", 1000) == 48  # an opened connection changes nothing
    assert p.observe("throttled", 60999) == 48  # 59999 ms after the decrease: a hold
    # 60000 ms after the decrease: ⌊48·8/10⌋ = 38, or the floor 40.
    assert p.observe("throttled", 61000) == last
    assert p.rate_in_force(61000) == last
    assert p.config.adaptive_floor_per_min == floor and p.config.adaptive_ceiling_per_min == 0


def test_the_refill_follows_the_rate_in_force(registry: pacer.NoticeRegistry) -> None:
    """Burst 1: a throttle between two reservations at 1000 makes the second
    wait ⌈60000/48⌉ = 1250 ms (1000 ms at 60/min), within the 4833 ms bound."""
    p = adaptive(registry, burst=1)
    first = p.reserve(1000)
    assert isinstance(first, pacer.Admitted) and first.wait_ms == 0
    assert p.observe("throttled", 1000) == 48
    second = p.reserve(1000)
    assert isinstance(second, pacer.Admitted) and second.wait_ms == 1250


def test_observe_defaults_to_the_pacers_clock(registry: pacer.NoticeRegistry) -> None:
    clock = FakeClock(1000)
    p = adaptive(registry, clock=clock)
    assert p.observe("throttled") == 48  # at 1000
    clock.ms = 60999
    assert p.observe("throttled") == 48 and p.rate_in_force() == 48
    clock.ms = 61000
    assert p.observe("throttled") == 38


@pytest.mark.parametrize("ceiling", [0, 90])
def test_adaptation_off_changes_nothing(registry: pacer.NoticeRegistry, ceiling: int) -> None:
    """Floor 0, whatever the ceiling: observe returns the rate, and the second
    reservation of burst 1 waits 1000 ms at 60/min."""
    p = adaptive(registry, adaptive_floor_per_min=0, adaptive_ceiling_per_min=ceiling, burst=1)
    p.reserve(1000)
    for outcome in ("throttled", "throttled", Outcome.OPENED):
        assert p.observe(outcome, 1000) == 60
    assert p.rate_in_force(1000) == 60
    assert p.reserve(1000).wait_ms == 1000  # type: ignore[union-attr]


def test_a_ceiling_above_the_rate_lets_it_climb(registry: pacer.NoticeRegistry) -> None:
    """Before any throttle the search curve is 60 + ⌊d³/50000000⌋, d the
    deciseconds since creation: at 100 s, 60 + 20 = 80, clamped to 70; with
    the default ceiling it stays 60."""
    assert adaptive(registry, adaptive_ceiling_per_min=70).rate_in_force(100_000) == 70
    assert adaptive(registry).rate_in_force(100_000) == 60


BAD_OUTCOMES_TYPE = [None, 1, 2, True, b"throttled", 1.0, ["opened"]]
BAD_OUTCOMES_VALUE = ["", "Throttled", "OPENED", "closed", "throttled ", "429"]


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_TYPE, ids=repr)
def test_an_outcome_of_another_type_is_a_type_error(registry: pacer.NoticeRegistry, outcome: object) -> None:
    p = adaptive(registry)
    with pytest.raises(TypeError, match="outcome"):
        p.observe(outcome, 1000)  # type: ignore[arg-type]
    assert p.observe("throttled", 1000) == 48  # still the first decrease: nothing changed


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_VALUE)
def test_another_word_is_a_value_error(registry: pacer.NoticeRegistry, outcome: str) -> None:
    p = adaptive(registry)
    with pytest.raises(ValueError, match="outcome"):
        p.observe(outcome, 1000)
    assert p.observe("throttled", 1000) == 48


@pytest.mark.parametrize("now_ms", [-1, 2**64, 1.5, math.nan, True, "1000"], ids=repr)
def test_a_bad_time_changes_nothing(registry: pacer.NoticeRegistry, now_ms: object) -> None:
    p = adaptive(registry)
    error = ValueError if isinstance(now_ms, int) and not isinstance(now_ms, bool) else TypeError
    with pytest.raises(error, match="now_ms"):
        p.observe("throttled", now_ms)  # type: ignore[arg-type]
    with pytest.raises(error, match="now_ms"):
        p.rate_in_force(now_ms)  # type: ignore[arg-type]
    assert p.observe("throttled", 1000) == 48


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("adaptive_floor_per_min", -1, ValueError),
        ("adaptive_floor_per_min", 61, ValueError),  # above the rate
        ("adaptive_floor_per_min", 601, ValueError),
        ("adaptive_floor_per_min", 2**64, ValueError),
        ("adaptive_floor_per_min", 10.0, TypeError),
        ("adaptive_floor_per_min", math.nan, TypeError),
        ("adaptive_floor_per_min", True, TypeError),
        ("adaptive_floor_per_min", "10", TypeError),
        ("adaptive_floor_per_min", None, TypeError),
        ("adaptive_ceiling_per_min", -1, ValueError),
        ("adaptive_ceiling_per_min", 59, ValueError),  # below the rate
        ("adaptive_ceiling_per_min", 601, ValueError),
        ("adaptive_ceiling_per_min", 90.5, TypeError),
        ("adaptive_ceiling_per_min", math.inf, TypeError),
        ("adaptive_ceiling_per_min", False, TypeError),
    ],
)
def test_the_settings_are_checked(registry: pacer.NoticeRegistry, field: str, value: object,
                                  error: type[Exception]) -> None:
    with pytest.raises(error, match=field):
        adaptive(registry, **{field: value})


def test_the_edges_are_accepted(registry: pacer.NoticeRegistry) -> None:
    for floor, ceiling in ((60, 0), (60, 60), (1, 600), (0, 30), (0, 0)):
        p = adaptive(registry, adaptive_floor_per_min=floor, adaptive_ceiling_per_min=ceiling)
        assert (p.config.adaptive_floor_per_min, p.config.adaptive_ceiling_per_min) == (floor, ceiling)
    # Pacing off cannot adapt: any floor is above the rate.
    with pytest.raises(ValueError, match="adaptive_floor_per_min"):
        adaptive(registry, rate_per_minute=0, adaptive_floor_per_min=1)
    assert "adaptive_floor_per_min=10" in repr(adaptive(registry))
    assert "adaptive" not in repr(adaptive(registry, adaptive_floor_per_min=0))


def test_from_env_takes_the_adaptive_settings(registry: pacer.NoticeRegistry) -> None:
    p = pacer.Pacer.from_env({}, adaptive_floor_per_min=40, clock=FakeClock(0), notice_registry=registry)
    assert p.observe("throttled", 1000) == 48
    assert p.observe("throttled", 60999) == 48  # a hold
    assert p.observe("throttled", 61000) == 40  # ⌊48·8/10⌋ = 38, below the floor


def test_outcome_values() -> None:
    assert [o.value for o in Outcome] == ["opened", "throttled"]
    assert Outcome("throttled") is Outcome.THROTTLED
