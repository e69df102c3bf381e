"""RedisPacer and AsyncRedisPacer against real redis-servers
(docs/fleet-clients.md): the engine auto chooses, the answers, NOSCRIPT,
pacer errors, the failure policies when the server is paused, killed or
unreachable, cancellation and forget releasing in the server.

The server's clock moves between calls, so no test expects an exact wait
past the burst or times anything: the assertions are answers, fallbacks
and the server's counters. With rate 60, burst 2, idle 30000 and 3 retries
(SPEC §3: wait bound 2000 ms, hint cap 2 s), a fresh bucket admits two
calls at once, the third after 0 < w <= 1000 ms (one token at 1/s, less
the time since the first call), and a call whose required wait exceeds the
bound is refused with the hint capped at 2 s. That needs the calls within
a second of each other, which a loaded machine does not promise: a test
whose sequence must not depend on the machine's speed uses LONG (a token
every 10 s): the third call waits unless 10 s pass after the first, and
the fourth is refused unless 5 s pass."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pacer
from pacer import (
    AdmitPath,
    AsyncRedisPacer,
    RedisAdmitted,
    RedisBooked,
    RedisPacer,
    RedisPacerError,
    RedisRefused,
)
from pacer import _redis

from conftest import REPO_ROOT
from redis_server import REDIS_SERVER, RedisServer, command_calls, free_port, module_path

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed (scripts/redis-deps.sh)")

CONFIG: dict[str, Any] = {"rate_per_minute": 60, "burst": 2, "idle_timeout_ms": 30000, "max_retries": 3}
BOUND_MS = 2000  # SPEC §3: min(15000, floor((30000 - 14000) / 8))
HINT_CAP_S = 2  # max(1, floor(2000 / 1000))
LONG: dict[str, Any] = {"rate_per_minute": 6, "burst": 2, "idle_timeout_ms": 300000, "max_retries": 5}
LONG_BOUND_MS = 15000  # SPEC §3: min(15000, floor((300000 - 62000) / 12))
LONG_HINT_CAP_S = 15  # max(1, floor(15000 / 1000))
SCRIPT = (REPO_ROOT / "redis" / "pacer.lua").read_bytes()


def needs_module() -> str:
    path = module_path()
    if path is None:
        pytest.skip("PACER_REDIS_MODULE is not set (scripts/test-python.sh builds and sets it)")
    return path


# ------------------------------------------------------------ servers


@pytest.fixture(scope="module")
def module_server() -> Iterator[RedisServer]:
    with RedisServer(module=needs_module()) as server:
        yield server


@pytest.fixture(scope="module")
def function_server() -> Iterator[RedisServer]:
    """A server without the module, with the library loaded as docs/redis.md tells operators."""
    with RedisServer() as server:
        with server.client() as admin:
            admin.execute_command("FUNCTION", "LOAD", b"#!lua name=pacer\n" + SCRIPT)
        yield server


@pytest.fixture(scope="module")
def plain_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(params=["module_server", "function_server", "plain_server"])
def each_engine(request: pytest.FixtureRequest) -> RedisServer:
    """Each engine's server, in turn: with the module, with only the
    function library, plain (the script)."""
    server: RedisServer = request.getfixturevalue(request.param)
    return server


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, to pause, kill and restart (with the
    module when it is built, else plain: the script)."""
    with RedisServer(module=module_path()) as server:
        yield server


# ------------------------------------------------------------ sync and async alike


class Driver:
    """Runs a test body against RedisPacer or AsyncRedisPacer: ``d(x)``
    is ``x`` for the synchronous class and the awaited ``x`` for asyncio
    (one event loop for the test)."""

    def __init__(self, flavor: str) -> None:
        self.flavor = flavor
        self.loop = asyncio.new_event_loop() if flavor == "async" else None
        self.pacers: list[Any] = []

    def pacer(self, **kwargs: Any) -> Any:
        cls = AsyncRedisPacer if self.flavor == "async" else RedisPacer
        made = cls(**kwargs)
        self.pacers.append(made)
        return made

    def __call__(self, value: Any) -> Any:
        if self.loop is not None:
            return self.loop.run_until_complete(value)
        return value

    def close(self) -> None:
        for made in self.pacers:
            self(made.close())
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def d(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver = Driver(request.param)
    try:
        yield driver
    finally:
        driver.close()


_keys = iter(range(1_000_000))


def fresh_key(tag: str) -> str:
    return f"pacer-test:{tag}:{os.getpid()}:{next(_keys)}"


def outage_records(caplog: pytest.LogCaptureFixture, started: bool) -> list[Any]:
    return [r.pacer_outage for r in caplog.records
            if hasattr(r, "pacer_outage") and r.pacer_outage.started is started]


def assert_burst_then_paced(d: Driver, fleet: Any) -> None:
    """On a LONG bucket: two admissions at once, a third after a wait, then,
    past the bound, a refusal with the capped hint (docs/redis.md replies,
    SPEC §3)."""
    first, second = d(fleet.reserve()), d(fleet.reserve())
    for outcome in (first, second):
        assert isinstance(outcome, RedisAdmitted)
        assert (outcome.wait_ms, outcome.path, outcome.fallback) == (0, AdmitPath.PACED, None)
        assert outcome.ticket is not None and outcome.ticket.debit_units == 60000
        assert outcome.ticket.key == fleet.key and outcome.ticket.fallback is None
    third = d(fleet.reserve())
    assert isinstance(third, RedisAdmitted) and third.path is AdmitPath.PACED and third.fallback is None
    assert 0 < third.wait_ms <= 10000
    fourth = d(fleet.reserve())
    assert isinstance(fourth, RedisRefused) and isinstance(fourth, pacer.Refused)
    assert fourth.retry_after_s == LONG_HINT_CAP_S and fourth.required_wait_ms > LONG_BOUND_MS
    assert fourth.fallback is None
    assert fourth.response().headers["retry-after"] == str(LONG_HINT_CAP_S)  # the local pacer's SPEC §9 answer
    # Giving the third back refunds its token in the server.
    assert d(fleet.release(third.ticket)) is True
    assert d(fleet.release(third.ticket)) is False  # released already
    info = d(fleet.info())
    assert (info["admitted"], info["refused"], info["released"]) == (3, 1, 1)
    assert (info["rate_per_min"], info["burst"], info["wait_bound_ms"], info["mode"]) == (
        6, 2, LONG_BOUND_MS, "refusing")


# ------------------------------------------------------------ the script copy


def test_script_copy_is_the_repository_file() -> None:
    """The package's pacer.lua (package data that setup.py copies from
    redis/pacer.lua at build time, read from the installed package) is
    redis/pacer.lua byte for byte."""
    assert _redis.script_text() == SCRIPT
    installed = Path(pacer.__file__).parent / "pacer.lua"
    assert installed.read_bytes() == SCRIPT


# ------------------------------------------------------------ engines


def test_auto_chooses_the_module(d: Driver, module_server: RedisServer) -> None:
    fleet = d.pacer(url=module_server.url, key=fresh_key("module"), **LONG)
    assert fleet.engine is None
    assert_burst_then_paced(d, fleet)
    assert fleet.engine == "module"


def test_auto_chooses_the_function(d: Driver, function_server: RedisServer) -> None:
    fleet = d.pacer(url=function_server.url, key=fresh_key("function"), **LONG)
    assert_burst_then_paced(d, fleet)
    assert fleet.engine == "function"
    with function_server.client() as admin:
        assert admin.execute_command("SCRIPT", "EXISTS", _sha()) == [0]  # nothing loaded as a script


def test_auto_chooses_the_script(d: Driver, plain_server: RedisServer) -> None:
    fleet = d.pacer(url=plain_server.url, key=fresh_key("script"), **LONG)
    assert_burst_then_paced(d, fleet)
    assert fleet.engine == "script"
    with plain_server.client() as admin:
        assert admin.execute_command("SCRIPT", "EXISTS", _sha()) == [1]
        assert admin.execute_command("FUNCTION", "LIST") == []  # the client never loads a function


def test_a_server_that_refuses_the_listings_gets_the_script(d: Driver) -> None:
    """MODULE and FUNCTION refused (as managed services do): neither is taken as there."""
    extra = ("--rename-command", "MODULE", "", "--rename-command", "FUNCTION", "")
    with RedisServer(extra=extra) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("refusing"), **CONFIG)
        first = d(fleet.reserve())
        assert isinstance(first, RedisAdmitted) and first.fallback is None
        assert fleet.engine == "script"
        d(fleet.close())


