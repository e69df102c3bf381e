"""RedisPacer and AsyncRedisPacer behind a slow link (docs/fleet-clients.md):
a real redis-server behind tests/delay_proxy.py, which holds each chunk the
server sends for a set delay.

One deadline a call: the whole call (connecting, finding the engine,
loading the script, the reply) ends within the pacer's timeout, so a call
that needs more round trips than fit is an outage, answered by the policy.
The assertions are relations that hold at any machine speed: with each
reply held 450 ms, a call that needs two round trips or more cannot be
answered within 500 ms, and it must end well before three of them (the
slack, 1000 ms, is more than two delays)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

from pacer import AsyncRedisPacer, RedisAdmitted, RedisPacer, RedisRefused

from delay_proxy import DelayProxy
from redis_server import REDIS_SERVER, RedisServer, module_path

pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server not installed (scripts/redis-deps.sh)")

# SPEC §3: rate 60, burst 2, idle 30000, 3 retries: wait bound 2000 ms.
CONFIG: dict[str, Any] = {"rate_per_minute": 60, "burst": 2, "idle_timeout_ms": 30000, "max_retries": 3}
DELAY_S = 0.45
TIMEOUT_MS = 500
SLACK_S = 1.0


def key(tag: str) -> str:
    return f"pacer-test:slow:{tag}:{os.getpid()}:{time.monotonic_ns()}"


@pytest.fixture
def slow_link() -> Any:
    """A server (with the module when it is built, and the function
    library) behind a proxy holding each reply 450 ms."""
    from test_redis import SCRIPT

    threads = threading.active_count()
    with RedisServer(module=module_path()) as server:
        with server.client() as admin:
            admin.execute_command("FUNCTION", "LOAD", b"#!lua name=pacer\n" + SCRIPT)
        with DelayProxy(server.port, DELAY_S) as proxy:
            yield proxy
    assert threading.active_count() == threads  # nothing left running


#: A first call with these engines makes two round trips or more: the
#: listings (auto), SCRIPT LOAD (script), then the call.
ENGINES = ("auto", "script")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_blocking_call_ends_within_its_timeout(slow_link: DelayProxy, engine: str) -> None:
    """A first call of two round trips or more takes 900 ms or more: an
    outage, over by the timeout."""
    fleet = RedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key(engine), engine=engine,
                       on_failure="closed", timeout_ms=TIMEOUT_MS, **CONFIG)
    try:
        started = time.monotonic()
        outcome = fleet.reserve()
        elapsed = time.monotonic() - started
        assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed"
        assert fleet.in_outage
        assert elapsed < TIMEOUT_MS / 1000 + SLACK_S, elapsed
    finally:
        fleet.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_an_asyncio_call_ends_within_its_timeout(slow_link: DelayProxy, engine: str) -> None:
    async def main() -> None:
        async with AsyncRedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key(engine), engine=engine,
                                   on_failure="closed", timeout_ms=TIMEOUT_MS, **CONFIG) as fleet:
            started = time.monotonic()
            outcome = await fleet.reserve()
            elapsed = time.monotonic() - started
            assert isinstance(outcome, RedisRefused) and outcome.fallback == "closed"
            assert elapsed < TIMEOUT_MS / 1000 + SLACK_S, elapsed

    asyncio.run(main())


def test_a_call_whose_round_trips_fit_is_answered(slow_link: DelayProxy) -> None:
    """Replies held 100 ms, timeout 2000 ms: the handshake, SCRIPT LOAD and
    the call (three round trips) fit, with 1700 ms to spare."""
    slow_link.delay_s = 0.1
    with RedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key("fits"), engine="script",
                    timeout_ms=2000, **CONFIG) as fleet:
        outcome = fleet.reserve()
        assert isinstance(outcome, RedisAdmitted) and outcome.fallback is None
        assert not fleet.in_outage


def test_a_new_connection_asks_nothing_before_the_call(slow_link: DelayProxy) -> None:
    """The pacer's connections send no CLIENT SETINFO on connecting: a call
    with a known engine on a new connection is one reply on the link. A
    connection opened beside a cancelled call still waiting for its reply,
    or after a failure, then costs no round trip of the call's timeout."""
    slow_link.delay_s = 0

    async def asyncio_create() -> bool:
        async with AsyncRedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key("one-a"),
                                   engine="function", **CONFIG) as fleet:
            return await fleet.create()

    with RedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key("one"), engine="function",
                    **CONFIG) as fleet:
        before = slow_link.passed
        assert fleet.create() is True
        assert slow_link.passed - before == 1
    before = slow_link.passed
    assert asyncio.run(asyncio_create()) is True
    assert slow_link.passed - before == 1


