"""Notices (SPEC §2) go to the ``pacer`` logger once per dedupe key;
keys are namespaced by kind; a failing handler never fails a call."""

from __future__ import annotations

import logging

import pytest
from conftest import FakeClock

import pacer


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "pacer"]


def test_each_notice_is_logged_once_per_key(caplog: pytest.LogCaptureFixture,
                                            registry: pacer.NoticeRegistry) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    env = {"PACER_RATE_PER_MIN": "1e2"}
    first = pacer.Budget.from_env(env, notice_registry=registry)
    second = pacer.Budget.from_env(env, notice_registry=registry)
    # Every resolution reports its notices; the log shows the first only.
    assert [n.kind for n in first.notices] == [pacer.NoticeKind.RATE_MALFORMED]
    assert first.notices == second.notices
    assert messages(caplog) == [
        'ignoring new-connection rate "1e2": not a whole number of connections per minute; using 60/minute'
    ]
    record = next(r for r in caplog.records if r.name == "pacer")
    assert record.levelno == logging.WARNING
    assert record.pacer_notice == first.notices[0]  # type: ignore[attr-defined]
    # Another text is another key.
    pacer.Budget.from_env({"PACER_RATE_PER_MIN": "0x10"}, notice_registry=registry)
    assert len(messages(caplog)) == 2


