"""Adaptive pacing (SPEC §14) on the in-process pacer: ``observe``,
``rate_in_force``, the refill at the rate in force, and the checks of the
settings and of the outcome.

Expected rates are worked out by hand from the law's statement
(core/src/adaptive.rs), never read back from the code under test. The
defaults (60/min, 5 retries, bound 4833 ms: hint cap 4 s, refusal schedule
5·4000 = 20000 ms) make ⌈60000/20000⌉ = 3/min the lowest rate that can
refuse, so the rate in force is clamped to [max(floor, 3), ceiling]: 10 with
floor 10, 40 with floor 40; the default ceiling (0) is the rate, 60.

- Searching (from creation, L = 60): 60·2ⁿ·(5000 + r)/5000 ≥ 60, clamped to
  the ceiling: 60 at any instant.
- 40 openings at 1000 (minute 0), then a throttle at 1000 ends the search:
  E = max(through 40, recent 40) = 40, L = min(40, ceiling) = 40, probing
  (`again`) from origin 1000: ⌈40·31/32⌉ = ⌈38.75⌉ = 39 through the hold.
- A throttle within 60000 ms of the origin changes nothing (39 at 1000 and
  at 60999); an opening in the hold is counted (41 in minute 0).
- A throttle at 61000 (minute 1, not held): through = 41 (minute 0's),
  recent = 0 + ⌊41·59000/60000⌋ = 40, E = 41 ≥ R = 39: L = 39 − max(1,
  ⌊39/8⌋) = 35, read ⌈35·31/32⌉ = ⌈33.9⌉ = 34, or 40 with floor 40.
- A throttle with nothing counted takes L = R: ⌈60·31/32⌉ = ⌈58.1⌉ = 59."""

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


def opened(p: pacer.Pacer, n: int, at: int) -> list[int]:
    return [p.observe("opened", at) for _ in range(n)]


@pytest.mark.parametrize(("floor", "held", "last"), [(10, 39, 34), (40, 40, 40)])
def test_the_laws_sequence(registry: pacer.NoticeRegistry, floor: int, held: int, last: int) -> None:
    p = adaptive(registry, adaptive_floor_per_min=floor)
    assert p.rate_in_force(0) == 60
    assert opened(p, 40, 1000) == [60] * 40  # searching, at the ceiling
    assert p.observe("throttled", 1000) == held  # ⌈40·31/32⌉ = 39, or the floor 40
    assert p.observe(Outcome.THROTTLED, 1000) == held  # in the hold: nothing changes
    assert p.observe("opened", 1000) == held  # counted, no rise in the hold
    assert p.observe("throttled", 60999) == held  # 59999 ms after the origin: held
    # 60000 ms after: E = 41 ≥ R: L = R − max(1, ⌊R/8⌋) = 35, read 34, or 40.
    assert p.observe("throttled", 61000) == last
    assert p.rate_in_force(61000) == last
    assert p.config.adaptive_floor_per_min == floor and p.config.adaptive_ceiling_per_min == 0


def test_a_throttle_the_count_explains(registry: pacer.NoticeRegistry) -> None:
    """After the sequence above (floor 10: L = 35 from origin 61000, not
    `again`): at 181000 (minute 3) the counts are dropped; the rate in force
    is 34 + ⌊⌊35·600³/10⁶⌋·35/5400000⌋ = 34 + ⌊7560·35/5400000⌋ = 34 (d =
    600 ds). 20 openings there (20 ≤ 35 + 4 + 1: no rise) and a throttle:
    E = 20 < 34, so L = 20, read ⌈20·31/32⌉ = 20; with floor 25, 25."""
    for floor, last in ((10, 20), (25, 25)):
        p = adaptive(registry, adaptive_floor_per_min=floor)
        opened(p, 40, 1000)
        assert p.observe("throttled", 1000) == 39
        p.observe("opened", 1000)
        assert p.observe("throttled", 61000) == 34
        assert p.rate_in_force(181000) == 34
        assert opened(p, 20, 181000) == [34] * 20
        assert p.observe("throttled", 181000) == last


