#!/usr/bin/env python3
"""Clients in several languages on one fleet bucket keep SPEC §6.1's bound.

Starts a redis-server (tests/fleet/server.py: free loopback port, temporary
directory, no persistence) with the module and the script loaded as a
function, runs every client given with --client at the same time against
one key, and checks what they printed:

- every call was answered, and the server counted exactly the admissions
  and refusals the clients were told of (no lost or double update);
- the window bound across all of them: an admission's observed opening is
  reply_ms + wait_ms, at most L (the slowest round trip of the run) after
  the instant the server decided it, so admissions in any window of W ms
  number at most burst + 1 + floor(rate * (W + L) / 60000) — a relation
  that holds at any machine speed (a slow machine widens L and the bound
  with it), as redis/tests/fleet.rs argues for one language.

Each client is a command that prints one JSON line per call:
{"client": ..., "send_ms": ..., "reply_ms": ..., "answer": "admitted",
"wait_ms": ...} or {..., "answer": "refused", ...}, with wall-clock ms.
In a command, {url}, {key}, {calls} and {every} are replaced, and
{rate} {burst} {idle} {retries} by the configuration below.

    python3 tests/fleet/check.py --module PATH \
        --client 'cli=target/debug/pacer hammer --redis {url} --key {key} ...' \
        --client 'node=node tests/fleet/hammer.mjs {url} {key} {calls} {every}'
"""

import argparse
import json
import shlex
import subprocess
import sys

from server import FleetServer

# Rate 600, burst 5, idle 120000, retries 5 (SPEC §3 by hand: backoff(5) =
# 2000 * 31 = 62000; bound = min(15000, floor(58000 / 12)) = 4833;
# 5 * 4 * 1000 * 600 >= 60000: refusing). About ten admissions a second.
CONFIG = {"rate": 600, "burst": 5, "idle": 120000, "retries": 5}
CALLS = 100
EVERY_MS = 15


def window_bound(w, l):
    return CONFIG["burst"] + 1 + CONFIG["rate"] * (w + l) // 60000


def worst_window(times, w):
    worst, end = 0, 0
    for start in range(len(times)):
        while end < len(times) and times[end] <= times[start] + w:
            end += 1
        worst = max(worst, end - start)
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", required=True, help="path of libpacer_redis.so")
    parser.add_argument("--client", action="append", required=True, metavar="NAME=COMMAND")
    args = parser.parse_args()

    procs = []
    with FleetServer(args.module) as server:
        try:
            check(server, args.client, procs)
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def check(server, clients, procs):
    url = server.url
    key = "fleet:check"
    fields = dict(url=url, key=key, calls=CALLS, every=EVERY_MS, **CONFIG)
    for spec in clients:
        name, _, command = spec.partition("=")
        argv = [part.format(**fields) for part in shlex.split(command)]
        procs.append((name, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    lines = []
    failed = []
    for name, proc in procs:
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0:
            failed.append(f"{name} exited {proc.returncode}: {err.strip()[-400:]}")
            continue
        got = [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(got) != CALLS:
            failed.append(f"{name}: {len(got)} answers for {CALLS} calls")
        lines.extend(dict(line, client=name) for line in got)
    if failed:
        sys.exit("fleet: " + "; ".join(failed))

    info = server.cli("PACER.INFO", key).split("\n")
    counted = {info[i]: int(info[i + 1]) for i in range(0, len(info) - 1, 2)
               if info[i] in ("admitted", "refused")}
    admitted = [x for x in lines if x["answer"] == "admitted"]
    refused = [x for x in lines if x["answer"] == "refused"]
    by_client = {}
    for x in lines:
        entry = by_client.setdefault(x["client"], [0, 0])
        entry[0 if x["answer"] == "admitted" else 1] += 1
    print("fleet: " + ", ".join(f"{n} {a} admitted / {r} refused" for n, (a, r) in by_client.items()))
    problems = []
    if counted != {"admitted": len(admitted), "refused": len(refused)}:
        problems.append(f"the server counted {counted}; the clients were told of "
                        f"{len(admitted)} admitted and {len(refused)} refused")
    if len(admitted) <= CONFIG["burst"]:
        problems.append(f"only {len(admitted)} admissions: the run did not reach the refill")
    l = max(x["reply_ms"] - x["send_ms"] for x in lines)
    opened = sorted(x["reply_ms"] + x["wait_ms"] for x in admitted)
    span = opened[-1] - opened[0] if opened else 0
    for w in (100, 1000, span):
        count, bound = worst_window(opened, w), window_bound(w, l)
        print(f"fleet:   W = {w:>5} ms: worst count {count:>3}, bound {bound:>3} (L = {l} ms)")
        if count > bound:
            problems.append(f"{count} admissions opened within {w} ms; the bound is {bound}")
    if problems:
        sys.exit("fleet: " + "; ".join(problems))
    print(f"fleet: ok ({len(procs)} clients, {len(lines)} calls on one key)")


if __name__ == "__main__":
    main()
