"""The Python binding's AsyncRedisPacer as a client of the fault run
(tests/fleet/fault.py):

    python fault_client.py URL KEY UNTIL_MS QUIET_FROM_MS QUIET_TO_MS EVERY_MS TIMEOUT_MS SEED RATE BURST IDLE RETRIES

URL: one server, or a Redis Cluster's seed nodes separated by commas
(startup_nodes; tests/fleet/cluster_fault.py).

Calls until the wall clock reads UNTIL_MS (none from QUIET_FROM_MS to
QUIET_TO_MS), one JSON line per admit(): each call is cancelled
(task.cancel()) at a random point in [0, TIMEOUT_MS) or not at all;
admissions the server made are kept, so the server's counters account for
every answer.
"""

import asyncio
import json
import random
import sys
import time

from pacer import AsyncRedisPacer


def wall_ms():
    return time.time_ns() // 1_000_000


async def main(url, key, until, quiet_from, quiet_to, every, timeout_ms, seed, rate, burst, idle, retries):
    rng = random.Random(seed)
    where = ({"startup_nodes": [node.removeprefix("redis://").rstrip("/") for node in url.split(",")]}
             if "," in url else {"url": url})
    pacer = AsyncRedisPacer(**where, key=key, rate_per_minute=rate, burst=burst, idle_timeout_ms=idle,
                            max_retries=retries, release_policy="refund", engine="auto",
                            on_failure="closed", timeout_ms=timeout_ms, retry_after_ms=50)
    try:
        i = 0
        while wall_ms() < until:
            if quiet_from <= wall_ms() < quiet_to:
                await asyncio.sleep((quiet_to - wall_ms()) / 1000)
            cancel_at = rng.randrange(timeout_ms) if rng.random() < 0.5 else None
            line = {"client": "python", "call": i, "start_ms": wall_ms(), "cancel_at_ms": cancel_at}
            task = asyncio.ensure_future(pacer.admit())
            if cancel_at is not None:
                asyncio.get_running_loop().call_later(cancel_at / 1000, task.cancel)
            try:
                d = await task
                line["by"] = d.fallback or "server"
                if hasattr(d, "wait_ms"):
                    line.update(outcome="admitted", wait_ms=d.wait_ms)
                else:
                    line["outcome"] = "refused"
            except asyncio.CancelledError:
                line["outcome"] = "cancelled"
            except Exception as error:  # noqa: BLE001 - reported, and fault.py fails on it
                line.update(outcome="error", error=f"{type(error).__name__}: {error}")
            line["end_ms"] = wall_ms()
            print(json.dumps(line), flush=True)
            await asyncio.sleep(every / 1000)
            i += 1
    finally:
        await pacer.close()


if __name__ == "__main__":
    url, key, *numbers = sys.argv[1:]
    asyncio.run(main(url, key, *map(int, numbers)))