@pytest.mark.parametrize(("more", "at_71000"), [(7, 58), (6, 39)])
def test_a_count_above_the_limit_after_the_hold_searches_again(registry: pacer.NoticeRegistry, more: int,
                                                                at_71000: int) -> None:
    """After the throttle at 1000 (L = 40), a rise shows when a minute's count
    passes 40 + ⌊40/8⌋ + 1 = 46 at least 60000 ms after the origin. `more`
    openings at 30000 (in the hold: 39 stays), then one at 61000: minute 0's
    count 40 + more is `through`. 47 > 46: search again from the rate in
    force, 39, doubling every 20000 ms: ⌊39·30000/20000⌋ = 58 at 71000, 78
    at 81000 clamped to 60. 46: still probing, at 71000 d = 100 ds,
    ⌊⌊40·100³/10⁶⌋·40/(5400000/16)⌋ = ⌊1600/337500⌋ = 0: 39."""
    p = adaptive(registry)
    opened(p, 40, 1000)
    assert p.observe("throttled", 1000) == 39
    assert opened(p, more, 30000) == [39] * more
    assert p.observe("opened", 61000) == 39
    assert p.rate_in_force(71000) == at_71000
    assert p.rate_in_force(81000) == (60 if more == 7 else 39)


def test_the_refill_follows_the_rate_in_force(registry: pacer.NoticeRegistry) -> None:
    """Burst 1: 30 openings and a throttle between two reservations at 1000
    (L = 30, ⌈30·31/32⌉ = 30) make the second wait 60000/30 = 2000 ms (1000
    ms at 60/min), within the 4833 ms bound."""
    p = adaptive(registry, burst=1)
    first = p.reserve(1000)
    assert isinstance(first, pacer.Admitted) and first.wait_ms == 0
    opened(p, 30, 1000)
    assert p.observe("throttled", 1000) == 30
    second = p.reserve(1000)
    assert isinstance(second, pacer.Admitted) and second.wait_ms == 2000


def test_observe_defaults_to_the_pacers_clock(registry: pacer.NoticeRegistry) -> None:
    """Nothing counted: L = R = 60, 59 through the hold; at 61000 (minute 1,
    nothing counted in minutes 0 and 1) L = R = 59 again: ⌈59·31/32⌉ =
    ⌈57.2⌉ = 58."""
    clock = FakeClock(1000)
    p = adaptive(registry, clock=clock)
    assert p.observe("throttled") == 59  # at 1000
    clock.ms = 60999
    assert p.observe("throttled") == 59 and p.rate_in_force() == 59
    clock.ms = 61000
    assert p.observe("throttled") == 58


def test_clock_0_and_the_largest_clock(registry: pacer.NoticeRegistry) -> None:
    """A throttle at 0 with nothing counted: 59. An opening at 2⁶⁴ − 1 (far
    past the hold: d capped at 20000 ds, the curve capped at 60 + 7 + 2 and
    clamped to the ceiling) reads 60; a throttle then: E = 1 < 60, L = 1,
    clamped to the floor 10."""
    p = adaptive(registry)
    assert p.observe("throttled", 0) == 59
    top = 2**64 - 1
    assert p.observe("opened", top) == 60
    assert p.rate_in_force(top) == 60
    assert p.observe("throttled", top) == 10


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
    """Before any throttle the search curve is 60·2ⁿ·(5000 + r)/5000, n =
    ⌊t/5000⌋, r = t mod 5000: 66 at 500, 90 at 2500, 120 at 5000, 240 at
    10000, 480 at 15000, 960 at 20000 (clamped to 600); ceiling 70 clamps
    72 at 1000 to 70; with the default ceiling it stays 60."""
    wide = adaptive(registry, adaptive_ceiling_per_min=600)
    assert [wide.rate_in_force(t) for t in (0, 500, 2500, 5000, 10000, 15000, 20000, 100_000)] == [
        60, 66, 90, 120, 240, 480, 600, 600]
    assert adaptive(registry, adaptive_ceiling_per_min=70).rate_in_force(1000) == 70
    assert adaptive(registry, adaptive_ceiling_per_min=70).rate_in_force(500) == 66
    assert adaptive(registry).rate_in_force(100_000) == 60


