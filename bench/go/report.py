"""Turns run.sh's rounds of `go test -bench` output into bench/go's JSON.

    python3 report.py OUT.json ROUND1.txt [ROUND2.txt ...] -- KEY=VALUE ...

Each round file is one process's run of every benchmark at -cpu 1,2; the
KEY=VALUE pairs are the versions. Prints a short table to stderr.
"""

import json
import re
import statistics
import sys

# Benchmark name -> (row id, what it measures).
CASES = {
    "FloorCgoNoop": ("floor_cgo_noop", "an empty cgo call (the crossing floor)"),
    "PacerReserve": ("pacer_reserve", "(*Pacer).Reserve, admitted at once (a ticket each)"),
    "PacerReserveRefuse": ("pacer_reserve_refuse", "(*Pacer).Reserve on a drained pacer, refused"),
    "PacerAdmit": ("pacer_admit", "(*Pacer).Admit(ctx), admitted at once"),
    "RateAllow": ("rate_allow", "x/time/rate Allow() (reads time.Now), admitted"),
    "RateAllowN": ("rate_allow_n", "x/time/rate AllowN(t, 1), our clock readings, admitted"),
    "RateAllowNRefuse": ("rate_allow_n_refuse", "x/time/rate AllowN(t, 1) on a drained limiter, refused"),
    "RateReserveN": ("rate_reserve_n", "x/time/rate ReserveN(t, 1), our clock readings, admitted (a *Reservation each)"),
    "RateWait": ("rate_wait", "x/time/rate Wait(ctx) (reads time.Now), admitted at once"),
}

LINE = re.compile(r"^Benchmark(\w+?)(?:-(\d+))?\s+\d+\s+(.*)$")

NOTES = [
    "Go benchmarks (`testing.B`, bench/go/bench_test.go) built once with `go test -c` and run as one "
    "process per round (`-test.bench . -test.benchmem -test.cpu 1,2`), so every case of a round is "
    "measured in the same process; `rounds_ns` is each round's ns/op.",
    "Every case runs under `b.RunParallel` on one shared pacer or limiter: threads 1 is one goroutine "
    "(GOMAXPROCS 1), threads 2 two goroutines (GOMAXPROCS 2). ns/op is wall time divided by the calls "
    "of all goroutines, so two goroutines scaling perfectly would halve it.",
    "Both sides are configured alike: the pacer at its defaults (60/min, burst 10, bound 4833 ms), "
    "x/time/rate as `rate.NewLimiter(rate.Every(time.Second), 10)`.",
    "Admitting cases with an explicit clock (`pacer_reserve`, `pacer_admit`, `rate_allow_n`, "
    "`rate_reserve_n`) advance it 1000 ms per call, one token per call: one goroutine counts in a "
    "local variable; two share one atomic counter, each call taking the next reading (the same "
    "counter, and its cost, on both sides). x/time/rate gets the readings as `time.Time` values.",
    "`rate_allow` and `rate_wait` read `time.Now`, as callers of `Allow` and `Wait` do; to admit every "
    "call on the real clock their limiter is 10^9 a second with burst 1000.",
    "Every call's answer is checked inside the loop (admitted, or refused as configured); "
    "`run.sh --smoke` runs each case 100 times with the same checks plus TestSmoke.",
    "`pacer_reserve` returns a `*Ticket` (the refund right) and `rate_reserve_n` a `*rate.Reservation`; "
    "each goroutine keeps its last one, as a caller keeps it to refund or cancel, so they live on the heap "
    "as in real use. Tickets are allocated 16 at a time (a chunk of 16 · 24 bytes), hence about "
    "1/16 allocation per call.",
    "`allocs_per_call` and `bytes_per_call` are exact (runtime.MemStats Mallocs and TotalAlloc over "
    "b.N, median of the rounds), not the rounded -benchmem integers.",
    "The floor is an empty C function with the `#cgo nocallback` annotation of the binding's hot call.",
]


def parse(path):
    rows = {}
    cpu = None
    for line in open(path, encoding="utf-8"):
        if line.startswith("cpu:"):
            cpu = line.split(":", 1)[1].strip()
        m = LINE.match(line.strip())
        if not m:
            continue
        name, procs, rest = m.group(1), int(m.group(2) or 1), m.group(3)
        metrics = {unit: float(value) for value, unit in re.findall(r"([\d.e+-]+) (\S+)", rest)}
        if name in CASES and "ns/op" in metrics:
            rows[(name, procs)] = metrics
    return rows, cpu


def main(argv):
    split = argv.index("--")
    out, rounds = argv[1], argv[2:split]
    versions = dict(kv.split("=", 1) for kv in argv[split + 1:])
    parsed = [parse(r) for r in rounds]
    cpu = next((c for _, c in parsed if c), None)
    keys = sorted({k for rows, _ in parsed for k in rows},
                  key=lambda k: (list(CASES).index(k[0]), k[1]))
    out_rows = []
    for name, procs in keys:
        per_round = [rows.get((name, procs)) for rows, _ in parsed]
        if any(r is None for r in per_round):
            sys.exit(f"bench-go: {name} at {procs} thread(s) missing from a round")
        ident, what = CASES[name]
        out_rows.append({
            "id": ident,
            "what": what,
            "threads": procs,
            "rounds_ns": [round(r["ns/op"], 2) for r in per_round],
            "allocs_per_call": round(statistics.median(r["allocs/call"] for r in per_round), 4),
            "bytes_per_call": round(statistics.median(r["B/call"] for r in per_round), 2),
        })
    missing = {CASES[n][0] for n in CASES} - {r["id"] for r in out_rows}
    if missing:
        sys.exit(f"bench-go: no results for {sorted(missing)}")
    notes = list(NOTES)
    if cpu:
        notes.append(f"CPU as Go reports it: {cpu}.")
    doc = {
        "layer": "go",
        "title": "Go binding",
        "command": "bash bench/go/run.sh",
        "rounds": len(rounds),
        "versions": versions,
        "notes": notes,
        "rows": out_rows,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")

    # The table: each row's rounds and median, and the ratio to x/time/rate's
    # AllowN at the same thread count.
    med = {(r["id"], r["threads"]): statistics.median(r["rounds_ns"]) for r in out_rows}
    print(f"{'case':<22}{'thr':>4}  {'median ns':>10}  {'vs rate_allow_n':>15}  {'allocs':>7}  {'B':>6}  rounds",
          file=sys.stderr)
    for r in out_rows:
        m = med[(r["id"], r["threads"])]
        base = med.get(("rate_allow_n", r["threads"]))
        ratio = f"{m / base:.2f}x" if base else "-"
        rs = " ".join(f"{x:.1f}" for x in r["rounds_ns"])
        print(f"{r['id']:<22}{r['threads']:>4}  {m:>10.1f}  {ratio:>15}  {r['allocs_per_call']:>7.4f}  "
              f"{r['bytes_per_call']:>6.1f}  {rs}", file=sys.stderr)
    print(f"bench-go: wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
