#!/usr/bin/env python3
"""The fleet on a Redis Cluster under faults while traffic flows: the
primary that owns a busy key is paused (SIGSTOP, shorter than the
cluster's node timeout, so it keeps its slots), then killed with kill -9
(its replica takes over); three clients of three languages call the key the
whole time, each call cancelled at a random point or not at all
(docs/fleet-clients.md, "On a Redis Cluster").

Starts tests/fleet/cluster.py's cluster (3 primaries, 3 replicas, the
module on every node, the function on every primary) and runs the clients
of tests/fleet/fault.py (the same command lines, given the seed nodes as
{url}). Checks by relations that hold at any machine speed:

- no call ended in an error: a paused or dead primary is an outage, answered
  by the failure policy (closed); no call lasted longer than its timeout
  (plus its wait, or its cancellation) and fault.SLACK_MS;
- the pause loses nothing: at a reading in a quiet spell after it (the
  clients make no call; `WAIT` makes sure the replica has every write), the
  owner's counters hold every admission the clients kept, and what is left
  over (a debit without a holder) is at most the calls the pause could have
  cut off (cancelled or answered by the policy near it);
- the kill may lose what the replica had not received, and a client that
  resends after a lost connection may be counted twice: from the reading
  to the end, the debits without a holder are within
  [-N, cut + N], N = the calls the server answered within LAG_MS before the
  kill or across it; refusals likewise;
- the window bound (tests/fleet/check.py) over the admissions kept, with
  N added for what the kill could have lost;
- the faults were seen: an answer by the policy while the owner was paused,
  and for every client while it was dead; every client is answered by the
  cluster again after the takeover, and the outage each saw is printed.

    python3 tests/fleet/cluster_fault.py --module PATH --client 'node=node tests/fleet/fault.mjs {url} ...'
"""

import argparse
import json
import random
import sys
import time

import check as fleet_check
from check import window_bound, worst_window
from cluster import FleetCluster, key_slot
from fault import CONFIG, PAD_MS, call_failures, collect, finish, kept, near, start_clients, wall_ms

# check.py's window bound is the fault run's settings'.
assert all(fleet_check.CONFIG[k] == CONFIG[k] for k in ("rate", "burst"))

# The owner is paused (start s, length s) for 2.5 client timeouts, so that
# every client has a call time out in it, and for less than the node
# timeout, so that it keeps its slots; then killed at KILL_S.
NODE_TIMEOUT_MS = 2500
PAUSE = (3.0, 1.5)
QUIET_S = (6.0, 8.0)
READ_S = 7.0
KILL_S = 9.5
RUN_S = 28.0
# On loopback a replica receives a write well within this of its reply
# (an assumption the check states; what it bounds is printed).
LAG_MS = 1000


def counters(cluster, port, key):
    words = cluster.cli(port, "PACER.INFO", key).split("\n")
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)
            if words[i] in ("admitted", "released", "refused")}


def at(begin_ms, seconds):
    time.sleep(max(0.0, (begin_ms + seconds * 1000 - wall_ms()) / 1000))


def play(cluster, key, begin_ms):
    """Pause, reading, kill; returns the fault windows (what, start, end),
    the reading (ms, counters) and the final owner."""
    windows = []
    owner = cluster.owner(key)
    at(begin_ms, PAUSE[0])
    started = wall_ms()
    cluster.pause(owner)
    time.sleep(PAUSE[1])
    cluster.resume(owner)
    windows.append(("paused", started, wall_ms()))
    at(begin_ms, READ_S)
    if cluster.owner(key) != owner:
        raise RuntimeError(f"the pause failed {owner} over to {cluster.owner(key)}: longer than the node timeout?")
    synced = cluster.cli(owner, "WAIT", "1", "5000").strip()
    if synced != "1":
        raise RuntimeError(f"WAIT on {owner} answered {synced!r}: its replica is behind")
    reading = (wall_ms(), counters(cluster, owner, key))
    at(begin_ms, KILL_S)
    started = wall_ms()
    final = cluster.kill(owner)
    windows.append(("killed", started, wall_ms()))
    return windows, reading, owner, final


