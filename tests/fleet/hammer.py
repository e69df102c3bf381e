"""The Python binding's RedisPacer as a fleet client for tests/fleet/check.py
and tests/fleet/cluster_check.py:

    python hammer.py URL KEY CALLS EVERY_MS RATE BURST IDLE RETRIES

URL: one server, or a Redis Cluster's seed nodes separated by commas
(startup_nodes; a call may then take up to 4 s, a failover's wait among it).

One JSON line per reserve (wall-clock ms). Any fallback answer is an error
here: the check is about the server's decisions.
"""

import json
import sys
import time

from pacer import RedisPacer

url, key, calls, every, rate, burst, idle, retries = sys.argv[1:]
cluster = "," in url
where = ({"startup_nodes": [node.removeprefix("redis://").rstrip("/") for node in url.split(",")]}
         if cluster else {"url": url})
pacer = RedisPacer(**where, key=key, rate_per_minute=int(rate), burst=int(burst),
                   idle_timeout_ms=int(idle), max_retries=int(retries), release_policy="refund",
                   engine="function", on_failure="closed", timeout_ms=4000 if cluster else 1000)
try:
    for _ in range(int(calls)):
        send_ms = time.time_ns() // 1_000_000
        d = pacer.reserve()
        reply_ms = time.time_ns() // 1_000_000
        if d.fallback is not None:
            sys.exit(f"answered by the {d.fallback} policy, not the server")
        line = {"client": "python", "send_ms": send_ms, "reply_ms": reply_ms}
        if hasattr(d, "wait_ms"):
            line.update(answer="admitted", wait_ms=d.wait_ms)
        else:
            line.update(answer="refused", retry_after_s=d.retry_after_s)
        print(json.dumps(line), flush=True)
        time.sleep(int(every) / 1000)
finally:
    pacer.close()
