#!/usr/bin/env python3
"""Fleet clients on a real Redis Cluster (tests/fleet/cluster.py: 3
primaries, 3 replicas, the module on every node and the function library
on every primary), in three parts:

1. Spread: buckets on every shard (3 keys per primary), each driven by one
   client (the clients given take turns), at once. Each key's counts, read
   on the primary that owns it (no redirect followed), equal what its
   client was told, and its admissions keep SPEC §6.1's window bound.
2. Faults under traffic: every client on one busy key while its slot
   moves to another primary (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE:
   clients are answered ASK, then MOVED) and then while that primary fails
   over to its replica (CLUSTER FAILOVER after WAIT). Every answer counted
   by the key's final owner, none lost or counted twice, and the window
   bound held with L the slowest round trip of the run (which holds every
   redirect and every wait for a new primary).
3. With --pacer: `pacer replay --cluster` prints every scenario vector's
   expected lines (tests/vectors/scenarios.json) on each engine, as
   redis/tests/replay_vectors.rs checks on one server (the module is
   loaded with `test-clock` for it: a call without `AT` still takes the
   server's clock); `pacer watch --cluster` reads the busy key's counts as
   the clients were told them, and a plain client (no --cluster) sent to a
   node that does not own a key gets the server's MOVED as a clear error
   and exit status 2, never an answer.

Each client is a command printing one JSON line per call, as
tests/fleet/check.py describes; {url} is the cluster's seed list.

    python3 tests/fleet/cluster_check.py --module PATH --pacer target/debug/pacer \
        --client 'module=target/debug/pacer hammer --cluster --redis {url} --key {key} ...'
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

from check import CONFIG, EVERY_MS, window_bound, worst_window
from cluster import FleetCluster, key_slot

SPREAD_CALLS = 40
BUSY_CALLS = 300
# The busy key's slot moves once this many calls are counted, and its new
# primary fails over once this many are: both well inside the traffic
# (BUSY_CALLS per client, at least EVERY_MS apart).
MOVE_AT = 40
FAIL_OVER_AT = 150


def run_clients(specs, fields_of):
    """Starts every (name, spec, key) at once; returns their JSON lines
    (tagged with client and key) or exits with each failure."""
    procs = []
    try:
        for name, spec, key in specs:
            argv = [part.format(**fields_of(key)) for part in shlex.split(spec)]
            procs.append((name, key, subprocess.Popen(argv, stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True)))
        yield procs
        lines, failed = [], []
        for name, key, proc in procs:
            out, err = proc.communicate(timeout=300)
            if proc.returncode != 0:
                failed.append(f"{name} on {key} exited {proc.returncode}: {err.strip()[-400:]}")
                continue
            lines.extend(dict(json.loads(line), client=name, key=key)
                         for line in out.splitlines() if line.strip())
        if failed:
            sys.exit("cluster: " + "; ".join(failed))
        yield lines
    finally:
        for _, _, proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def counts_on(cluster, port, key):
    """admitted and refused of `key` as the node `port` itself holds it."""
    info = cluster.cli(port, "PACER.INFO", key).split("\n")
    return {info[i]: int(info[i + 1]) for i in range(0, len(info) - 1, 2)
            if info[i] in ("admitted", "refused")}


def told(lines):
    return {"admitted": sum(x["answer"] == "admitted" for x in lines),
            "refused": sum(x["answer"] == "refused" for x in lines)}


def bound_problems(lines, label):
    admitted = [x for x in lines if x["answer"] == "admitted"]
    l = max(x["reply_ms"] - x["send_ms"] for x in lines)
    opened = sorted(x["reply_ms"] + x["wait_ms"] for x in admitted)
    span = opened[-1] - opened[0] if opened else 0
    problems = []
    for w in (100, 1000, span):
        count, bound = worst_window(opened, w), window_bound(w, l)
        print(f"cluster:   {label} W = {w:>5} ms: worst count {count:>3}, bound {bound:>3} (L = {l} ms)")
        if count > bound:
            problems.append(f"{label}: {count} admissions opened within {w} ms; the bound is {bound}")
    return problems


def spread_keys(cluster, per_primary=3):
    """Keys `fleet:cluster:<i>`, the first `per_primary` each primary owns."""
    primaries = cluster.primaries()
    slots = {p: [(lo, hi) for lo, hi in cluster.nodes(cluster.ports[0])[p][3]] for p in primaries}
    taken = {p: [] for p in primaries}
    i = 0
    while any(len(keys) < per_primary for keys in taken.values()):
        key = f"fleet:cluster:{i}"
        slot = key_slot(key)
        owner = next(p for p in primaries if any(lo <= slot <= hi for lo, hi in slots[p]))
        if len(taken[owner]) < per_primary:
            taken[owner].append(key)
        i += 1
    return taken


def spread(cluster, clients):
    taken = spread_keys(cluster)
    keys = [k for p in sorted(taken) for k in taken[p]]
    # The slot this file computes is the server's.
    for key in keys:
        slot = int(cluster.cli(cluster.ports[0], "CLUSTER", "KEYSLOT", key))
        if slot != key_slot(key):
            sys.exit(f"cluster: CLUSTER KEYSLOT {key} is {slot}, key_slot says {key_slot(key)}")
    specs = [(*clients[i % len(clients)], key) for i, key in enumerate(keys)]
    fields = lambda key: dict(url=cluster.seeds, key=key, calls=SPREAD_CALLS, every=EVERY_MS, **CONFIG)
    runs = run_clients(specs, fields)
    next(runs)
    lines = next(runs)
    problems = []
    for primary in sorted(taken):
        for key in taken[primary]:
            mine = [x for x in lines if x["key"] == key]
            counted = counts_on(cluster, primary, key)
            name = mine[0]["client"] if mine else "?"
            print(f"cluster: spread {key} (slot {key_slot(key)}, primary {primary}) by {name}: "
                  f"told {told(mine)}, counted {counted}")
            if len(mine) != SPREAD_CALLS:
                problems.append(f"{key}: {len(mine)} answers for {SPREAD_CALLS} calls")
            if counted != told(mine):
                problems.append(f"{key}: its primary counted {counted}, its client was told {told(mine)}")
            problems += bound_problems(mine, key)
    return problems, len(keys)


def progress(cluster, key):
    """Calls the busy key has counted, wherever it is now (redis-cli -c
    follows the redirects)."""
    out = subprocess.run(["redis-cli", "-c", "-p", str(cluster.ports[0]), "PACER.INFO", key],
                         capture_output=True, text=True, timeout=30).stdout.split("\n")
    pairs = {out[i]: out[i + 1] for i in range(0, len(out) - 1, 2)}
    try:
        return int(pairs.get("admitted", 0)) + int(pairs.get("refused", 0))
    except ValueError:
        return 0


def faults(cluster, clients):
    key = "fleet:cluster:busy"
    first = cluster.owner(key)
    target = next(p for p in cluster.primaries() if p != first)
    specs = [(name, spec, key) for name, spec in clients]
    fields = lambda k: dict(url=cluster.seeds, key=k, calls=BUSY_CALLS, every=EVERY_MS, **CONFIG)
    runs = run_clients(specs, fields)
    procs = next(runs)
    events = {}

    def wait_for(count, what):
        deadline = time.monotonic() + 120
        while progress(cluster, key) < count:
            if all(proc.poll() is not None for _, _, proc in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"the traffic ended before {what}")
            time.sleep(0.02)

    wait_for(MOVE_AT, "the slot move")
    events["move"] = [time.time() * 1000]
    cluster.move_slot_of(key, target)
    events["move"].append(time.time() * 1000)
    wait_for(FAIL_OVER_AT, "the failover")
    events["failover"] = [time.time() * 1000]
    final = cluster.fail_over(target)
    events["failover"].append(time.time() * 1000)
    lines = next(runs)
    problems = []
    if cluster.owner(key) != final:
        problems.append(f"{key} is owned by {cluster.owner(key)}, not by {final}, the failed-over primary")
    counted = counts_on(cluster, final, key)
    print(f"cluster: busy {key}: primary {first} -> {target} (slot {key_slot(key)} moved "
          f"in {events['move'][1] - events['move'][0]:.0f} ms) -> {final} (failover in "
          f"{events['failover'][1] - events['failover'][0]:.0f} ms); "
          f"told {told(lines)}, counted {counted}")
    by_client = {}
    for x in lines:
        entry = by_client.setdefault(x["client"], [0, 0])
        entry[0 if x["answer"] == "admitted" else 1] += 1
    print("cluster:   " + ", ".join(f"{n} {a} admitted / {r} refused" for n, (a, r) in by_client.items()))
    if len(lines) != BUSY_CALLS * len(clients):
        problems.append(f"{len(lines)} answers for {BUSY_CALLS * len(clients)} calls")
    if counted != told(lines):
        problems.append(f"the final primary counted {counted}; the clients were told {told(lines)}")
    for what, (start, end) in events.items():
        before = sum(x["reply_ms"] < start for x in lines)
        after = sum(x["send_ms"] > end for x in lines)
        slowest = max((x["reply_ms"] - x["send_ms"] for x in lines
                       if x["reply_ms"] >= start and x["send_ms"] <= end), default=0)
        print(f"cluster:   {what}: {before} answers before it, {after} calls after it, "
              f"slowest call across it {slowest} ms")
        if before == 0 or after == 0:
            problems.append(f"the {what} did not happen under traffic ({before} before, {after} after)")
    problems += bound_problems(lines, key)
    return problems, key, told(lines)


def cli_checks(cluster, pacer, key, expected):
    problems = []
    watch = subprocess.run([pacer, "watch", "--cluster", "--redis", cluster.seeds, "--key", key,
                            "--json", "--count", "1"], capture_output=True, text=True, timeout=60)
    if watch.returncode != 0:
        return [f"pacer watch --cluster exited {watch.returncode}: {watch.stderr.strip()}"]
    totals = json.loads(watch.stdout.splitlines()[0])["totals"]
    seen = {"admitted": totals["admissions"], "refused": totals["refused"] + totals["booked"]}
    print(f"cluster: pacer watch --cluster on {key}: {seen}")
    if seen != expected:
        problems.append(f"pacer watch --cluster read {seen}; the clients were told {expected}")
    # A plain client on a node that does not own the key: MOVED, an error.
    stranger = next(p for p in cluster.primaries() if p != cluster.owner(key))
    plain = subprocess.run([pacer, "hammer", "--redis", f"redis://127.0.0.1:{stranger}/", "--key", key,
                            "--calls", "1"], capture_output=True, text=True, timeout=60)
    print(f"cluster: a plain hammer on node {stranger}: exit {plain.returncode}, {plain.stderr.strip()}")
    if plain.returncode != 2 or "MOVED" not in plain.stderr or plain.stdout.strip():
        problems.append(f"a plain client on a node not owning {key} was not refused with MOVED: "
                        f"exit {plain.returncode}, stdout {plain.stdout!r}, stderr {plain.stderr!r}")
    if counts_on(cluster, cluster.owner(key), key) != expected:
        problems.append("the plain client's call was counted")
    bad = subprocess.run([pacer, "hammer", "--cluster", "--redis", cluster.seeds + ",", "--key", key],
                         capture_output=True, text=True, timeout=60)
    if bad.returncode != 2 or "--cluster needs" not in bad.stderr:
        problems.append(f"an empty seed node was not refused: exit {bad.returncode}, {bad.stderr!r}")
    return problems


VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vectors", "scenarios.json")


def replay_checks(cluster, pacer):
    """Every scenario vector through `pacer replay --cluster` on each
    engine: the lines its steps expect; a clock at or past 2^52 (which a
    Redis engine cannot represent) refused there, the lines before it as
    expected."""
    with open(VECTORS) as f:
        scenarios = json.load(f)["scenarios"]
    problems, lines, beyond = [], 0, 0
    for engine in ("redis-module", "redis-script", "redis-function"):
        for scenario in scenarios:
            trace = [json.dumps({"config": scenario["config"], "t": scenario["t"]})]
            expected = [scenario["expect_pacer"]]
            for step in scenario["steps"]:
                trace.append(json.dumps(step))
                expected.append(step["expect"])
            clocks = [scenario["t"]] + [step.get("t", 0) for step in scenario["steps"]]
            stop = next((i for i, t in enumerate(clocks) if isinstance(t, int) and t >= 1 << 52), None)
            run = subprocess.run([pacer, "replay", "--engine", engine, "--cluster", "--redis", cluster.seeds],
                                 input="\n".join(trace) + "\n", capture_output=True, text=True, timeout=60)
            got = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
            name = f"{engine} {scenario['name']}"
            if stop is None and (run.returncode != 0 or got != expected):
                problems.append(f"replay {name}: exit {run.returncode}, {run.stderr.strip()[-300:]}, "
                                f"{len(got)} lines, first difference at "
                                f"{next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(got))}")
            if stop is not None:
                beyond += 1
                if run.returncode == 0 or "below 2^52" not in run.stderr or got != expected[:stop]:
                    problems.append(f"replay {name}: a clock past 2^52 not refused as documented: "
                                    f"exit {run.returncode}, {run.stderr.strip()[-300:]}")
            lines += len(got)
    print(f"cluster: pacer replay --cluster: {len(scenarios)} scenarios x 3 engines, {lines} lines as "
          f"the vectors expect; {beyond} runs refused at a clock past 2^52")
    if beyond >= 3 * len(scenarios):
        problems.append("every replay stopped at a clock past 2^52")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--module", required=True, help="path of libpacer_redis.so")
    parser.add_argument("--pacer", help="the pacer binary, for the watch and plain-client checks")
    parser.add_argument("--client", action="append", required=True, metavar="NAME=COMMAND")
    args = parser.parse_args()
    clients = [tuple(spec.split("=", 1)) for spec in args.client]
    started = time.monotonic()
    with FleetCluster(args.module, module_args=["test-clock"] if args.pacer else []) as cluster:
        print(f"cluster: 3 primaries {cluster.primaries()} and 3 replicas, ready in "
              f"{time.monotonic() - started:.1f} s")
        problems, keys = spread(cluster, clients)
        more, key, expected = faults(cluster, clients)
        problems += more
        if args.pacer:
            problems += cli_checks(cluster, args.pacer, key, expected)
            problems += replay_checks(cluster, args.pacer)
    if problems:
        sys.exit("cluster: " + "; ".join(problems))
    print(f"cluster: ok ({len(clients)} clients, {keys} buckets over 3 shards, a slot move and a "
          f"failover under traffic, {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    main()
