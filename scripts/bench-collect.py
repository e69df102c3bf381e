#!/usr/bin/env python3
"""Turns one layer's raw benchmark output into the JSON that
scripts/bench-report.py reads (the schema bench/*/run.sh write too):

    {"layer", "title", "command", "rounds", "versions", "notes",
     "rows": [{"id", "what", "threads", "rounds_ns", "allocs_per_call",
               "bytes_per_call"}]}

    bench-collect.py criterion LAYER ROUNDS_DIR OUT.json --command CMD
                     [--alloc-log LOG --alloc-status N --alloc-command CMD]
        ROUNDS_DIR/roundK/<bench>/<threads>/new/estimates.json, one folder
        per round (criterion's median of each bench in each round).
    bench-collect.py cli PACER_BIN OUT.json [--exhaustive]
        times `pacer matrix --json` ROUNDS times (env, default 3) and, with
        --exhaustive, `pacer matrix --exhaustive --json` once: wall and CPU
        seconds, cases and counterexamples from the report.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

TITLES = {"core": "Core (Rust)", "c": "C ABI"}
THREADS = {"1t": 1, "2t": 2}


def criterion(args: argparse.Namespace) -> None:
    rounds = sorted(Path(args.rounds_dir).glob("round*"), key=lambda p: int(p.name[5:]))
    if not rounds:
        sys.exit(f"bench-collect: no rounds under {args.rounds_dir}")
    table: dict[tuple[str, int], list[float]] = {}
    for number, folder in enumerate(rounds):
        estimates = sorted(folder.glob("*/*/new/estimates.json"))
        if not estimates:
            sys.exit(f"bench-collect: no criterion estimates under {folder}")
        for path in estimates:
            key = (path.parts[-4], THREADS[path.parts[-3]])
            median_ns = json.loads(path.read_text())["median"]["point_estimate"]
            table.setdefault(key, [None] * len(rounds))[number] = median_ns
    rows = [{"id": name, "threads": threads, "rounds_ns": values,
             "allocs_per_call": None, "bytes_per_call": None}
            for (name, threads), values in sorted(table.items())]
    out = {"layer": args.layer, "title": TITLES.get(args.layer, args.layer),
           "command": args.command, "rounds": len(rounds),
           "versions": {"rustc": subprocess.run(["rustc", "--version"], capture_output=True,
                                                 text=True, check=True).stdout.strip()},
           "notes": [], "rows": rows}
    if args.alloc_log:
        log = Path(args.alloc_log).read_text()
        size = re.search(r"size_of::<Pacer>\(\) = (\d+) \(align (\d+)\), state word = (\d+) bytes", log)
        out["alloc_test"] = {
            "command": args.alloc_command,
            "passed": args.alloc_status == 0,
            "pacer_bytes": int(size.group(1)) if size else None,
            "pacer_align": int(size.group(2)) if size else None,
            "state_bytes": int(size.group(3)) if size else None,
        }
    Path(args.out).write_text(json.dumps(out, indent=1))


def timed(command: list[str]) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        sys.exit(f"bench-collect: {' '.join(command)} exited {done.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def cli(args: argparse.Namespace) -> None:
    runs = [("matrix", [args.pacer, "matrix", "--json"], int(os.environ.get("ROUNDS", "3")))]
    if args.exhaustive:
        runs.append(("exhaustive", [args.pacer, "matrix", "--exhaustive", "--json"], 1))
    rows = []
    for name, command, count in runs:
        row = {"id": name, "command": " ".join(["pacer"] + command[1:]), "rounds_s": [], "cpu_s": []}
        for k in range(count):
            print(f"== cli {name} {k + 1}/{count}: {row['command']}", file=sys.stderr, flush=True)
            wall, cpu, report = timed(command)
            row["rounds_s"].append(round(wall, 3))
            row["cpu_s"].append(round(cpu, 3))
            row["cases"] = report["cases"]
            row["counterexamples"] = report["counterexample_count"]
        rows.append(row)
    version = subprocess.run([args.pacer, "--version"], capture_output=True, text=True, check=False)
    Path(args.out).write_text(json.dumps(
        {"layer": "cli", "title": "CLI", "versions": {"pacer": version.stdout.strip()}, "rows": rows},
        indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    c = sub.add_parser("criterion")
    c.add_argument("layer")
    c.add_argument("rounds_dir")
    c.add_argument("out")
    c.add_argument("--command", required=True)
    c.add_argument("--alloc-log")
    c.add_argument("--alloc-status", type=int, default=0)
    c.add_argument("--alloc-command", default="")
    m = sub.add_parser("cli")
    m.add_argument("pacer")
    m.add_argument("out")
    m.add_argument("--exhaustive", action="store_true")
    args = parser.parse_args()
    criterion(args) if args.what == "criterion" else cli(args)


if __name__ == "__main__":
    main()