@pytest.mark.parametrize("engine", ["module", "function", "script"])
def test_a_forced_engine_is_used(d: Driver, module_server: RedisServer, engine: str) -> None:
    """On a server with the module and the library, each engine can be forced;
    all three read and write the same key."""
    with module_server.client() as admin:
        admin.execute_command("FUNCTION", "LOAD", "REPLACE", b"#!lua name=pacer\n" + SCRIPT)
    fleet = d.pacer(url=module_server.url, key=fresh_key(f"forced-{engine}"), engine=engine, **CONFIG)
    first = d(fleet.reserve())
    assert isinstance(first, RedisAdmitted) and first.wait_ms == 0 and first.fallback is None
    assert fleet.engine == engine
    other = d.pacer(url=module_server.url, key=fleet.key, engine="module", **CONFIG)
    assert d(other.info())["admitted"] == 1


def test_noscript_after_script_flush_loads_again(d: Driver, plain_server: RedisServer) -> None:
    fleet = d.pacer(url=plain_server.url, key=fresh_key("noscript"), **CONFIG)
    assert d(fleet.reserve()).fallback is None
    with plain_server.client() as admin:
        admin.execute_command("SCRIPT", "FLUSH")
        assert admin.execute_command("SCRIPT", "EXISTS", _sha()) == [0]
    carried = command_calls(plain_server, "eval")
    second = d(fleet.reserve())
    assert isinstance(second, RedisAdmitted) and second.wait_ms == 0 and second.fallback is None
    assert not fleet.in_outage
    assert d(fleet.info())["admitted"] == 2
    with plain_server.client() as admin:
        assert admin.execute_command("SCRIPT", "EXISTS", _sha()) == [1]
    # The retry carried the script (EVAL): a node whose cache is still
    # empty (a cluster's replica promoted after the reload) runs it too.
    assert command_calls(plain_server, "eval") - carried == 1


def _sha() -> str:
    import hashlib

    return hashlib.sha1(SCRIPT).hexdigest()


# ------------------------------------------------------------ the client

def test_an_existing_client_is_accepted(module_server: RedisServer) -> None:
    import redis
    import redis.asyncio

    with redis.Redis(port=module_server.port, decode_responses=True) as client:
        with RedisPacer(client=client, key=fresh_key("client"), **CONFIG) as fleet:
            outcome = fleet.reserve()
            assert isinstance(outcome, RedisAdmitted) and outcome.ticket is not None
            assert fleet.release(outcome.ticket) is True
            assert fleet.info()["released"] == 1
        assert client.ping()  # the caller's client stays open

    async def main() -> None:
        client = redis.asyncio.Redis(port=module_server.port, protocol=3)
        async with AsyncRedisPacer(client=client, key=fresh_key("aclient"), **CONFIG) as fleet:
            outcome = await fleet.reserve()
            assert isinstance(outcome, RedisAdmitted) and outcome.ticket is not None
            assert await outcome.release() is True
            assert (await fleet.info())["released"] == 1
        await client.aclose()

    asyncio.run(main())


def test_the_asyncio_pacer_constructs_without_warnings() -> None:
    """The asyncio pacer's own connections get redis.asyncio's Retry: given a
    synchronous one, redis-py 8 warns on construction (an error under
    ``python -W error``)."""
    import warnings

    import redis.asyncio

    url = f"redis://127.0.0.1:{free_port()}"

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(url)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for fleet in (AsyncRedisPacer(url=url, key="k", **CONFIG), AsyncRedisPacer(client=client, key="k")):
                await fleet.close()
        await client.aclose()

    asyncio.run(main())