def test_a_new_registry_shows_them_again(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    for _ in range(2):
        pacer.Budget.resolve(idle_timeout_ms="2m", notice_registry=pacer.NoticeRegistry())
    assert len(messages(caplog)) == 2


def test_hostile_text_cannot_suppress_another_kind(caplog: pytest.LogCaptureFixture,
                                                   registry: pacer.NoticeRegistry) -> None:
    # SPEC §2: a rate text "disabled:3:14001" must not hide the disabled notice
    # of idle 14001 (3 retries).
    caplog.set_level(logging.WARNING, logger="pacer")
    pacer.Budget.resolve("disabled:3:14001", notice_registry=registry)
    pacer.Budget.resolve(idle_timeout_ms="14001", notice_registry=registry)
    logged = messages(caplog)
    assert len(logged) == 2
    assert logged[1].startswith("not pacing new connections: a 3-retry budget")


def test_pacer_reports_its_mode_once(caplog: pytest.LogCaptureFixture, registry: pacer.NoticeRegistry) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    # SPEC §7: rate 1/min at the default budget: norefuse, with "a 5-retry
    # schedule spans only 20000ms … the 60000ms wait".
    for _ in range(3):
        p = pacer.Pacer(rate_per_minute=1, clock=FakeClock(0), notice_registry=registry)
    assert p.mode is pacer.Mode.SHAPING_LOW_RATE
    logged = messages(caplog)
    assert len(logged) == 1
    assert "a 5-retry schedule spans only 20000ms" in logged[0]
    assert "the 60000ms wait" in logged[0]
    # idle 14001: pacing switches itself off (disabled notice).
    q = pacer.Pacer(idle_timeout_ms=14001, clock=FakeClock(0), notice_registry=registry)
    assert (q.mode, q.enabled) == (pacer.Mode.DISABLED, False)
    assert len(messages(caplog)) == 2
    # rate 0 is off by choice: no notice; retries 0 shapes by choice: none either.
    pacer.Pacer(rate_per_minute=0, clock=FakeClock(0), notice_registry=registry)
    r = pacer.Pacer(max_retries=0, clock=FakeClock(0), notice_registry=registry)
    assert r.mode is pacer.Mode.SHAPING_NO_RETRY
    assert len(messages(caplog)) == 2


def test_from_env_and_pacer_share_the_key(caplog: pytest.LogCaptureFixture, registry: pacer.NoticeRegistry) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    p = pacer.Pacer.from_env({"PACER_RATE_PER_MIN": "2"}, clock=FakeClock(0), notice_registry=registry)
    assert p.config.rate_per_minute == 2
    assert len(messages(caplog)) == 1  # norefuse from resolution; the pacer's is the same key


def test_from_env_reads_os_environ(monkeypatch: pytest.MonkeyPatch, registry: pacer.NoticeRegistry) -> None:
    monkeypatch.setenv("PACER_RATE_PER_MIN", "30")
    monkeypatch.setenv("PACER_IDLE_TIMEOUT_MS", " 30000 ")  # surrounding whitespace is trimmed
    monkeypatch.delenv("PACER_TOTAL_TIMEOUT_MS", raising=False)
    monkeypatch.setenv("PACER_MAX_RETRIES", "")  # empty = unset
    budget = pacer.Budget.from_env(notice_registry=registry)
    # SPEC §3 table: idle 30000 → r 3, bound 2000.
    assert (budget.rate_per_minute, budget.idle_timeout_ms, budget.max_retries, budget.wait_bound_ms) == (
        30, 30000, 3, 2000)
    assert budget.notices == ()
    p = pacer.Pacer.from_env(burst=1, clock=FakeClock(0), notice_registry=registry)
    assert (p.config.rate_per_minute, p.config.idle_timeout_ms, p.config.max_retries, p.config.burst) == (
        30, 30000, 3, 1)


def test_custom_names(registry: pacer.NoticeRegistry) -> None:
    budget = pacer.Budget.from_env({"RATE": "120", "PACER_RATE_PER_MIN": "1"}, names={"rate_per_minute": "RATE"},
                                   notice_registry=registry)
    assert budget.rate_per_minute == 120


# U+FFFD, as the core renders text that was not valid: a NUL (replaced by
# it before the text goes to C) or each byte of a lone surrogate's
# encoding (three: ED A0 80 for U+D800, ED B3 BF for U+DCFF), none of which
# starts a valid UTF-8 sequence after the ED.
R = "\ufffd"
# SPEC §2/§3 at the defaults: rate 60, idle 120000, total 600000, 5 retries,
# bound 4833, hint cap 4, schedule 5·4·1000 = 20000.
DEFAULT_NUMBERS = (60, 120000, 600000, 5, 4833, 4, 20000, True, True)


def numbers(budget: pacer.Budget) -> tuple:
    return (budget.rate_per_minute, budget.idle_timeout_ms, budget.total_timeout_ms, budget.max_retries,
            budget.wait_bound_ms, budget.hint_cap_s, budget.refusal_schedule_ms, budget.can_refuse,
            budget.enabled)


def test_undecodable_environment_text_is_malformed_not_fatal(caplog: pytest.LogCaptureFixture,
                                                             registry: pacer.NoticeRegistry) -> None:
    # os.environ holds undecodable bytes as lone surrogates.
    caplog.set_level(logging.WARNING, logger="pacer")
    budget = pacer.Budget.from_env({"PACER_RATE_PER_MIN": "6\udcff0"}, notice_registry=registry)
    assert numbers(budget) == DEFAULT_NUMBERS
    (notice,) = budget.notices
    assert (notice.kind, notice.raw, notice.values) == (pacer.NoticeKind.RATE_MALFORMED, "6\udcff0", (60, 0, 0))
    text = f'ignoring new-connection rate "6{R * 3}0": not a whole number of connections per minute; using 60/minute'
    assert (notice.text, notice.key) == (text, f"rate:6{R * 3}0")
    assert messages(caplog) == [text]


@pytest.mark.parametrize("value", ["\ud800", "12\x00x"], ids=["lone surrogate", "NUL"])
def test_invalid_setting_text_gives_the_default_and_a_notice(value: str, caplog: pytest.LogCaptureFixture,
                                                             registry: pacer.NoticeRegistry) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    shown = {"\ud800": R * 3, "12\x00x": f"12{R}x"}[value]
    budget = pacer.Budget.resolve(rate_per_minute=value, notice_registry=registry)
    # "12\0x" must never read as 12 (C would stop at the NUL): the default, 60.
    assert numbers(budget) == DEFAULT_NUMBERS
    (notice,) = budget.notices
    assert (notice.kind, notice.raw, notice.values) == (pacer.NoticeKind.RATE_MALFORMED, value, (60, 0, 0))
    text = f'ignoring new-connection rate "{shown}": not a whole number of connections per minute; using 60/minute'
    assert (notice.text, notice.key) == (text, f"rate:{shown}")
    # Logged once per key, like any notice (the registry reads the raw text too).
    pacer.Budget.resolve(rate_per_minute=value, notice_registry=registry)
    assert messages(caplog) == [text]
    assert registry.first_time(notice) is False


def test_invalid_text_in_every_setting(registry: pacer.NoticeRegistry) -> None:
    budget = pacer.Budget.resolve("\x00", "1\ud800", "60\x000", "\udfff", notice_registry=registry)
    assert numbers(budget) == DEFAULT_NUMBERS
    assert [(n.kind, n.raw, n.text) for n in budget.notices] == [
        (pacer.NoticeKind.RATE_MALFORMED, "\x00",
         f'ignoring new-connection rate "{R}": not a whole number of connections per minute; using 60/minute'),
        (pacer.NoticeKind.IDLE_MALFORMED, "1\ud800",
         f'ignoring idle timeout "1{R * 3}": not a whole number of milliseconds; using 120000ms'),
        (pacer.NoticeKind.TOTAL_MALFORMED, "60\x000",
         f'ignoring total timeout "60{R}0": not a whole number of milliseconds; using 600000ms'),
        (pacer.NoticeKind.RETRIES_MALFORMED, "\udfff",
         f'ignoring max retries "{R * 3}": not a whole number; using 5'),
    ]
    # The environment path reads the same way, a NUL included.
    env = pacer.Budget.from_env({"PACER_RATE_PER_MIN": "12\x00x", "PACER_MAX_RETRIES": "3\x00"},
                                notice_registry=registry)
    assert numbers(env) == DEFAULT_NUMBERS
    assert [(n.kind, n.raw) for n in env.notices] == [(pacer.NoticeKind.RATE_MALFORMED, "12\x00x"),
                                                       (pacer.NoticeKind.RETRIES_MALFORMED, "3\x00")]


def test_a_failing_handler_never_fails_a_call(registry: pacer.NoticeRegistry) -> None:
    class Exploding(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            raise RuntimeError("sink down")

    class ExplodingFilter(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("filter down")

    log = logging.getLogger("pacer")
    handler, flt = Exploding(), ExplodingFilter()
    log.addHandler(handler)
    log.addFilter(flt)
    raise_exceptions = logging.raiseExceptions
    logging.raiseExceptions = False
    try:
        budget = pacer.Budget.resolve("601", notice_registry=registry)
        p = pacer.Pacer(rate_per_minute=1, clock=FakeClock(0), notice_registry=registry)
    finally:
        log.removeHandler(handler)
        log.removeFilter(flt)
        logging.raiseExceptions = raise_exceptions
    assert budget.rate_per_minute == 600
    assert p.reserve(0).wait_ms == 0


def test_registry_first_time_directly(registry: pacer.NoticeRegistry) -> None:
    (notice,) = pacer.Budget.resolve(max_retries="6", notice_registry=pacer.NoticeRegistry()).notices
    assert notice.kind is pacer.NoticeKind.RETRIES_CLAMPED
    assert notice.values == (5, 120000, 0)
    assert notice.text == 'max retries "6" is more than a 120000ms idle timeout can hold; using 5'
    assert registry.first_time(notice) is True
    assert registry.first_time(notice) is False
    registry.clear()
    assert registry.first_time(notice) is True
    with pytest.raises(TypeError, match="notice"):
        registry.first_time("retries:6")  # type: ignore[arg-type]


def test_kind_names_are_the_cores(registry: pacer.NoticeRegistry) -> None:
    from pacer._native import ffi, lib

    assert len(pacer.NoticeKind) == 12
    for kind in pacer.NoticeKind:
        assert ffi.string(lib.pacer_notice_kind_name(kind)).decode() == kind.name.lower()


def test_notice_keys_are_namespaced(registry: pacer.NoticeRegistry) -> None:
    # SPEC §2: keys namespaced by kind: rate:<raw>, disabled:<r>:<idle>…, norefuse:<rate>:<r>:<bound>.
    (rate,) = pacer.Budget.resolve(" 9x", notice_registry=registry).notices
    assert rate.key == "rate: 9x"
    (disabled,) = pacer.Budget.resolve(idle_timeout_ms="14001", notice_registry=registry).notices
    assert disabled.key == "disabled:3:14001:60"
    (norefuse,) = pacer.Budget.resolve("1", notice_registry=registry).notices
    assert norefuse.key == "norefuse:1:5:4833"
    hostile, _ = pacer.Budget.resolve("disabled:3:14001", idle_timeout_ms="14001", notice_registry=registry).notices
    assert hostile.key == "rate:disabled:3:14001" != disabled.key
