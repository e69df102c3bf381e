"""The fleet pacers' held connection (``_redis._HeldConnection``,
``_AsyncHeldConnection``): once the engine is known, a RedisPacer or an
AsyncRedisPacer over a plain client sends its engine's commands on one
connection it holds, not through redis-py's ``execute_command``.

What is asserted comes from the server (its ``INFO commandstats`` calls
of the engine's command, ``INFO stats`` connections, the bucket's
counters) or is counted by hand from the calls the test makes, never
from the code under test: that the engine's commands skip the client,
that each reaches the server once and is answered with its own reply,
and that a fault on the held connection (the server closing it, killed,
the script flushed, the function deleted, threads or tasks contending, a
timeout) is met as through the client: the same answers, the same
fallbacks, no connection left behind. Each test runs with both classes
(``d``, test_redis.py's Driver) unless it says otherwise."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from pacer import AdmitPath, RedisAdmitted, RedisPacer, RedisRefused
from redis_server import REDIS_SERVER, RedisServer, command_calls, module_path
from test_redis import LONG, LONG_BOUND_MS, LONG_HINT_CAP_S, Driver
from test_redis import d  # noqa: F401 - the fixture, sync and async

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed (scripts/redis-deps.sh)")

CONFIG: dict[str, Any] = {"rate_per_minute": 60, "burst": 2, "idle_timeout_ms": 30000, "max_retries": 3}
#: The longest timeout CONFIG allows (its wait bound): a loaded machine is slow, not down.
SLOW_OK: dict[str, Any] = {**CONFIG, "timeout_ms": 2000}
BOUND_MS = 2000  # SPEC §3 for CONFIG: min(15000, floor((30000 - 14000) / 8))
#: test_redis.LONG (a token every 10 s: a burst spent at once stays spent)
#: with the same timeout.
LONG_OK: dict[str, Any] = {**LONG, "timeout_ms": 2000}
#: The engine's command as INFO commandstats names it.
STAT = {"function": "fcall", "script": "evalsha"}


def _library() -> bytes:
    from conftest import REPO_ROOT

    return b"#!lua name=pacer\n" + (REPO_ROOT / "redis" / "pacer.lua").read_bytes()


@pytest.fixture(scope="module", params=["module", "function", "script"])
def engine_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, RedisServer]]:
    """A server whose auto engine is ``request.param``: with the module,
    with only the function library, plain."""
    engine = request.param
    module = module_path()
    if engine == "module" and module is None:
        pytest.skip("PACER_REDIS_MODULE is not set (scripts/test-python.sh builds and sets it)")
    with RedisServer(module=module if engine == "module" else None) as server:
        if engine == "function":
            with server.client() as admin:
                admin.execute_command("FUNCTION", "LOAD", _library())
        yield engine, server


_keys = iter(range(1_000_000))


def fresh_key(tag: str) -> str:
    return f"pacer-held:{tag}:{next(_keys)}"


def engine_calls(server: RedisServer, engine: str) -> int:
    """How many times the server ran the engine's commands (every
    ``PACER.*`` for the module), by INFO commandstats."""
    if engine != "module":
        return command_calls(server, STAT[engine])
    with server.client() as admin:
        stats = admin.info("commandstats")
    return sum(int(v["calls"]) for name, v in stats.items() if name.startswith("cmdstat_pacer."))



def connections_made(server: RedisServer) -> int:
    """Connections the server accepted so far (its own count; each admin
    client below is one of them)."""
    with server.client() as admin:
        return int(admin.info("stats")["total_connections_received"])


def connected(server: RedisServer) -> int:
    """Clients connected now, the asking one among them."""
    with server.client() as admin:
        return int(admin.info("clients")["connected_clients"])


def client_commands(fleet: Any) -> list[tuple[Any, ...]]:
    """The commands that go through the pacer's redis-py client from now
    on (each as ``execute_command`` is given it), filled as they are sent."""
    sent: list[tuple[Any, ...]] = []
    through = fleet._client.execute_command

    def counted(*command: Any, **options: Any) -> Any:
        sent.append(command)
        return through(*command, **options)

    fleet._client.execute_command = counted
    return sent


def names(sent: list[tuple[Any, ...]]) -> list[str]:
    """The command names of ``sent`` ("MODULE LIST", "SCRIPT LOAD", ...)."""
    return [" ".join(str(part) for part in command[:2]) for command in sent]


def test_the_engine_commands_skip_the_client_once_the_engine_is_known(
        d: Driver, engine_server: tuple[str, RedisServer]) -> None:
    """After the first call (which finds the engine through the client),
    three reserves, a release and info go on the held connection: none
    through the client, each run once by the server, on the connection
    the first call made. The answers are the burst, a wait, a refusal
    (SPEC §3 for LONG_OK), and the server counts what the answers say."""
    engine, server = engine_server
    fleet = d.pacer(url=server.url, key=fresh_key("skip"), **LONG_OK)
    first = d(fleet.reserve())
    assert isinstance(first, RedisAdmitted) and first.wait_ms == 0 and first.fallback is None
    assert fleet.engine == engine
    sent = client_commands(fleet)
    runs, made = engine_calls(server, engine), connections_made(server)
    second, third, fourth = (d(fleet.reserve()) for _ in range(3))
    assert isinstance(second, RedisAdmitted) and (second.wait_ms, second.path) == (0, AdmitPath.PACED)
    assert isinstance(third, RedisAdmitted) and 0 < third.wait_ms <= 10000
    assert isinstance(fourth, RedisRefused) and fourth.required_wait_ms > LONG_BOUND_MS
    assert fourth.retry_after_s == LONG_HINT_CAP_S
    assert all(o.fallback is None for o in (second, third, fourth))
    assert d(fleet.release(third.ticket)) is True
    info = d(fleet.info())
    assert (info["admitted"], info["refused"], info["released"]) == (3, 1, 1)
    assert sent == []
    # 3 reserves, 1 release, 1 info; the two admin clients above and
    # below are the only connections made meanwhile.
    assert engine_calls(server, engine) - runs == 5
    assert connections_made(server) - made == 2
    counters = fleet.counters()
    assert (counters.admitted, counters.refused, counters.released, counters.fallbacks) == (3, 1, 1, 0)


def test_a_connection_the_server_closed_between_calls_is_connected_again(d: Driver) -> None:
    """CLIENT KILL closes the held connection between two calls: the next
    call connects again and the server answers it (no outage), as a
    connection the pool checks would."""
    with RedisServer(module=module_path()) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("killed"), on_failure="closed", **SLOW_OK)
        assert d(fleet.reserve()).fallback is None
        with server.client() as admin:
            assert admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") == 1
        time.sleep(0.05)  # the close has reached the client's side
        made = connections_made(server)
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None
        assert not fleet.in_outage
        assert connections_made(server) - made == 2  # the pacer's new connection and the admin below
        assert d(fleet.info())["admitted"] == 2
        d(fleet.close())


def test_a_killed_server_is_an_outage_and_the_held_connection_is_given_back(d: Driver) -> None:
    """The server killed: the call on the held connection fails and the
    policy answers (as through the client); restarted, the next call goes
    on a new connection and the server counts it. Closed, the pacer leaves
    no connection open."""
    with RedisServer(module=module_path()) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("restart"), retry_after_ms=0, **SLOW_OK)
        assert d(fleet.reserve()).fallback is None
        sent = client_commands(fleet)
        server.kill()
        down = d(fleet.reserve())
        assert isinstance(down, RedisAdmitted) and down.fallback == "local" and fleet.in_outage
        server.start()
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None and outcome.wait_ms == 0
        assert not fleet.in_outage
        # engine auto was asked again after the failure (through the client),
        # then the reserve went on the held connection. Without the module
        # that finds the script, whose EVALSHA the restarted server (its
        # cache empty) answers NOSCRIPT: asked again, the script loaded,
        # the reserve sent once more (EVAL of the script).
        expected = (["MODULE LIST"] if server.module
                    else ["MODULE LIST", "FUNCTION LIST", "MODULE LIST", "FUNCTION LIST", "SCRIPT LOAD"])
        assert names(sent) == expected
        assert d(fleet.info())["admitted"] == 1  # a new server: its bucket counts the one call
        # The pacer's held connection and the asking client; without the
        # module also the pool's second connection, which asked again while
        # the held one had the NOSCRIPT call (idle in the pool since).
        assert connected(server) == (2 if server.module else 3)
        d(fleet.close())
        # The server sees the close in its own time: wait for it (bounded).
        deadline = time.monotonic() + 30
        while connected(server) != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert connected(server) == 1


def test_noscript_on_the_held_connection_loads_the_script_and_retries_there(d: Driver) -> None:
    """SCRIPT FLUSH between calls: EVALSHA on the held connection answers
    NOSCRIPT; auto asks which engine there is and loads the script through
    the client, and the call is sent again on the held connection as EVAL
    of the script (which a node that missed the load runs too): the
    server ran EVALSHA once and EVAL once, answered once."""
    with RedisServer() as server:
        fleet = d.pacer(url=server.url, key=fresh_key("noscript"), **SLOW_OK)
        assert d(fleet.reserve()).fallback is None and fleet.engine == "script"
        with server.client() as admin:
            admin.execute_command("SCRIPT", "FLUSH")
        sent = client_commands(fleet)
        runs = engine_calls(server, "script")
        carried = command_calls(server, "eval")
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None and not fleet.in_outage
        assert names(sent) == ["MODULE LIST", "FUNCTION LIST", "SCRIPT LOAD"]
        assert engine_calls(server, "script") - runs == 1
        assert command_calls(server, "eval") - carried == 1
        assert d(fleet.info())["admitted"] == 2
        d(fleet.close())


def test_a_function_deleted_under_the_held_connection_is_found_again(d: Driver) -> None:
    """FUNCTION DELETE between calls: FCALL on the held connection answers
    "Function not found"; auto asks which engine there is (through the
    client), loads the script, and the call is retried on the held
    connection as EVAL of the script; the next call is EVALSHA there."""
    with RedisServer() as server:
        with server.client() as admin:
            admin.execute_command("FUNCTION", "LOAD", _library())
        fleet = d.pacer(url=server.url, key=fresh_key("deleted"), **SLOW_OK)
        assert d(fleet.reserve()).fallback is None and fleet.engine == "function"
        with server.client() as admin:
            admin.execute_command("FUNCTION", "DELETE", "pacer")
        sent = client_commands(fleet)
        fcalls = engine_calls(server, "function")
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None and not fleet.in_outage
        assert fleet.engine == "script"
        assert names(sent) == ["MODULE LIST", "FUNCTION LIST", "SCRIPT LOAD"]
        assert engine_calls(server, "function") - fcalls == 1
        assert (command_calls(server, "eval"), engine_calls(server, "script")) == (1, 0)
        assert d(fleet.reserve()).fallback is None
        assert (command_calls(server, "eval"), engine_calls(server, "script")) == (1, 1)
        # The script's bucket is the function's (the same key and layout).
        assert d(fleet.info())["admitted"] == 3
        d(fleet.close())


#: A bucket that admits every call at once (the write path, a ticket each).
OPEN: dict[str, Any] = {"rate_per_minute": 600, "burst": 1_000_000, "idle_timeout_ms": 120_000, "max_retries": 5}


def test_threads_share_the_pacer_and_every_call_is_sent_once() -> None:
    """RedisPacer from four threads, 150 reserves each: a call that finds
    the held connection busy goes through the client. Every reserve is run
    once by the server and admitted there, and the pacer made at most one
    connection per thread."""
    with RedisServer(module=module_path()) as server:
        engine = "module" if server.module else "script"
        with RedisPacer(url=server.url, key=fresh_key("threads"), on_failure="closed", **OPEN) as fleet:
            assert fleet.reserve().fallback is None
            sent = client_commands(fleet)
            runs, made = engine_calls(server, engine), connections_made(server)
            answers: list[Any] = []
            lock = threading.Lock()

            def work() -> None:
                for _ in range(150):
                    outcome = fleet.reserve()
                    with lock:
                        answers.append(outcome)

            threads = [threading.Thread(target=work) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert len(answers) == 600
            assert all(isinstance(o, RedisAdmitted) and o.wait_ms == 0 and o.fallback is None for o in answers)
            assert len({o.ticket.text for o in answers}) == 600
            assert engine_calls(server, engine) - runs == 600
            assert fleet.info()["admitted"] == 601
            # The pool's connections: the held one and up to three beside it,
            # plus the two admin clients that read the counts.
            assert connections_made(server) - made <= 3 + 2 + 1
            assert len(sent) < 600  # some calls went on the held connection


def test_tasks_share_the_asyncio_pacer_and_every_call_is_sent_once() -> None:
    """AsyncRedisPacer from eight tasks, 50 reserves each: a call that
    finds the held connection busy goes through the client. Every reserve
    is run once by the server and admitted there."""
    from pacer import AsyncRedisPacer

    with RedisServer(module=module_path()) as server:
        engine = "module" if server.module else "script"

        async def run() -> tuple[list[Any], list[tuple[Any, ...]], int]:
            async with AsyncRedisPacer(url=server.url, key=fresh_key("tasks"), on_failure="closed",
                                       **OPEN) as fleet:
                assert (await fleet.reserve()).fallback is None
                sent = client_commands(fleet)

                async def work() -> list[Any]:
                    return [await fleet.reserve() for _ in range(50)]

                runs = engine_calls(server, engine)
                answers = [o for each in await asyncio.gather(*(work() for _ in range(8))) for o in each]
                return answers, sent, engine_calls(server, engine) - runs

        answers, sent, runs = asyncio.run(run())
        assert len(answers) == 400 and runs == 400
        assert all(isinstance(o, RedisAdmitted) and o.wait_ms == 0 and o.fallback is None for o in answers)
        assert len({o.ticket.text for o in answers}) == 400
        assert 0 < len(sent) < 400  # some calls went on the held connection, some found it busy


def test_a_client_that_is_not_plain_keeps_every_command_on_the_client(d: Driver) -> None:
    """A client speaking RESP3 (its connections may carry pushes): every
    command goes through redis-py's execute_command, as before."""
    import redis
    import redis.asyncio

    with RedisServer(module=module_path()) as server:
        module = redis.asyncio if d.flavor == "async" else redis
        given = module.Redis(port=server.port, protocol=3)
        fleet = d.pacer(client=given, key=fresh_key("resp3"), **SLOW_OK)
        assert d(fleet.reserve()).fallback is None
        sent = client_commands(fleet)
        runs = engine_calls(server, fleet.engine or "")
        for _ in range(3):
            assert d(fleet.reserve()).fallback is None
        assert len(sent) == 3
        assert engine_calls(server, fleet.engine or "") - runs == 3
        d(fleet.close())
        d(given.aclose() if d.flavor == "async" else given.close())