def test_settings_are_checked() -> None:
    with pytest.raises(TypeError, match="exactly one of url=, client= and startup_nodes="):
        RedisPacer(key="k")
    with pytest.raises(ValueError, match="engine"):
        RedisPacer(url="redis://127.0.0.1:1", key="k", engine="lua")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_failure"):
        RedisPacer(url="redis://127.0.0.1:1", key="k", on_failure="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="fleet_size"):
        RedisPacer(url="redis://127.0.0.1:1", key="k", fleet_size=0)
    with pytest.raises(TypeError, match="key"):
        RedisPacer(url="redis://127.0.0.1:1", key=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rate_per_minute"):
        RedisPacer(url="redis://127.0.0.1:1", key="k", rate_per_minute=601)


def test_the_timeout_is_at_most_the_wait_bound() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    assert RedisPacer(url=url, key="k", **CONFIG).timeout_ms == 1000  # min(2000, 1000)
    # idle 10000, 2 retries: bound floor((10000 - 6000) / 6) = 666
    assert RedisPacer(url=url, key="k", idle_timeout_ms=10000, max_retries=2).timeout_ms == 666
    assert RedisPacer(url=url, key="k", timeout_ms=5000, **CONFIG).timeout_ms == BOUND_MS
    assert RedisPacer(url=url, key="k", timeout_ms=300, **CONFIG).timeout_ms == 300
    assert RedisPacer(url=url, key="k").retry_after_ms == 1000


def test_disabled_mode_never_asks_redis(d: Driver, caplog: pytest.LogCaptureFixture) -> None:
    """Rate 0: admitted at once, locally, even with nothing listening."""
    fleet = d.pacer(url=f"redis://127.0.0.1:{free_port()}", key="k", rate_per_minute=0, on_failure="closed")
    for _ in range(3):
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted)
        assert (outcome.wait_ms, outcome.path, outcome.ticket, outcome.fallback) == (0, AdmitPath.DISABLED, None, None)
    assert d(fleet.reserve_or_book(3)).path is AdmitPath.DISABLED
    assert d(fleet.admit(key="r")).fallback is None
    assert fleet.engine is None and not fleet.in_outage
    assert outage_records(caplog, True) == []


# ------------------------------------------------------------ errors of the pacer


def test_a_configuration_mismatch_is_an_error_naming_both(d: Driver, each_engine: RedisServer) -> None:
    server = each_engine
    key = fresh_key("mismatch")
    first = d.pacer(url=server.url, key=key, **CONFIG)
    assert d(first.create()) is True
    assert d(first.create()) is False
    # No failure policy hides it.
    other = d.pacer(url=server.url, key=key, on_failure="open", **{**CONFIG, "rate_per_minute": 30})
    with pytest.raises(RedisPacerError) as caught:
        d(other.reserve())
    message = str(caught.value)
    assert "was created with rate_per_min=60 burst=2 idle_timeout_ms=30000 max_retries=3" in message
    assert "this call has rate_per_min=30 burst=2" in message
    assert not other.in_outage


def test_wrongtype_is_an_error(d: Driver, plain_server: RedisServer) -> None:
    key = fresh_key("wrongtype")
    with plain_server.client() as admin:
        admin.lpush(key, "x")
    fleet = d.pacer(url=plain_server.url, key=key, on_failure="open", **CONFIG)
    with pytest.raises(RedisPacerError, match="WRONGTYPE"):
        d(fleet.reserve())


def test_a_ticket_spent_elsewhere_is_an_error(d: Driver, module_server: RedisServer) -> None:
    key = fresh_key("spent")
    one = d.pacer(url=module_server.url, key=key, **CONFIG)
    two = d.pacer(url=module_server.url, key=key, **CONFIG)
    outcome = d(one.reserve())
    # The same ticket through another process's pacer: its own ticket object.
    twin = _redis.RedisTicket(two, key, outcome.ticket.text)
    assert d(two.release(twin)) is True
    with pytest.raises(RedisPacerError, match="ticket already released"):
        d(one.release(outcome.ticket))
    # Another pacer's ticket object is not this pacer's to release.
    assert d(two.release(outcome.ticket)) is False


# ------------------------------------------------------------ failure policies

POLICIES = ("local", "open", "closed")


def policy_pacers(d: Driver, url: str, **kwargs: Any) -> dict[str, Any]:
    """A pacer of each policy on LONG, so the local policy's second answer
    does not depend on the machine's speed (``assert_policy_answer``)."""
    return {policy: d.pacer(url=url, key=fresh_key(f"policy-{policy}"), on_failure=policy, **LONG, **kwargs)
            for policy in POLICIES}


def assert_policy_answer(d: Driver, fleet: Any) -> Any:
    """Two calls answered by the policy (docs/fleet-clients.md, "When Redis fails")."""
    first, second = d(fleet.reserve()), d(fleet.reserve())
    policy = fleet.on_failure
    for outcome in (first, second):
        assert outcome.fallback == policy
    if policy == "open":
        for outcome in (first, second):
            assert isinstance(outcome, RedisAdmitted)
            assert (outcome.wait_ms, outcome.path, outcome.ticket) == (0, AdmitPath.DISABLED, None)
    elif policy == "closed":
        for outcome in (first, second):
            assert isinstance(outcome, RedisRefused) and outcome.retry_after_s == LONG_HINT_CAP_S
    else:
        # fleet_size 2: the local pacer runs at rate 3 (6 // 2), burst 1
        # (2 // 2), with LONG's budget (wait bound 15000 ms).
        local = fleet.fallback_pacer
        assert local is not None
        assert (local.config.rate_per_minute, local.config.burst, local.config.idle_timeout_ms) == (3, 1, 300000)
        assert isinstance(first, RedisAdmitted) and first.wait_ms == 0 and first.path is AdmitPath.PACED
        assert first.ticket is not None and first.ticket.fallback == "local" and first.ticket.text is None
        # The burst of 1 is spent: at 3/min a token takes 20 s, so the next
        # needs 20000 ms less what passed, past the 15000 ms bound (refused)
        # unless 5 s pass between the two. At 30/min it waited only while
        # less than 2 s had passed.
        assert isinstance(second, RedisRefused) and second.required_wait_ms > LONG_BOUND_MS
        assert (local.counters().admitted, local.counters().refused) == (1, 1)
    return first


def test_policies_when_nothing_listens(d: Driver, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    fleets = policy_pacers(d, f"redis://127.0.0.1:{free_port()}", fleet_size=2, retry_after_ms=0)
    for fleet in fleets.values():
        assert_policy_answer(d, fleet)
        assert fleet.in_outage
    # One notice per pacer for the outage, however many calls failed.
    started = outage_records(caplog, True)
    assert sorted(n.policy for n in started) == sorted(POLICIES)
    assert all("Connection" in n.error or "connect" in n.error.lower() for n in started)
    assert outage_records(caplog, False) == []
    # create and info have no policy: the failure is raised.
    import redis

    with pytest.raises(redis.exceptions.ConnectionError):
        d(fleets["open"].info())


def test_policies_while_the_server_is_paused(d: Driver, own_server: RedisServer, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """No reply within the timeout. The outage timer reads a clock the test
    moves, so each pacer asks the paused server once (one timeout each, well
    inside the pause) and asks again only when the test says retry_after_ms
    has passed."""
    caplog.set_level(logging.WARNING, logger="pacer")
    now = [1000.0]
    monkeypatch.setattr(_redis, "_monotonic", lambda: now[0])
    fleets = policy_pacers(d, own_server.url, fleet_size=2, timeout_ms=500, retry_after_ms=1000)
    for fleet in fleets.values():
        assert d(fleet.reserve()).fallback is None  # the engine is known, the bucket made
    with own_server.client() as admin:
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        for fleet in fleets.values():
            assert_policy_answer(d, fleet)
            assert fleet.in_outage
        assert len(outage_records(caplog, True)) == 3
        admin.ping()  # answered when the pause is over
    now[0] += 1.0  # retry_after_ms has passed
    for fleet in fleets.values():
        outcome = d(fleet.reserve())
        assert outcome.fallback is None
        assert not fleet.in_outage
        # Each reply is the one asked for (a late reply was never read as the next one's).
        assert d(fleet.info())["rate_per_min"] == 6
    assert len(outage_records(caplog, False)) == 3


def test_policies_when_the_server_is_killed_and_restarted(d: Driver, own_server: RedisServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="pacer")
    fleets = policy_pacers(d, own_server.url, fleet_size=2, retry_after_ms=50)
    engine = "module" if own_server.module else "script"
    for fleet in fleets.values():
        assert d(fleet.reserve()).fallback is None
        assert fleet.engine == engine
    own_server.kill()
    issued = {policy: assert_policy_answer(d, fleet) for policy, fleet in fleets.items()}
    own_server.start()  # the same port, an empty server (and script cache)
    time.sleep(0.1)  # past retry_after_ms
    for fleet in fleets.values():
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None
        assert outcome.wait_ms == 0 and outcome.ticket is not None and outcome.ticket.text is not None
        assert fleet.engine == engine
        assert d(fleet.info())["admitted"] == 1  # a new bucket: the old one died with the server
    assert len(outage_records(caplog, True)) == 3
    assert len(outage_records(caplog, False)) == 3
    # A ticket the local policy issued goes back to the local pacer, never to Redis.
    fleet = fleets["local"]
    ticket = issued["local"].ticket
    assert d(fleet.release(ticket)) is True
    assert fleet.fallback_pacer.counters().released == 1
    assert d(fleet.info())["released"] == 0
    assert d(fleet.release(ticket)) is False


def test_a_script_server_restart_reloads_the_script(d: Driver, caplog: pytest.LogCaptureFixture) -> None:
    with RedisServer() as server:
        fleet = d.pacer(url=server.url, key=fresh_key("restart-script"), retry_after_ms=0, **CONFIG)
        assert d(fleet.reserve()).fallback is None and fleet.engine == "script"
        server.kill()
        assert d(fleet.reserve()).fallback == "local"
        server.start()
        outcome = d(fleet.reserve())
        assert outcome.fallback is None and fleet.engine == "script"
        d(fleet.close())


def test_redis_is_asked_again_only_after_retry_after_ms(d: Driver, monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    """The outage timer, on a clock the test moves: within retry_after_ms
    the policy answers even though the server is back; after it, Redis."""
    caplog.set_level(logging.WARNING, logger="pacer")
    now = [1000.0]
    monkeypatch.setattr(_redis, "_monotonic", lambda: now[0])
    with RedisServer(module=module_path()) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("retry-after"), retry_after_ms=5000, **LONG)
        first = d(fleet.reserve())
        assert first.fallback is None
        for _ in range(2):
            assert isinstance(d(fleet.reserve()), RedisAdmitted)  # the bucket is 10 s in debt
        # Booked in Redis: LONG's fourth call has its slot 20 s away less
        # what passed, past the bound of 15 s unless 5 s passed since the
        # first (at 60/min the five calls had to land within a second).
        refused = d(fleet.admit(key="request-1"))
        assert isinstance(refused, RedisRefused) and refused.fallback is None
        assert fleet.pending_keys == 1
        server.kill()
        assert d(fleet.reserve()).fallback == "local"
        # A ticket of the server cannot be released during the outage: not
        # refunded (False, not an error), and still releasable later.
        assert d(fleet.release(first.ticket)) is False and not first.ticket.spent
        # A keyed request forgotten now is forgotten; its booking passes with its slot.
        assert d(fleet.forget("request-1")) is False
        assert fleet.pending_keys == 0
        server.start()
        now[0] += 4.999
        assert d(fleet.reserve()).fallback == "local"  # not asked yet
        assert fleet.in_outage
        now[0] += 0.001
        back = d(fleet.reserve())
        assert back.fallback is None and not fleet.in_outage
        assert d(fleet.info())["admitted"] == 1  # a new bucket: the restarted server kept nothing
        started, ended = outage_records(caplog, True), outage_records(caplog, False)
        assert len(started) == 1 and len(ended) == 1
        assert started[0].key == fleet.key and started[0].policy == "local"


def test_a_busy_server_is_a_failure(d: Driver) -> None:
    """BUSY (a script running past busy-reply-threshold) is answered by the policy."""
    import threading

    import redis

    with RedisServer(extra=("--busy-reply-threshold", "10")) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("busy"), on_failure="closed", retry_after_ms=0, **CONFIG)
        assert d(fleet.reserve()).fallback is None
        looping = server.client()
        errors: list[BaseException] = []

        def spin() -> None:
            try:
                looping.eval("while true do end", 0)
            except redis.exceptions.RedisError as error:
                errors.append(error)

        thread = threading.Thread(target=spin)
        thread.start()
        try:
            with server.client() as admin:
                while True:  # until the server says BUSY (the loop has started)
                    try:
                        admin.ping()
                    except redis.exceptions.ResponseError as error:
                        assert str(error).startswith("BUSY")
                        break
                outcome = d(fleet.reserve())
                assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed"
                admin.execute_command("SCRIPT", "KILL")
        finally:
            thread.join(timeout=30)
            looping.close()
        assert errors  # the loop was killed
        assert d(fleet.reserve()).fallback is None


def test_failures_without_a_reply_are_outages() -> None:
    """A connection refused or lost and no reply in time are outages, as
    are the replies that say so; an error reply of the pacer is an error
    carrying the reply's text (docs/fleet-clients.md)."""
    import redis.exceptions as rex

    for failure in (rex.ConnectionError("lost"), rex.TimeoutError("late"), ConnectionRefusedError(),
                    asyncio.TimeoutError(), TimeoutError(), OSError("unreachable")):
        assert _redis._failure_class(failure) == "outage", failure
    # An error the client raised itself, not a reply: neither (raised as it is).
    assert _redis._failure_class(ValueError("a bug")) is None
    fleet = RedisPacer(url=f"redis://127.0.0.1:{free_port()}", key="k", **CONFIG)
    surfaced = fleet._surfaced(rex.ResponseError("pacer: ticket already released", status_code="ERR"))
    assert isinstance(surfaced, RedisPacerError) and surfaced.reply == "ERR pacer: ticket already released"
    assert str(surfaced) == "pacer: ticket already released"
    surfaced = fleet._surfaced(rex.NoPermissionError("this user has no permissions", status_code="NOPERM"))
    assert isinstance(surfaced, RedisPacerError) and surfaced.reply == "NOPERM this user has no permissions"
    assert not fleet.in_outage
    assert isinstance(fleet._surfaced(rex.ReadOnlyError("replica", status_code="READONLY")), _redis._Down)
    assert fleet.in_outage
    fleet.close()


REPLIES = REPO_ROOT / "tests" / "fleet" / "replies.json"


def test_error_replies_are_classified_as_every_client_does() -> None:
    """tests/fleet/replies.json: every client gives each reply the same
    class. The text is classified as the server sent it, and so is the
    error redis-py raises for it (its parser strips the codes it has classes
    for and keeps them as ``status_code``), and the same error as a redis-py
    without ``status_code`` raises it."""
    import json

    from redis._parsers.base import BaseParser

    cases = json.loads(REPLIES.read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 20
    for case in cases:
        reply, expected = case["reply"], case["class"]
        assert _redis._reply_class(reply) == expected, case
        error = BaseParser.parse_error(reply)
        assert _redis._reply_text(error) == reply, case
        assert _redis._failure_class(error) == expected, case
        del error.status_code
        assert _redis._failure_class(error) == expected, case


def test_a_full_server_is_a_failure(d: Driver) -> None:
    """maxmemory reached: OOM from the module and the function, "ERR OOM
    ... script: ..." from the script; each answered by the policy."""
    with RedisServer(module=module_path()) as server:
        engines = _load_function(server)
        fleets = [d.pacer(url=server.url, key=fresh_key(f"oom-{engine}"), engine=engine, on_failure="closed",
                          retry_after_ms=0, **CONFIG) for engine in engines]
        for fleet in fleets:
            assert d(fleet.create()) is True  # the engine is known (the script loaded)
        with server.client() as admin:
            admin.config_set("maxmemory", 1)
            for fleet in fleets:
                outcome = d(fleet.reserve())
                assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed", fleet.engine
                assert fleet.in_outage
            admin.config_set("maxmemory", 0)
        for fleet in fleets:
            assert d(fleet.reserve()).fallback is None and not fleet.in_outage


def test_a_replica_is_a_failure(d: Driver) -> None:
    """A client sent to a replica (a failover it has not followed): READONLY
    from the module and the function, "ERR READONLY ... script: ..." from the
    script, each answered by the policy; what only reads (info) is answered."""
    with RedisServer(module=module_path()) as primary, \
            RedisServer(module=module_path(), extra=("--replicaof", "127.0.0.1", str(primary.port))) as replica:
        engines = _load_function(primary)
        key = fresh_key("replica")
        with primary.client() as admin:
            writer = d.pacer(url=primary.url, key=key, **CONFIG)
            assert d(writer.create()) is True
            assert admin.execute_command("WAIT", 1, 10000) == 1  # the replica has the bucket and the library
        for engine in engines:
            fleet = d.pacer(url=replica.url, key=key, engine=engine, on_failure="closed", **CONFIG)
            outcome = d(fleet.reserve())
            assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed", engine
            assert fleet.in_outage


def _load_function(server: RedisServer) -> list[str]:
    """Loads the library on ``server``; the engines it then has."""
    with server.client() as admin:
        admin.execute_command("FUNCTION", "LOAD", "REPLACE", b"#!lua name=pacer\n" + SCRIPT)
    return (["module"] if server.module else []) + ["function", "script"]


def test_an_engine_gone_under_the_client_is_found_again(d: Driver, caplog: pytest.LogCaptureFixture) -> None:
    """The module unloaded, the function deleted, the script cache emptied
    under a client of engine auto: each call asks again which engine there
    is, loads the script when that is the one, and is answered by the
    server on the same bucket, with no outage."""
    caplog.set_level(logging.WARNING, logger="pacer")
    with RedisServer(module=needs_module(), extra=("--enable-module-command", "yes")) as server:
        _load_function(server)
        fleet = d.pacer(url=server.url, key=fresh_key("gone"), **CONFIG)
        assert d(fleet.create()) is True and fleet.engine == "module"
        with server.client() as admin:
            for change, engine in ((("MODULE", "UNLOAD", "pacer"), "function"),
                                   (("FUNCTION", "DELETE", "pacer"), "script"),
                                   (("SCRIPT", "FLUSH"), "script")):
                admin.execute_command(*change)
                outcome = d(fleet.reserve())
                assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None, change
                assert fleet.engine == engine and not fleet.in_outage
        assert d(fleet.info())["admitted"] == 3
    assert outage_records(caplog, True) == []


def test_an_engine_missing_after_the_retry_is_a_failure(d: Driver, plain_server: RedisServer,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A forced engine the server does not have answers "engine gone" again
    after the retry: an outage, answered by the policy."""
    caplog.set_level(logging.WARNING, logger="pacer")
    for engine, reply in (("function", "ERR Function not found"), ("module", "ERR unknown command 'PACER.RESERVE'")):
        fleet = d.pacer(url=plain_server.url, key=fresh_key(f"missing-{engine}"), engine=engine, on_failure="closed",
                        **CONFIG)
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed"
        assert fleet.in_outage and fleet.engine == engine
        assert outage_records(caplog, True)[-1].error.startswith(reply)


def test_an_acl_refusal_is_an_error(d: Driver) -> None:
    """NOPERM is neither an outage nor an engine change: an error carrying
    the reply, whatever the policy."""
    with RedisServer() as server:
        with server.client() as admin:
            admin.execute_command("ACL", "SETUSER", "limited", "on", ">secret", "~*", "&*", "+@all", "-evalsha")
        url = f"redis://limited:secret@127.0.0.1:{server.port}/0"
        fleet = d.pacer(url=url, key=fresh_key("acl"), on_failure="open", **CONFIG)
        with pytest.raises(RedisPacerError) as caught:
            d(fleet.reserve())
        assert caught.value.reply.startswith("NOPERM ") and "evalsha" in caught.value.reply
        assert not fleet.in_outage


#: A library named pacer that answers in shapes no engine has, chosen by
#: the key (docs/redis.md has the real ones).
ODD_LIBRARY = b"""#!lua name=pacer
local shapes = {
  empty = {}, short = {'admitted'}, number = 7, text = 'admitted', nested = {{'admitted'}},
  ['nil-booking'] = {'booked', 1, false, 5, 0},
  ['bad-path'] = {'admitted', 0, '0.1.60000.0.0123456789abcdef', 'sideways', 0},
  ['bad-wait'] = {'admitted', 'soon', '0.1.60000.0.0123456789abcdef', 'paced', 0},
  ['long'] = {'refused', 1, 1000, 0, 'more'},
  ['unknown'] = {'maybe', 1, 2, 3},
}
redis.register_function('pacer', function(keys, args)
  if args[1] == 'release' or args[1] == 'create' then return 'yes' end
  if args[1] == 'info' then return 7 end
  return shapes[keys[1]]
end)
"""


def test_a_reply_of_an_unknown_shape_is_an_error(d: Driver) -> None:
    """Never a silent admission: a reply the client does not recognise is
    an error showing the reply, whatever the policy."""
    with RedisServer() as server:
        with server.client() as admin:
            admin.execute_command("FUNCTION", "LOAD", ODD_LIBRARY)
        for shape in ("empty", "short", "number", "text", "nested", "nil-booking", "bad-path", "bad-wait", "long",
                      "unknown"):
            fleet = d.pacer(url=server.url, key=shape, on_failure="open", **CONFIG)
            for call in (fleet.reserve, lambda: fleet.reserve_or_book(3)):
                with pytest.raises(RedisPacerError, match="unexpected reply"):
                    d(call())
            assert fleet.engine == "function" and not fleet.in_outage
        fleet = d.pacer(url=server.url, key="k", on_failure="open", **CONFIG)
        for call in (fleet.create, fleet.info,
                     lambda: fleet.release(_redis.RedisTicket(fleet, "k", "0.1.60000.0.0123456789abcdef"))):
            with pytest.raises(RedisPacerError, match="unexpected reply"):
                d(call())


def test_keyed_bookings_of_the_local_policy_stay_local(d: Driver) -> None:
    fleet = d.pacer(url=f"redis://127.0.0.1:{free_port()}", key="k", retry_after_ms=0, **LONG)
    # The local pacer (LONG, a fleet of 1: rate 6, burst 2, bound 15000 ms):
    # the burst, then a third that waits; the keyed fourth has its slot 20 s
    # away less what passed, past the bound unless 5 s pass, and within the
    # horizon of 5 retries (15000 + 5 * 15000 ms, SPEC §11): booked.
    outcomes = [d(fleet.reserve()) for _ in range(3)]
    assert all(isinstance(o, RedisAdmitted) and o.fallback == "local" for o in outcomes)
    refused = d(fleet.admit(key="request"))
    assert isinstance(refused, RedisRefused) and refused.fallback == "local"
    local = fleet.fallback_pacer
    counters = local.counters()
    # A booking is counted among the refusals (docs/metrics.md).
    assert (counters.admitted, counters.refused, counters.booked) == (3, 1, 1)
    assert fleet.pending_keys == 1
    released = local.counters().released
    assert d(fleet.forget("request")) is True
    assert local.counters().released == released + 1


# ------------------------------------------------------------ cancellation and forget


def test_a_cancelled_async_admit_releases_in_the_server(module_server: RedisServer) -> None:
    """LONG: the burst admits two at once; a token takes 10 s, so the third
    waits (and is cancelled in its wait) unless 10 s pass after the first,
    where at 60/min a second of delay let it through at once."""
    started = asyncio.Event()
    gate = asyncio.Event()

    async def sleep(seconds: float) -> None:
        started.set()
        await gate.wait()

    async def main() -> None:
        async with AsyncRedisPacer(url=module_server.url, key=fresh_key("cancel"), sleep=sleep,
                                   **LONG) as fleet:
            for _ in range(2):
                assert (await fleet.admit()).wait_ms == 0  # the burst: no sleep
            task = asyncio.create_task(fleet.admit())
            # The third waits (a test that fails rather than hangs if it does not).
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            info = await fleet.info()
            assert (info["admitted"], info["released"]) == (3, 1)

    asyncio.run(main())


def test_an_interrupted_blocking_admit_releases_in_the_server(module_server: RedisServer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """LONG: after the burst the third is granted 10000 ms less what passed
    since the first (a token takes 10 s), more than 0 unless 10 s pass.
    Interrupted in its wait, it is released, so the fourth is granted the
    same slot, 10000 ms after the first less what passed: still more than
    the timeout of 0 unless 10 s pass. At 60/min both needed the calls
    within a second."""

    def interrupted(seconds: float) -> None:
        assert 0 < seconds <= 10
        raise KeyboardInterrupt

    monkeypatch.setattr(_redis, "_blocking_sleep", interrupted)
    with RedisPacer(url=module_server.url, key=fresh_key("interrupt"), **LONG) as fleet:
        for _ in range(2):
            assert fleet.admit().wait_ms == 0
        with pytest.raises(KeyboardInterrupt):
            fleet.admit()
        # A granted wait longer than the caller's timeout is given back at once.
        with pytest.raises(TimeoutError):
            fleet.admit(timeout=0)
        info = fleet.info()
        assert (info["admitted"], info["released"]) == (4, 2)


def test_keyed_admit_books_and_forget_releases(d: Driver, module_server: RedisServer) -> None:
    fleet = d.pacer(url=module_server.url, key=fresh_key("keyed"), **LONG)
    for _ in range(3):
        assert isinstance(d(fleet.reserve()), RedisAdmitted)  # the bucket is 10 s in debt
    refused = d(fleet.admit(key="request-1"))
    # Booked (its slot 20 s away less what passed: past the bound of 15 s
    # unless 5 s passed, within the horizon), answered as a refusal.
    assert isinstance(refused, RedisRefused) and refused.fallback is None
    assert fleet.pending_keys == 1
    info = d(fleet.info())
    assert (info["booked"], info["released"]) == (1, 0)
    assert d(fleet.forget("request-1")) is True
    assert fleet.pending_keys == 0
    assert d(fleet.forget("request-1")) is False
    assert d(fleet.info())["released"] == 1


def test_bookings_unkeyed(d: Driver, module_server: RedisServer) -> None:
    # LONG: the third waits, and the slot after it is 20 s away less what
    # passed, past the bound of 15 s unless 5 s passed, and within the
    # horizon with 3 retries left (15000 + 3 * 15000 ms, SPEC §11).
    fleet = d.pacer(url=module_server.url, key=fresh_key("book"), **LONG)
    for _ in range(3):
        d(fleet.reserve())
    booked = d(fleet.reserve_or_book(3))
    assert isinstance(booked, RedisBooked) and isinstance(booked, pacer.Booked)
    assert 1 <= booked.retry_after_s <= 5 and booked.fallback is None  # ⌈(wait − bound) / 1000⌉
    booking = booked.booking
    assert booking.slot_ms > 0 and not booking.spent
    again = d(fleet.redeem(booking))  # its slot past the bound: not yet
    assert isinstance(again, RedisBooked) and again.booking is booking
    assert d(booking.release()) is True and booking.spent
    with pytest.raises(ValueError, match="redeemed or released already"):
        d(fleet.redeem(booking))
    # Beyond the horizon of 0 retries left (the bound), a plain refusal.
    assert isinstance(d(fleet.reserve_or_book(0)), RedisRefused)
    info = d(fleet.info())
    assert (info["booked"], info["released"]) == (1, 1)


def test_a_due_booking_is_admitted(d: Driver, module_server: RedisServer) -> None:
    """Burst 1 at rate 600: a booking made just after the burst is within
    the bound of its slot at once, so redeeming it admits on the booked path."""
    config = {"rate_per_minute": 600, "burst": 1, "idle_timeout_ms": 30000, "max_retries": 3}
    fleet = d.pacer(url=module_server.url, key=fresh_key("due"), **config)
    while True:  # spend until a booking comes back (each wait is at most the bound)
        outcome = d(fleet.reserve_or_book(3))
        if isinstance(outcome, RedisBooked):
            break
    admitted = None
    for _ in range(100):
        admitted = d(fleet.redeem(outcome.booking))
        if isinstance(admitted, RedisAdmitted):
            break
        time.sleep(0.05)
    assert isinstance(admitted, RedisAdmitted) and admitted.path is AdmitPath.BOOKED
    # The admission's ticket is the reply's (a fresh one from an engine that
    # issues one), not the booking's object; the booking is spent.
    assert admitted.ticket is not outcome.booking.ticket and outcome.booking.spent
    assert d(outcome.booking.release()) is False  # refused here: nothing sent
    assert d(fleet.release(admitted.ticket)) is True
    assert d(fleet.info())["released"] == 1


def test_a_redemption_admits_with_the_ticket_the_reply_carries(d: Driver) -> None:
    """REDEEM's admitted reply is ["admitted", wait_ms, ticket, "booked", 0]
    (docs/redis.md): the admission's ticket is built from item 3, on the
    same key, whatever the booking's text was, and the booking is spent:
    releasing it is refused here, without asking Redis (nothing listens, and
    no outage starts)."""
    fleet = d.pacer(url=f"redis://127.0.0.1:{free_port()}", key="k", on_failure="closed", **CONFIG)
    booking = _redis.RedisBooking(_redis.RedisTicket(fleet, "k", "7.3.60000.123456.0123456789abcdef"), 123456)
    fresh = "8.4.60000.0.fedcba9876543210"
    admitted = fleet._redemption(booking, [b"admitted", 0, fresh.encode(), b"booked", 0])
    assert isinstance(admitted, RedisAdmitted) and admitted.path is AdmitPath.BOOKED
    assert (admitted.wait_ms, admitted.fallback, admitted.clock_regressed) == (0, None, False)
    assert (admitted.ticket.text, admitted.ticket.key, admitted.ticket.spent) == (fresh, "k", False)
    assert booking.spent
    assert d(booking.release()) is False
    assert d(fleet.release(booking.ticket)) is False
    assert not fleet.in_outage


# ------------------------------------------------------------ adaptive pacing
#
# SPEC §14 on the fleet's bucket (the law in core/src/adaptive.rs), on the
# server's clock (no test sets AT). The clock runs, but each test runs well
# within a minute of the bucket's creation t₀. CONFIG's budget (3 retries,
# hint cap 2 s: schedule 6000 ms) makes ⌈60000/6000⌉ = 10 the lowest rate
# that can refuse; with floor 10 the rate in force is clamped to [10, 60]. A
# new bucket searches from L = 60, at the default ceiling 60 at any instant;
# a throttle with nothing counted ends the search with L = B − max(1, ⌊B/16⌋),
# B = min(R, L) = min(60, 60) = 60: 60 − max(1, 3) = 57 (probing, `again`),
# and, ending the first search less than a minute after t₀, pauses: the
# origin becomes t₀ + 60000 and the rate reads the lowest, 10, until then
# (every answer here is in the pause). A throttle after it is held (`at` =
# max(now, origin) = the origin: 0 ms into the 60000 ms hold) and changes
# nothing; an opening is counted in the origin's minute and changes nothing
# else.

ADAPTIVE = {**CONFIG, "adaptive_floor_per_min": 10}


def test_a_throttle_one_proxy_reports_slows_the_fleet(d: Driver, each_engine: RedisServer) -> None:
    server = each_engine
    key = fresh_key("adaptive")
    one = d.pacer(url=server.url, key=key, **ADAPTIVE)
    two = d.pacer(url=server.url, key=key, **ADAPTIVE)
    assert d(one.create()) is True
    info = d(one.info())
    # ADAPT 10 0 is stored with the ceiling as the rate, searching from L = 60, nothing counted.
    assert (info["rate_in_force"], info["adaptive_floor_per_min"], info["adaptive_ceiling_per_min"],
            info["limit_per_min"], info["probing"], info["again"], info["window"], info["opened"],
            info["opened_before"]) == (60, 10, 60, 60, 0, 0, 0, 0, 0)
    assert info["origin_ms"] <= info["now_ms"]
    created = info["origin_ms"]
    assert d(two.rate_in_force()) == 60
    # One proxy's throttle slows the other: to the lowest, 10, in the pause.
    assert d(one.observe("throttled")) == 10
    assert d(two.rate_in_force()) == 10
    assert d(two.observe(pacer.Outcome.THROTTLED)) == 10  # within the hold: nothing changes
    assert d(two.observe("opened")) == 10  # counted at the origin; still the pause at the server's clock
    info = d(two.info())
    # One decrease, the pause's: L = 57, probing, again, origin t₀ + 60000
    # still ahead of the server's clock (two's throttle held, not a second
    # decrease from its own instant). The throttle moved the counts (none) to
    # the origin's minute, window 0; the opening, at `at` = the origin, is
    # counted there: opened 1, opened_before 0.
    assert (info["limit_per_min"], info["probing"], info["again"], info["window"], info["opened"],
            info["opened_before"], info["rate_in_force"]) == (57, 1, 1, 0, 1, 0, 10)
    assert info["origin_ms"] == created + 60_000 and info["now_ms"] < info["origin_ms"]
    # The adaptive settings are the bucket's configuration.
    for other in ({}, {"adaptive_floor_per_min": 20}):
        mismatched = d.pacer(url=server.url, key=key, **{**CONFIG, **other})
        with pytest.raises(RedisPacerError, match="adaptive_floor_per_min=10"):
            d(mismatched.reserve())
    # A bad outcome raises and sends nothing.
    with pytest.raises(ValueError, match="outcome"):
        d(one.observe("slow"))
    with pytest.raises(TypeError, match="outcome"):
        d(one.observe(None))
    # OBSERVE needs the bucket.
    missing = d.pacer(url=server.url, key=fresh_key("adaptive-missing"), **ADAPTIVE)
    with pytest.raises(RedisPacerError, match="no bucket"):
        d(missing.observe("throttled"))


def test_reserve_and_book_carry_adapt(d: Driver, each_engine: RedisServer) -> None:
    """LONG's budget at rate 60, burst 1, floor 1: the schedule is 5 · 15 s
    = 75000 ms, so ⌈60000/75000⌉ = 1 is the lowest rate that can refuse and
    the rate in force is clamped to [1, 60]. 30 openings reported, then a
    throttle, end the first search at L = min(E, 60) with E = max(through,
    recent) = 30, or 29 when the clock's minute turned among the openings
    (recent = k + ⌊(30 − k)·left/60000⌋ = 29 for left < 60000, through =
    max(k, 30 − k) ≤ 29 for 0 < k < 30), less than a minute after the
    creation: the pause, in which the rate in force is the lowest, 1, as
    the throttle answers. The level the first debit emptied refills at the
    rate in force (docs/redis.md; an observation moves no level), a token a
    minute: a reservation then needs 60000 ms less what passed since the
    first, past the 15000 ms bound (refused) unless 45 s pass, where at
    60/min it waits at most 1000 ms. (With CONFIG's budget and floor 10 it
    needed 6000 ms less what passed, past the 2000 ms bound only while the
    32 calls between took less than 4 s.)"""
    config = {**LONG, "rate_per_minute": 60, "burst": 1, "adaptive_floor_per_min": 1}
    fleet = d.pacer(url=each_engine.url, key=fresh_key("adaptive-refill"), **config)
    first = d(fleet.reserve())
    assert isinstance(first, RedisAdmitted) and first.wait_ms == 0 and first.fallback is None
    for _ in range(30):
        assert d(fleet.observe("opened")) == 60  # searching, at the ceiling
    assert d(fleet.observe("throttled")) == 1  # the pause
    assert d(fleet.info())["limit_per_min"] in (30, 29)
    second = d(fleet.reserve())
    assert isinstance(second, RedisRefused) and second.fallback is None
    assert LONG_BOUND_MS < second.required_wait_ms <= 60000 and second.retry_after_s == LONG_HINT_CAP_S
    # BOOK … retries_left ADAPT floor ceiling on the same bucket, never a
    # configuration error: the same wait is within the horizon of 3 retries
    # left (15000 + 3 * 15000 = 60000 ms, SPEC §11), so it books.
    booked = d(fleet.reserve_or_book(3))
    assert isinstance(booked, RedisBooked) and booked.fallback is None
    assert d(fleet.info())["rate_in_force"] == 1


def test_adaptation_off_asks_nothing(d: Driver, plain_server: RedisServer) -> None:
    key = fresh_key("adaptive-off")
    fleet = d.pacer(url=plain_server.url, key=key, **CONFIG)
    assert d(fleet.observe("throttled")) == 60 and d(fleet.observe("opened")) == 60
    assert d(fleet.rate_in_force()) == 60
    with plain_server.client() as admin:
        assert admin.exists(key) == 0  # nothing was sent: the key was never made
    d(fleet.close())
    with pytest.raises(RuntimeError, match="closed"):
        d(fleet.observe("opened"))


def test_observe_while_redis_fails(d: Driver) -> None:
    """local reports to its fallback pacer, adaptive at ⌊rate/N⌋ between
    ⌊floor/N⌋ and ⌊ceiling/N⌋: N = 2 gives 30 between 5 and 30 (the lowest
    rate that can refuse, ⌈60000/6000⌉ = 10, above the floor 5: lowest 10).
    A throttle with nothing counted ends its search (L = 30 − max(1,
    ⌊30/16⌋) = 29) less than a minute after the fallback pacer began: the
    pause, which reads the lowest, 10; one in the hold changes nothing, and
    the opening answers 10 too. 20 openings on a fresh one answer 30
    (searching, at its ceiling), and its throttle (L = min(20, 30) = 20, or
    19 should its clock's minute turn among them) pauses it too: 10. Open
    and closed learn nothing and answer 60. rate_in_force needs Redis, as
    info."""
    import redis

    url = f"redis://127.0.0.1:{free_port()}"
    local = d.pacer(url=url, key="k", fleet_size=2, **ADAPTIVE)
    assert d(local.observe("throttled")) == 10
    assert d(local.observe("throttled")) == 10  # in the hold: nothing changes
    assert d(local.observe("opened")) == 10
    counted = d.pacer(url=url, key="k", fleet_size=2, **ADAPTIVE)
    assert [d(counted.observe("opened")) for _ in range(20)] == [30] * 20
    assert d(counted.observe("throttled")) == 10
    fallback = local.fallback_pacer
    assert fallback is not None
    assert (fallback.config.adaptive_floor_per_min, fallback.config.adaptive_ceiling_per_min) == (5, 30)
    with pytest.raises(redis.exceptions.ConnectionError):
        d(local.rate_in_force())
    for policy in ("open", "closed"):
        fleet = d.pacer(url=url, key="k", on_failure=policy, **ADAPTIVE)
        assert d(fleet.observe("throttled")) == 60


def test_the_adaptive_settings_are_checked_by_the_fleet_pacer() -> None:
    with pytest.raises(ValueError, match="adaptive_floor_per_min"):
        RedisPacer(url="redis://127.0.0.1:1", key="k", adaptive_floor_per_min=61)
    with pytest.raises(TypeError, match="adaptive_ceiling_per_min"):
        AsyncRedisPacer(url="redis://127.0.0.1:1", key="k", adaptive_floor_per_min=1,
                        adaptive_ceiling_per_min=True)


# ------------------------------------------------------------ README


def test_the_readme_example_runs(module_server: RedisServer) -> None:
    """The "Fleet pacing (Redis)" example of README.md, run as it is written."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Fleet pacing (Redis)", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    env = {**os.environ, "REDIS_URL": module_server.url}
    done = subprocess.run([sys.executable, "-c", code.group(1)], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["admitted after 0 ms (engine: module)"]