def check(lines, windows, reading, final_counters):
    failures = call_failures(lines)
    (_, p_start, p_end), (_, k_start, k_end) = windows
    read_ms, before = reading
    under_way = [x for x in lines if x["start_ms"] < read_ms < x["end_ms"]]
    if under_way:
        failures.append(f"{len(under_way)} calls were under way at the reading (the clients did not keep quiet)")
    served = lambda x: x.get("by") == "server" and x["outcome"] != "cancelled"
    cuttable = lambda x: x["outcome"] == "cancelled" or x.get("by") == "closed"

    def account(phase, part, start_counts, end_counts, cut, near_kill):
        told_refused = sum(x["outcome"] == "refused" and served(x) for x in part)
        cancelled = sum(x["outcome"] == "cancelled" for x in part)
        since = lambda k: end_counts[k] - start_counts.get(k, 0)
        left = since("admitted") - since("released") - kept(part)
        print(f"cluster fault: {phase}: {len(part)} calls, {kept(part)} admissions kept, {cancelled} cancelled, "
              f"{cut} cut off near the fault, {near_kill} answered near the kill; counted admitted "
              f"{since('admitted')}, released {since('released')}, refused {since('refused')}; "
              f"{left} debits without a holder", file=sys.stderr)
        if not -near_kill <= left <= cut + near_kill:
            failures.append(f"{phase}: {left} debits without a holder, allowed {-near_kill}..{cut + near_kill}")
        if not told_refused - near_kill <= since("refused") <= told_refused + cancelled + cut + near_kill:
            failures.append(f"{phase}: the cluster counted {since('refused')} refusals, the clients were told "
                            f"of {told_refused} (allowed up to {cancelled + cut + near_kill} more, "
                            f"{near_kill} fewer)")

    first = [x for x in lines if x["start_ms"] < read_ms]
    second = [x for x in lines if x["start_ms"] > read_ms]
    pause = [("paused", p_start, p_end)]
    kill = [("killed", k_start, k_end)]
    account("the pause", first, {}, before,
            sum(cuttable(x) and near(x, pause, PAD_MS) for x in first), 0)
    near_kill = sum(served(x) and x["end_ms"] >= k_start - LAG_MS and x["start_ms"] <= k_end for x in second)
    account("the kill", second, before, final_counters,
            sum(cuttable(x) and near(x, kill, PAD_MS) for x in second), near_kill)

    admitted = [x for x in lines if x["outcome"] == "admitted" and served(x)]
    l = max(x["end_ms"] - x["start_ms"] - x.get("wait_ms", 0) for x in admitted)
    opened = sorted(x["end_ms"] for x in admitted)
    for w in (100, 1000, opened[-1] - opened[0]):
        count, bound = worst_window(opened, w), window_bound(w, l) + near_kill
        print(f"cluster fault:   W = {w:>5} ms: worst count {count:>3}, bound {bound:>3} "
              f"(L = {l} ms, {near_kill} for the kill)", file=sys.stderr)
        if count > bound:
            failures.append(f"{count} admissions opened within {w} ms; the bound is {bound}")

    for what, start, end in windows:
        by_policy = [x for x in lines if x.get("by") == "closed" and start <= x["start_ms"] <= end]
        print(f"cluster fault: {what} for {end - start} ms: {len(by_policy)} calls answered by the policy "
              f"({', '.join(sorted({x['client'] for x in by_policy})) or 'none'})", file=sys.stderr)
        # Every client calls through the outage the kill makes; a pause is
        # short beside the calls a client cancels, so one client will do.
        missing = sorted({x["client"] for x in lines} - {x["client"] for x in by_policy})
        if what == "killed" and missing or not by_policy:
            failures.append(f"{', '.join(missing)}: no call answered by the failure policy while the owner "
                            f"was {what}")
    for client in sorted({x["client"] for x in lines}):
        mine = [x for x in lines if x["client"] == client and x["start_ms"] >= k_start]
        if not any(served(x) and x["start_ms"] > k_end + PAD_MS for x in mine):
            failures.append(f"{client}: never answered by the cluster after the takeover")
            continue
        # The outage this client saw: from its first answer by the policy to
        # its next answer by the cluster.
        down = next((x for x in mine if x.get("by") == "closed"), None)
        back = next((x for x in mine if down and served(x) and x["start_ms"] > down["end_ms"]), None)
        if back:
            print(f"cluster fault:   {client}: answered by the policy from {down['end_ms'] - k_start} ms "
                  f"after the kill, by the cluster again {back['end_ms'] - down['end_ms']} ms later",
                  file=sys.stderr)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", required=True, help="path of libpacer_redis.so")
    parser.add_argument("--client", action="append", required=True, metavar="NAME=COMMAND")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--lines", metavar="FILE", help="write every call's line and the fault windows there")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"cluster fault: seed {seed}", file=sys.stderr)
    key = f"pacer:cluster-fault:{seed}"
    with FleetCluster(args.module, node_timeout_ms=NODE_TIMEOUT_MS) as cluster:
        print(f"cluster fault: {key} (slot {key_slot(key)}) on primary {cluster.owner(key)}", file=sys.stderr)
        begin_ms = wall_ms() + 1000
        until = begin_ms + int(RUN_S * 1000)
        quiet_from, quiet_to = (begin_ms + int(q * 1000) for q in QUIET_S)
        procs = start_clients(args.client, lambda index: dict(
            url=cluster.seeds, key=key, until=until, quiet_from=quiet_from, quiet_to=quiet_to, seed=seed + index))
        try:
            windows, reading, killed, final = play(cluster, key, begin_ms)
        finally:
            failures, lines = collect(procs)
        if cluster.owner(key) != final:
            failures.append(f"{key} is owned by {cluster.owner(key)}, not by {final}, the replica of the killed "
                            f"{killed}")
        final_counters = counters(cluster, final, key)
    if args.lines:
        with open(args.lines, "w") as f:
            json.dump({"windows": windows, "reading": reading, "counters": final_counters, "lines": lines}, f)
    print(f"cluster fault: {len(lines)} calls; owner {killed} killed, {final} took over", file=sys.stderr)
    failures += check(lines, windows, reading, final_counters)
    finish("cluster fault", failures, seed)


if __name__ == "__main__":
    main()
