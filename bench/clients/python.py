"""The Python binding's RedisPacer.reserve beside redis-py's PING through
the same client (bench/clients/run.sh):

    python bench/clients/python.py URL KEY ENGINE CALLS ROUNDS

One JSON line per round: the mean µs per call of CALLS sequential PINGs and
of CALLS sequential reserves (the order alternates by round). The PING goes
through the pacer's own redis-py client, on a connection of its pool; the
reserve on the one connection of that pool the pacer holds for its
engine's commands (two connections to the same server, one call in flight).
"""

import json
import sys
import time

from pacer import RedisAdmitted, RedisPacer

url, key, engine, calls, rounds = sys.argv[1:]
n = int(calls)
pacer = RedisPacer(url=url, key=key, engine=engine, rate_per_minute=600, burst=1_000_000,
                   idle_timeout_ms=120_000, max_retries=5, on_failure="closed")
client = pacer._client  # the pacer's redis-py client (not a public attribute; a bench may reach in)


def pings() -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        client.ping()
    return (time.perf_counter_ns() - start) / 1000 / n


def reserves() -> float:
    start = time.perf_counter_ns()
    for i in range(n):
        d = pacer.reserve()
        if not isinstance(d, RedisAdmitted) or d.wait_ms != 0 or d.fallback is not None:
            sys.exit(f"reserve {i}: {d!r}")
    return (time.perf_counter_ns() - start) / 1000 / n


try:
    for round_ in range(int(rounds)):
        if round_ % 2 == 0:
            ping, reserve = pings(), reserves()
        else:
            reserve = reserves()
            ping = pings()
        if pacer.engine != engine:
            sys.exit(f"engine {pacer.engine}, want {engine}")
        print(json.dumps({"client": "python", "engine": engine, "round": round_,
                          "ping_us": ping, "reserve_us": reserve}), flush=True)
finally:
    pacer.close()