def test_a_search_ends_at_what_got_through(registry: pacer.NoticeRegistry) -> None:
    """Ceiling 600, floor 1 (lowest max(1, 3) = 3): three openings at 0 and
    a throttle at 20000: L = min(3, 600) = 3, ⌈3·31/32⌉ = 3, at least the
    lowest 3. Nothing reported: L = R = 600, ⌈600·31/32⌉ = ⌈581.25⌉ = 582."""
    p = adaptive(registry, adaptive_floor_per_min=1, adaptive_ceiling_per_min=600)
    assert opened(p, 3, 0) == [60, 60, 60]
    assert p.observe("throttled", 20000) == 3
    assert p.rate_in_force(79999) == 3
    blind = adaptive(registry, adaptive_floor_per_min=1, adaptive_ceiling_per_min=600)
    assert blind.observe("throttled", 20000) == 582


BAD_OUTCOMES_TYPE = [None, 1, 2, True, b"throttled", 1.0, ["opened"]]
BAD_OUTCOMES_VALUE = ["", "Throttled", "OPENED", "closed", "throttled ", "429"]


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_TYPE, ids=repr)
def test_an_outcome_of_another_type_is_a_type_error(registry: pacer.NoticeRegistry, outcome: object) -> None:
    p = adaptive(registry)
    with pytest.raises(TypeError, match="outcome"):
        p.observe(outcome, 1000)  # type: ignore[arg-type]
    assert p.observe("throttled", 1000) == 59  # still searching, nothing counted: L = R = 60


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_VALUE)
def test_another_word_is_a_value_error(registry: pacer.NoticeRegistry, outcome: str) -> None:
    p = adaptive(registry)
    with pytest.raises(ValueError, match="outcome"):
        p.observe(outcome, 1000)
    assert p.observe("throttled", 1000) == 59


@pytest.mark.parametrize("now_ms", [-1, 2**64, 1.5, math.nan, math.inf, True, "1000"], ids=repr)
def test_a_bad_time_changes_nothing(registry: pacer.NoticeRegistry, now_ms: object) -> None:
    p = adaptive(registry)
    error = ValueError if isinstance(now_ms, int) and not isinstance(now_ms, bool) else TypeError
    with pytest.raises(error, match="now_ms"):
        p.observe("throttled", now_ms)  # type: ignore[arg-type]
    with pytest.raises(error, match="now_ms"):
        p.rate_in_force(now_ms)  # type: ignore[arg-type]
    with pytest.raises(error, match="now_ms"):
        p.observe("opened", now_ms)  # type: ignore[arg-type]
    assert p.observe("throttled", 1000) == 59


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
    assert p.observe("throttled", 1000) == 59  # nothing counted: L = R = 60, ⌈60·31/32⌉
    assert p.observe("throttled", 60999) == 59  # a hold
    # Nothing counted: L = R = 59, ⌈59·31/32⌉ = ⌈57.2⌉ = 58, in [40, 60].
    assert p.observe("throttled", 61000) == 58
    assert opened(p, 10, 121000) == [58] * 10  # d = 0 at Δ = 60000: 58
    # E = 10 < R = 58: L = 10, ⌈10·31/32⌉ = 10, below the floor 40.
    assert p.observe("throttled", 121000) == 40


def test_outcome_values() -> None:
    assert [o.value for o in Outcome] == ["opened", "throttled"]
    assert Outcome("throttled") is Outcome.THROTTLED
