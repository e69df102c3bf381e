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
- 40 openings at 1000 (minute 0), then a throttle at 1000, end the first
  search: E = max(through 40, recent 40) = 40, L = min(40, 60) = 40, probing
  (`again`). The pause: the origin becomes max(1000, 0 + 60000) = 60000 (the
  counts moved to minute 1: the 40 are the count before), and until then the
  rate reads the lowest (10, or 40 with floor 40); from 60000 it is ℓ = 40
  through the hold and the wait (w = max(240000, 80·60000/40 = 120000)/12 =
  20000: the step only from 60000 + 60000 + 20000 = 140000).
- A throttle within 60000 ms of the origin changes nothing (at 1000, where
  `at` = max(1000, 60000) = 60000, and at 119999); an opening at 1000 is
  counted at max(1000, 60000), the origin's minute.
- 40 more openings at 60000 (that minute: 41; Δ = 0, in the hold: no rise),
  then a throttle at 120000 (Δ = 60000: not held; the next minute, so the 41
  are the count before): E = through = 41 ≥ R = 40 (ℓ: before the step):
  L = 40 − max(1, ⌊40/16⌋) = 38 (40 with floor 40).
- A throttle with nothing counted (E = 0): B = min(R, L) = min(60, 60) = 60,
  L = 60 − max(1, ⌊60/16⌋) = 57, read from the pause's end (60000); the
  throttle itself, in the pause, answers the lowest."""

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


@pytest.mark.parametrize(("floor", "low", "last"), [(10, 10, 38), (40, 40, 40)])
def test_the_laws_sequence(registry: pacer.NoticeRegistry, floor: int, low: int, last: int) -> None:
    p = adaptive(registry, adaptive_floor_per_min=floor)
    assert p.rate_in_force(0) == 60
    assert opened(p, 40, 1000) == [60] * 40  # searching, at the ceiling
    # L = 40, paused until 60000: the lowest, max(floor, 3) = 10, or 40.
    assert p.observe("throttled", 1000) == low
    assert p.observe(Outcome.THROTTLED, 1000) == low  # at = 60000, Δ = 0: in the hold, nothing changes
    assert p.observe("opened", 1000) == low  # counted at 60000, no rise in the hold
    assert p.rate_in_force(59999) == low  # still in the pause
    assert p.rate_in_force(60000) == 40  # the pause's end: ℓ = L = 40
    assert opened(p, 40, 60000) == [40] * 40  # Δ = 0: in the hold, 41 in that minute
    assert p.observe("throttled", 119999) == 40  # Δ = 59999: in the hold
    # Δ = 60000: E = through = 41 ≥ R = 40: L = 40 − max(1, ⌊40/16⌋) = 38, or
    # the floor 40.
    assert p.observe("throttled", 120000) == last
    assert p.rate_in_force(120000) == last
    assert p.config.adaptive_floor_per_min == floor and p.config.adaptive_ceiling_per_min == 0


def test_a_throttle_the_count_explains(registry: pacer.NoticeRegistry) -> None:
    """The first search's end as in the sequence (L = 40, the pause to 60000,
    the 40 openings of minute 0 the count before minute 1). 20 openings at
    60000 (minute 1; Δ = 0, in the hold: no rise) read ℓ = 40. A throttle at
    120000 (minute 2, Δ = 60000: not held, before the step at 60000 + 60000
    + max(240000, 80·60000/40)/12 = 140000): R = 40; minute 0's count dropped,
    minute 1's 20 the count before: E = through = 20 < R = 40, so L = 20;
    with floor 25, 25."""
    for floor, last in ((10, 20), (25, 25)):
        p = adaptive(registry, adaptive_floor_per_min=floor)
        opened(p, 40, 1000)
        assert p.observe("throttled", 1000) == floor  # paused: the lowest, max(floor, 3)
        assert opened(p, 20, 60000) == [40] * 20
        assert p.rate_in_force(119999) == 40
        assert p.observe("throttled", 120000) == last


@pytest.mark.parametrize(("more", "at_125000", "at_130000"), [(47, 50, 60), (46, 40, 40)])
def test_a_count_above_the_limit_after_the_hold_searches_again(registry: pacer.NoticeRegistry, more: int,
                                                                at_125000: int, at_130000: int) -> None:
    """After the throttle at 1000 (L = 40, the pause: origin 60000, probing,
    `again`) a rise shows when a minute's count passes 40 + ⌊40/8⌋ + 1 = 46
    at least 60000 ms after the origin. `more` openings at 90000 (minute 1,
    Δ = 30000: in the hold, 40 stays); one at 120000 (minute 2, Δ = 60000:
    minute 0's 40 dropped, minute 1's `more` the count before) makes through
    = max(1, more). 47 > 46: search again from the rate in force, 40 (before
    the step at 140000), origin 120000, doubling every 20000 ms:
    40·(20000 + 5000)/20000 = 50 at 125000 (Δ = 5000), 40·(20000 +
    10000)/20000 = 60 at 130000 (Δ = 10000), the ceiling. 46: still probing,
    ℓ = 40 at both (Δ = 65000 and 70000, before the step)."""
    p = adaptive(registry)
    opened(p, 40, 1000)
    assert p.observe("throttled", 1000) == 10  # paused: the lowest
    assert opened(p, more, 90000) == [40] * more
    # The answer is read after the change at 120000: searching again from 40,
    # Δ = 0: 40; or still probing at ℓ = 40.
    assert p.observe("opened", 120000) == 40
    assert p.rate_in_force(125000) == at_125000
    assert p.rate_in_force(130000) == at_130000


def test_the_refill_follows_the_rate_in_force(registry: pacer.NoticeRegistry) -> None:
    """Burst 1: 30 openings and a throttle between two reservations at 61000
    (minute 1: E = max(through 30, recent 30 + 0) = 30, L = min(30, 60) = 30;
    a minute after the creation, so no pause: origin max(61000, 0 + 60000) =
    61000, the rate ℓ = 30 at once) make the second wait 60000/30 = 2000 ms
    (1000 ms at 60/min), within the 4833 ms bound."""
    p = adaptive(registry, burst=1)
    first = p.reserve(61000)
    assert isinstance(first, pacer.Admitted) and first.wait_ms == 0
    assert opened(p, 30, 61000) == [60] * 30
    assert p.observe("throttled", 61000) == 30
    second = p.reserve(61000)
    assert isinstance(second, pacer.Admitted) and second.wait_ms == 2000


def test_observe_defaults_to_the_pacers_clock(registry: pacer.NoticeRegistry) -> None:
    """Created at 1000 (the clock's reading). Nothing counted at 1000: B =
    min(R, L) = 60, L = 60 − max(1, ⌊60/16⌋) = 57, probing (`again`), paused
    until max(1000, 1000 + 60000) = 61000: the lowest, 10, before it, 57
    from it. At 121000 (Δ = 60000, not held; the step only from 61000 +
    60000 + max(240000, ⌊4800000/57⌋ = 84210)/12 = 141000, so R = 57),
    nothing counted again: B = min(57, 57) = 57, L = 57 − max(1, ⌊57/16⌋ =
    3) = 54."""
    clock = FakeClock(1000)
    p = adaptive(registry, clock=clock)
    assert p.observe("throttled") == 10  # at 1000, in the pause
    clock.ms = 60999
    assert p.observe("throttled") == 10 and p.rate_in_force() == 10  # held, still paused
    clock.ms = 61000
    assert p.rate_in_force() == 57
    clock.ms = 121000
    assert p.observe("throttled") == 54


def test_clock_0_and_the_largest_clock(registry: pacer.NoticeRegistry) -> None:
    """A throttle at 0 with nothing counted: L = 60 − max(1, ⌊60/16⌋) = 57,
    paused (origin 0 + 60000): the lowest, 10. An opening at 2⁶⁴ − 1 (long
    past the hold and the wait: the step, 57 + ⌊57/2⌋ + 2 = 87, clamped to
    the ceiling; through 1 ≤ 57 + 7 + 1, no rise) reads 60; a throttle then,
    at the probe's step: R = 60, E = through = 1 < 60, and L held through
    the hold and the wait, so L = max(1, 57) = 57, read at once."""
    p = adaptive(registry)
    assert p.observe("throttled", 0) == 10
    assert p.rate_in_force(59999) == 10
    assert p.rate_in_force(60000) == 57
    top = 2**64 - 1
    assert p.observe("opened", top) == 60
    assert p.rate_in_force(top) == 60
    assert p.observe("throttled", top) == 57
    assert p.rate_in_force(top) == 57


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
    """Ceiling 600, floor 1 (lowest max(1, 3) = 3): three openings at 0 and a
    throttle at 20000: E = max(through 3, recent 3) = 3, L = min(3, 600) = 3;
    paused until max(20000, 0 + 60000) = 60000 at the lowest, 3, and ℓ = 3
    after it. Nothing reported: R at 20000 is 60·2⁴ = 960, clamped to 600;
    B = min(R, L) = min(600, 60) = 60, L = 60 − max(1, ⌊60/16⌋) = 57, read
    from the pause's end (the throttle itself answers the lowest, 3)."""
    p = adaptive(registry, adaptive_floor_per_min=1, adaptive_ceiling_per_min=600)
    assert opened(p, 3, 0) == [60, 60, 60]
    assert p.observe("throttled", 20000) == 3
    assert p.rate_in_force(59999) == 3
    assert p.rate_in_force(79999) == 3
    blind = adaptive(registry, adaptive_floor_per_min=1, adaptive_ceiling_per_min=600)
    assert blind.rate_in_force(20000) == 600
    assert blind.observe("throttled", 20000) == 3
    assert blind.rate_in_force(60000) == 57


BAD_OUTCOMES_TYPE = [None, 1, 2, True, b"throttled", 1.0, ["opened"]]
BAD_OUTCOMES_VALUE = ["", "Throttled", "OPENED", "closed", "throttled ", "429"]


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_TYPE, ids=repr)
def test_an_outcome_of_another_type_is_a_type_error(registry: pacer.NoticeRegistry, outcome: object) -> None:
    p = adaptive(registry)
    with pytest.raises(TypeError, match="outcome"):
        p.observe(outcome, 1000)  # type: ignore[arg-type]
    # Still searching, nothing counted: L = 60 − max(1, ⌊60/16⌋) = 57, paused
    # until 60000 at the lowest, 10.
    assert p.observe("throttled", 1000) == 10
    assert p.rate_in_force(60000) == 57


