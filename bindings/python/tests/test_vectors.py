"""tests/vectors/*.json (hand-derived from SPEC.md by scripts/gen-vectors.py)
replayed through the installed package: every scenario (u64::MAX clocks
included), every budget case (as arguments and as an environment) and every
row of the derived-quantity tables."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import FakeClock, load_vectors

import pacer

SCENARIOS = load_vectors("scenarios")["scenarios"]
BUDGETS = load_vectors("budgets")["cases"]
DERIVED = load_vectors("derived")


def test_the_vectors_are_all_there() -> None:
    # Guards against an empty or truncated replay passing vacuously.
    assert len(SCENARIOS) == 14
    assert len(BUDGETS) == 42
    assert {k: len(DERIVED[k]) for k in ("ladder_ceiling", "wait_bound_ms", "retry_after_s", "can_refuse")} == {
        "ladder_ceiling": 10, "wait_bound_ms": 11, "retry_after_s": 13, "can_refuse": 10,
    }
    assert any(step["t"] == 2**64 - 1 for s in SCENARIOS for step in s["steps"])


def replay(scenario: dict[str, Any], registry: pacer.NoticeRegistry) -> None:
    c = scenario["config"]
    p = pacer.Pacer(
        rate_per_minute=c["rate_per_min"],
        burst=c["burst"],
        idle_timeout_ms=c["idle_timeout_ms"],
        max_retries=c["max_retries"],
        release_policy=c["release_policy"],
        clock=FakeClock(scenario["t"]),
        notice_registry=registry,
    )
    e = scenario["expect_pacer"]
    assert (p.wait_bound_ms, p.enabled, p.can_refuse) == (e["bound_ms"], e["enabled"], e["can_refuse"])
    # Tickets are numbered 1, 2, 3 … in the order of admissions that debited.
    tickets: dict[int, pacer.Ticket] = {}
    for index, step in enumerate(scenario["steps"]):
        where = f"{scenario['name']} step {index}"
        if step["op"] == "reserve":
            got = p.reserve(step["t"])
            if isinstance(got, pacer.Admitted):
                number = None
                if got.ticket is not None:
                    number = len(tickets) + 1
                    tickets[number] = got.ticket
                assert got.queued == (got.wait_ms > 0), where
                actual = {"kind": "admitted", "wait_ms": got.wait_ms, "ticket": number}
            else:
                assert isinstance(got, pacer.Refused), where
                actual = {"kind": "refused", "required_wait_ms": got.required_wait_ms,
                          "retry_after_s": got.retry_after_s}
        else:
            assert step["op"] == "release", where
            ticket = tickets.get(step["ticket"])
            # A ticket number never issued has nothing to release; a ticket
            # released before goes through the at-most-once guard again.
            refunded = False if ticket is None else p.release(ticket, step["t"])
            actual = {"kind": "released", "refunded": refunded}
        assert actual == step["expect"], where


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_scenario(scenario: dict[str, Any], registry: pacer.NoticeRegistry) -> None:
    replay(scenario, registry)


def as_vector(budget: pacer.Budget) -> dict[str, Any]:
    return {
        "rate_per_min": budget.rate_per_minute,
        "idle_timeout_ms": budget.idle_timeout_ms,
        "total_timeout_ms": budget.total_timeout_ms,
        "max_retries": budget.max_retries,
        "bound_ms": budget.wait_bound_ms,
        "hint_cap_s": budget.hint_cap_s,
        "refusal_schedule_ms": budget.refusal_schedule_ms,
        "can_refuse": budget.can_refuse,
        "enabled": budget.enabled,
        "notices": [{"kind": n.kind.name.lower(), "raw": n.raw, "values": list(n.values)} for n in budget.notices],
    }


@pytest.mark.parametrize("case", BUDGETS, ids=[c["name"] for c in BUDGETS])
def test_budget_from_arguments(case: dict[str, Any], registry: pacer.NoticeRegistry) -> None:
    s = case["settings"]
    budget = pacer.Budget.resolve(
        s["rate_per_min"], s["idle_timeout_ms"], s["total_timeout_ms"], s["max_retries"],
        notice_registry=registry,
    )
    assert as_vector(budget) == case["expect"]
    assert all(n.text for n in budget.notices)


@pytest.mark.parametrize("case", BUDGETS, ids=[c["name"] for c in BUDGETS])
def test_budget_from_env(case: dict[str, Any], registry: pacer.NoticeRegistry) -> None:
    s = case["settings"]
    names = {"rate_per_min": "PACER_RATE_PER_MIN", "idle_timeout_ms": "PACER_IDLE_TIMEOUT_MS",
             "total_timeout_ms": "PACER_TOTAL_TIMEOUT_MS", "max_retries": "PACER_MAX_RETRIES"}
    env = {names[key]: value for key, value in s.items() if value is not None}
    env["UNRELATED"] = "1e2"
    budget = pacer.Budget.from_env(env, notice_registry=registry)
    assert as_vector(budget) == case["expect"]


@pytest.mark.parametrize("case", DERIVED["ladder_ceiling"])
def test_ladder_ceiling(case: dict[str, int]) -> None:
    assert pacer.ladder_ceiling(case["idle_timeout_ms"]) == case["expect"]


@pytest.mark.parametrize("case", DERIVED["wait_bound_ms"])
def test_wait_bound(case: dict[str, int]) -> None:
    assert pacer.wait_bound_ms(case["idle_timeout_ms"], case["max_retries"]) == case["expect"]


@pytest.mark.parametrize("case", DERIVED["retry_after_s"])
def test_retry_after(case: dict[str, int]) -> None:
    assert pacer.retry_after_s(case["required_wait_ms"], case["bound_ms"]) == case["expect"]


@pytest.mark.parametrize("case", DERIVED["can_refuse"])
def test_can_refuse(case: dict[str, Any]) -> None:
    assert pacer.can_refuse(case["rate_per_min"], case["max_retries"], case["bound_ms"]) is case["expect"]


def test_hint_cap_from_spec() -> None:
    # SPEC §3: cap_s = max(1, floor(bound/1000)); hint cases 666 → 1, 2000 → 2, 4833 → 4, 15000 → 15.
    assert [pacer.hint_cap_s(b) for b in (0, 666, 2000, 4833, 15000)] == [1, 1, 2, 4, 15]