# ------------------------------------------------------------ cancellation

# Idle 300000 and 5 retries: wait bound min(15000, ⌊(300000 − 62000) / 12⌋)
# = 15000 ms (docs/spec.md §3), so the timeout can be 4000 ms, far above the
# 300 ms a reply is held here: no call below times out, whatever the
# machine's speed. At 6/min a token takes 10 s to come back, so the bucket
# the test empties stays empty (the third admission waits) unless 10 s pass
# between two of its steps; at 60/min a second of delay on a loaded machine
# let the third through at once, and the test waited for its sleep forever.
LONG = {"rate_per_minute": 6, "burst": 2, "idle_timeout_ms": 300000, "max_retries": 5}


async def until(condition: Any, what: str) -> None:
    """Polls ``condition`` (at most 10 s)."""
    deadline = time.monotonic() + 10
    while not await condition():
        assert time.monotonic() < deadline, f"not within 10 s: {what}"
        await asyncio.sleep(0.005)


def test_a_cancelled_asyncio_admit_leaks_no_debit(slow_link: DelayProxy) -> None:
    """admit() cancelled before it starts, while the server's reply is held
    on the link (the server has admitted), and during the wait it was
    granted: what reached the server is released, so the server's admitted
    minus released is what the caller kept. Burst 2 on a fresh bucket: the
    first held reply is an admission at once; after two kept and one
    released in its wait the bucket is in debt within the bound, so the
    second held reply is an admission too: five admitted, three released."""
    from conftest import GateSleep

    engine = "module" if module_path() else "function"

    async def main() -> None:
        gate = GateSleep()
        fleet = AsyncRedisPacer(url=f"redis://127.0.0.1:{slow_link.port}/0", key=key("cancel"), engine=engine,
                                timeout_ms=4000, sleep=gate, **LONG)
        direct = AsyncRedisPacer(url=f"redis://127.0.0.1:{slow_link.target_port}/0", key=fleet.key, engine=engine,
                                 **LONG)
        slow_link.delay_s = 0
        assert await fleet.create() is True  # the connection is open, the engine known
        slow_link.delay_s = 0.3

        async def released(count: int) -> bool:
            return (await direct.info())["released"] == count

        async def cancelled_while_held() -> None:
            assert slow_link.held == 0
            task = asyncio.ensure_future(fleet.admit())

            async def held() -> bool:
                return slow_link.held > 0

            await until(held, "the reply held on the link")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        task = asyncio.ensure_future(fleet.admit())
        task.cancel()  # before it starts: nothing is sent
        with pytest.raises(asyncio.CancelledError):
            await task
        await cancelled_while_held()
        await until(lambda: released(1), "the held admission released")
        kept = [await fleet.admit() for _ in range(2)]
        assert all(k.fallback is None and k.wait_ms == 0 and k.ticket is not None for k in kept)
        waiting = asyncio.ensure_future(fleet.admit())
        # The third waits its turn (a test that fails rather than hangs if
        # it does not).
        await asyncio.wait_for(gate.started.wait(), 10)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await until(lambda: released(2), "the waiting admission released")
        await cancelled_while_held()
        await fleet.close()  # waits for what it still has to release
        info = await direct.info()
        assert (info["admitted"], info["released"]) == (5, 3)
        assert info["admitted"] - info["released"] == len(kept)
        await direct.close()

    asyncio.run(main())