@pytest.mark.parametrize("outcome", BAD_OUTCOMES_VALUE)
def test_another_word_is_a_value_error(registry: pacer.NoticeRegistry, outcome: str) -> None:
    p = adaptive(registry)
    with pytest.raises(ValueError, match="outcome"):
        p.observe(outcome, 1000)
    assert p.observe("throttled", 1000) == 10  # as above: L = 57, paused at the lowest
    assert p.rate_in_force(60000) == 57


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
    assert p.observe("throttled", 1000) == 10  # as above: L = 57, paused at the lowest
    assert p.rate_in_force(60000) == 57


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
    # Nothing counted: L = 60 − max(1, ⌊60/16⌋) = 57, paused until 60000 at
    # the lowest, max(40, 3) = 40.
    assert p.observe("throttled", 1000) == 40
    assert p.observe("throttled", 60999) == 57  # Δ = 999: a hold; ℓ = 57
    assert p.observe("throttled", 119999) == 57  # Δ = 59999: still held
    # Δ = 60000 (the step only from 140000: R = 57), nothing counted: B =
    # min(57, 57) = 57, L = 57 − max(1, ⌊57/16⌋) = 54, in [40, 60].
    assert p.observe("throttled", 120000) == 54
    # Origin 120000, not `again`: the wait is max(240000, ⌊4800000/54⌋ =
    # 88888) = 240000, so 54 at Δ = 60000; 10 ≤ 54 + 6 + 1: no rise.
    assert opened(p, 10, 180000) == [54] * 10
    # Δ = 60000, not held: E = through = 10 < R = 54: L = 10, below the floor 40.
    assert p.observe("throttled", 180000) == 40


def test_outcome_values() -> None:
    assert [o.value for o in Outcome] == ["opened", "throttled"]
    assert Outcome("throttled") is Outcome.THROTTLED