def test_a_timed_out_call_leaves_no_reply_for_the_next(d: Driver) -> None:
    """A reserve times out while the server is paused: its reply, sent
    when the pause ends, must never be read as the next call's. The next
    reserve and info get their own replies: info's counts are a dict with
    the bucket's fields, and they count the two reserves the server ran
    (the timed-out one ran when the pause ended) or one (it never ran).
    The pause outlasts the 200 ms timeout by 1800 ms: the call times out
    within the pause unless the test takes that long to send it (with a
    600 ms pause, 400 ms of delay on a loaded machine let the server answer
    it)."""
    with RedisServer(module=module_path()) as server:
        fleet = d.pacer(url=server.url, key=fresh_key("late"), timeout_ms=200, retry_after_ms=0,
                        on_failure="closed", **CONFIG)
        assert d(fleet.reserve()).fallback is None
        with server.client() as admin:
            admin.execute_command("CLIENT", "PAUSE", 2000, "ALL")
            late = d(fleet.reserve())
            assert isinstance(late, RedisRefused) and late.fallback == "closed"
            admin.ping()  # answered when the pause is over
        time.sleep(0.05)  # the late reply has arrived where it was going
        outcome = d(fleet.reserve())
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None
        info = d(fleet.info())
        assert info["rate_per_min"] == 60 and info["refused"] == 0
        assert info["admitted"] in (2, 3)
        counters = fleet.counters()
        assert (counters.admitted, counters.refused, counters.fallbacks) == (2, 1, 1)
        d(fleet.close())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_leaves_the_parents_held_connection_alone() -> None:
    """RedisPacer (sync) used in a child forked after the parent's calls:
    the child takes a connection of its own (the parent's socket is shared
    with it), 20 reserves there, and the parent's next calls get their own
    replies. The server counts both processes' reserves."""
    with RedisServer(module=module_path()) as server:
        with RedisPacer(url=server.url, key=fresh_key("fork"), on_failure="closed", **OPEN) as fleet:
            assert fleet.reserve().fallback is None
            made = connections_made(server)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # fork beside threads, on 3.12+
                child = os.fork()
            if child == 0:
                ok = all(fleet.reserve().fallback is None for _ in range(20))
                os._exit(0 if ok else 1)
            _, status = os.waitpid(child, 0)
            assert os.waitstatus_to_exitcode(status) == 0
            outcomes = [fleet.reserve() for _ in range(5)]
            assert all(isinstance(o, RedisAdmitted) and o.fallback is None for o in outcomes)
            info = fleet.info()
            assert info["admitted"] == 1 + 20 + 5 and info["rate_per_min"] == 600
            assert connections_made(server) - made == 2  # the child's own and the admin's
