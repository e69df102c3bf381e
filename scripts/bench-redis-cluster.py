#!/usr/bin/env python3
"""The fleet bucket's throughput on a Redis Cluster beside one server, in
the same run: `redis-benchmark` drives the same command at one redis-server
and at a cluster of 3 primaries (no replicas), both started here on free
loopback ports with the module and the function library
(tests/fleet/server.py, tests/fleet/cluster.py), buckets spread over many
keys (`-r`): on the cluster `bench:{tag}:__rand_int__`, which
redis-benchmark's `--cluster` mode sends to every primary's slots.

    python3 scripts/bench-redis-cluster.py           # 5 rounds; Markdown on stdout
    python3 scripts/bench-redis-cluster.py --write   # and into docs/benchmarks.md
                                                     # (between redis-cluster:begin/end)
    python3 scripts/bench-redis-cluster.py --smoke   # one short round: checks, times nothing
    ROUNDS=9 REQUESTS=200000 CLIENTS=60 python3 scripts/bench-redis-cluster.py

Each round runs every case on the server and on the cluster, one after the
other; a ratio (cluster ops/s ÷ one server's) is taken within the round and
the median over rounds reported. After each run every key is read back and
the run rejected unless the calls were all counted (INCR: the values sum
to the requests; the pacer: every call admitted, the keys' `admitted`
summing to the requests, or, pipelined, to at most a pipeline's worth more
per connection, which redis-benchmark may send).
"""

import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "fleet"))

from cluster import FleetCluster  # noqa: E402
from server import FleetServer  # noqa: E402

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- redis-cluster:begin -->", "<!-- redis-cluster:end -->"
# Admitting: 600/min with a burst of 10^6, so every call writes (as
# scripts/bench-redis.sh's admitting cases).
PACER_ADMIT = ["600", "1000000", "120000", "5", "refund"]
KEYS = 1000  # -r: keys per run (each bucket sees about REQUESTS/KEYS calls)
CASES = {
    "incr": lambda key: ["INCR", key],
    "module_admit": lambda key: ["PACER.RESERVE", key, *PACER_ADMIT],
    "function_admit": lambda key: ["FCALL", "pacer", "1", key, "reserve", *PACER_ADMIT],
    "module_admit_pipelined": lambda key: ["PACER.RESERVE", key, *PACER_ADMIT],
}
# Commands each connection sends before reading the replies (-P): one,
# as a pacer's caller does; 32 for the module's second row, which spends
# less of the client's core per call, so the servers' share shows.
PIPELINE = {"module_admit_pipelined": 32}


def run_benchmark(port, cluster, command, requests, clients, pipeline=1):
    argv = ["redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(clients),
            "-r", str(KEYS), "-P", str(pipeline), "--csv", *(["--cluster"] if cluster else []), *command]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith('"') and not line.startswith('"test"')]
    if len(rows) != 1:
        raise RuntimeError(f"redis-benchmark printed {out!r}")
    return float(rows[0].split('","')[1])


def counted(cli_of, ports, case_id, prefix):
    """What the run's keys hold, summed over `ports`: INCR's values, or the
    buckets' admitted and refused (one redis-cli per node, reading its
    commands from stdin)."""
    total = {"calls": 0, "refused": 0}
    for port in ports:
        keys = [k for k in cli_of(port, "--scan", "--pattern", prefix + "*").split("\n") if k]
        if not keys:
            continue
        op = "GET" if case_id == "incr" else "PACER.INFO"
        replies = cli_of(port, stdin="".join(f"{op} {key}\n" for key in keys)).split("\n")
        if case_id == "incr":
            total["calls"] += sum(int(v) for v in replies if v.strip())
            continue
        for name, value in zip(replies, replies[1:]):
            if name in ("admitted", "refused"):
                total["calls" if name == "admitted" else "refused"] += int(value)
    return total


def main():
    write = "--write" in sys.argv
    smoke = "--smoke" in sys.argv
    unknown = [a for a in sys.argv[1:] if a not in ("--write", "--smoke")]
    if unknown or (write and smoke):
        sys.exit("usage: bench-redis-cluster.py [--write | --smoke]")
    rounds = int(os.environ.get("ROUNDS", 1 if smoke else 5))
    requests = int(os.environ.get("REQUESTS", 3000 if smoke else 100000))
    clients = int(os.environ.get("CLIENTS", 30 if smoke else 60))
    profile = os.environ.get("PROFILE", "debug" if smoke else "release")
    build = ["cargo", "build", "--locked", "-p", "pacer-redis"] + (["--release"] if profile == "release" else [])
    subprocess.run(build, check=True, cwd=ROOT, stdout=sys.stderr)
    target = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    import json
    module = os.path.join(json.loads(target)["target_directory"], profile, "libpacer_redis.so")
    started, load_before = time.time(), open("/proc/loadavg").read().split()[:3]
    ops = {case_id: {"server": [], "cluster": []} for case_id in CASES}
    with FleetServer(module) as server, FleetCluster(module, nodes=3, replicas=0) as cluster:
        primaries = cluster.primaries()
        for round_no in range(1, rounds + 1):
            for case_id, command_of in CASES.items():
                for where in ("server", "cluster"):
                    prefix = f"bench:{case_id}:{where}:{round_no}:"
                    pipeline = PIPELINE.get(case_id, 1)
                    if where == "server":
                        rps = run_benchmark(server.port, False, command_of(prefix + "__rand_int__"),
                                            requests, clients, pipeline)
                        got = counted(lambda p, *a, **k: server.cli(*a, **k), [server.port], case_id, prefix)
                    else:
                        rps = run_benchmark(cluster.ports[0], True, command_of(prefix + "{tag}:__rand_int__"),
                                            requests, clients, pipeline)
                        got = counted(cluster.cli, primaries, case_id, prefix)
                    # A pipelined run may send up to a pipeline's worth more per connection.
                    if not (got["refused"] == 0 and requests <= got["calls"] <= requests + clients * (pipeline - 1)):
                        sys.exit(f"bench-redis-cluster: {case_id} on the {where}: {requests} calls, "
                                 f"the keys hold {got}")
                    ops[case_id][where].append(rps)
                    print(f"bench-redis-cluster: round {round_no} {case_id} {where}: {rps:,.0f} ops/s",
                          file=sys.stderr)
    if smoke:
        print("bench-redis-cluster: smoke ok", file=sys.stderr)
        return
    took = (time.time() - started) / 60
    load_after = open("/proc/loadavg").read().split()[:3]
    revision = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()

    def spread(values, fmt):
        return f"{fmt(statistics.median(values))} [{fmt(min(values))}, {fmt(max(values))}]"

    lines = [
        BEGIN,
        "## Redis Cluster: 3 primaries beside one server",
        "",
        "Generated by `python3 scripts/bench-redis-cluster.py --write`, which replaces only this section "
        "(between the `redis-cluster:begin` and `redis-cluster:end` markers).",
        f"One `redis-server` and a Redis Cluster of 3 primaries (no replicas) are started on free loopback ports "
        f"with the module (production mode) and the function library, no persistence; `redis-benchmark -n "
        f"{requests} -c {clients} -r {KEYS} -P 1` (`-P 32` where the row says so) drives each case at the server "
        f"(`bench:<case>:…:__rand_int__`) "
        f"and, with `--cluster`, at the cluster (`…:{{tag}}:__rand_int__`: redis-benchmark sends each primary's "
        f"share with a tag of its slots), one after the other in each round; every call is read back as counted. "
        f"Client and servers share this machine's {os.cpu_count()} cores.",
        "",
        "| | |",
        "|---|---|",
        f"| rounds | {rounds} |",
        f"| date | {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} (took {took:.1f} min) |",
        f"| load average (1, 5, 15 min) | before {' '.join(load_before)}; after {' '.join(load_after)} |",
        f"| revision | {revision} |",
        f"| cores (`nproc`) | {os.cpu_count()} |",
        f"| machine | {platform.machine()} |",
        f"| server | {version} |",
        "",
        "| case | one server, ops/s | cluster of 3, ops/s | cluster ÷ server (within each round) |",
        "|---|---:|---:|---:|",
    ]
    for case_id, by in ops.items():
        ratios = [c / s for s, c in zip(by["server"], by["cluster"])]
        pipelined = f" (`-P {PIPELINE[case_id]}`)" if case_id in PIPELINE else ""
        lines.append(f"| `{' '.join(CASES[case_id]('bench:…'))}`{pipelined} | {spread(by['server'], lambda v: f'{v:,.0f}')} "
                     f"| {spread(by['cluster'], lambda v: f'{v:,.0f}')} | {spread(ratios, lambda v: f'{v:.2f}×')} |")
    def ratio(case_id):
        return statistics.median(c / s for s, c in zip(ops[case_id]["server"], ops[case_id]["cluster"]))

    module_ratio, pipelined_ratio = ratio("module_admit"), ratio("module_admit_pipelined")
    verdict = "met" if module_ratio >= 1.6 else "missed"
    lines += [
        "",
        "Median [min, max] over rounds.",
        "",
        f"Target: the module's ops/s on 3 primaries at least 1.6× one server's on this machine: "
        f"{module_ratio:.2f}× with one call in flight per connection and {pipelined_ratio:.2f}× with 32 "
        f"(where the client spends less of a core per call): **{verdict}**. What bounds "
        f"it here (a reading, not a measurement): "
        f"each primary runs its commands on one thread, and redis-benchmark's own thread needs about "
        f"a core to keep one server busy, so on {os.cpu_count()} cores the three primaries share what "
        f"the client leaves of the second core: the pipelined cluster row stays at one figure however "
        f"deep the pipeline (tried while developing: -P 32, 64 and 128 gave 394,000–398,000 ops/s), the "
        f"machine's cores full. On paper, past this machine: with the client on other "
        f"machines and a core for each primary, every call touching one key of one slot, the fleet's "
        f"ops/s grow with the primaries, N primaries about N times one server's, as long as the "
        f"buckets are many enough to spread over the slots; one bucket lives on one primary, so a "
        f"single bucket's calls stay bounded by one server's figure (the module's row above).",
        END,
    ]
    section = "\n".join(lines)
    print(section)
    if write:
        with open(DOC) as f:
            doc = f.read()
        if BEGIN in doc:
            start, end = doc.index(BEGIN), doc.index(END) + len(END)
            doc = doc[:start] + section + doc[end:]
        else:
            doc = doc.rstrip("\n") + "\n\n" + section + "\n"
        with open(DOC, "w") as f:
            f.write(doc)


if __name__ == "__main__":
    main()
