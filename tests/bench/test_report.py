#!/usr/bin/env python3
"""scripts/bench-report.py on a hand-made fixture. Every expected figure
below is worked out by hand from the fixture's numbers (per-round ratios or
differences first, then the median over rounds), never by calling the
generator's own helpers."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "scripts" / "bench-report.py"


def row(id, rounds, threads=1, what="", allocs=None, bytes=None):
    return {"id": id, "what": what, "threads": threads, "rounds_ns": rounds,
            "allocs_per_call": allocs, "bytes_per_call": bytes}


def layer(name, rows, **extra):
    return {"layer": name, "title": name.capitalize(), "command": "bench %s" % name, "rounds": 3,
            "versions": {name: "1.0"}, "notes": ["note of %s" % name], "rows": rows, **extra}


FIXTURE = {
    "meta": {"command": "bash scripts/bench.sh", "layers": ["core", "c", "cli", "node", "python", "go"],
             "rounds": 3, "date": "2026-12-03 09:00 UTC", "minutes": 1.0, "load_before": "0 0 0",
             "load_after": "0 0 0", "revision": "abc1234", "dirty": False, "nproc": "2", "cpu": "cpu",
             "cpu_flags": "cx16", "rustc": "rustc 1.95.0", "rustflags": ""},
    # admit/cas_u64 per round: 12/6 = 2.0, 9/6 = 1.5, 7/7 = 1.0 -> median 1.5 (met: <= 1.5)
    # refuse - load_u128 per round: 5-1 = 4, 4-2 = 2, 6-2 = 4 -> median 4 (missed: > 2)
    # refuse - load_u128 at 2t: 6.5-4 = 2.5 every round (missed: > 2, the allowance)
    # admit/governor 1t: 12/6 = 2.0, 9/6 = 1.5, 7/7 = 1.0 -> median 1.5 (missed: > 1)
    "core": layer("core", [
        row("pacer_admit", [12, 9, 7]), row("cas_u64", [6, 6, 7]),
        row("pacer_admit", [30, 30, 30], threads=2), row("cas_u64", [10, 30, 40], threads=2),
        row("governor_fake", [6, 6, 7]), row("governor_fake", [30, 15, 60], threads=2),
        row("gcra_u64", [4, 6, 7]), row("gcra_u64", [20, 20, 20], threads=2),
        row("pacer_refuse", [5, 4, 6]), row("load_u128", [1, 2, 2]),
        row("pacer_refuse", [6.5, 6.5, 6.5], threads=2), row("load_u128", [4, 4, 4], threads=2),
        row("rule_refuse", [3, 3.5, 4]),
    ], alloc_test={"command": "cargo test", "passed": True, "pacer_bytes": 64, "pacer_align": 16,
                   "state_bytes": 16}),
    # c_admit - rust_admit: 3, 1, 2 -> median +2 (met: <= 2)
    "c": layer("c", [row("rust_admit", [10, 10, 10]), row("c_admit", [13, 11, 12]),
                     row("rust_refuse", [5, 5, 5]), row("c_refuse", [9, 8, 10])]),
    "cli": {"layer": "cli", "title": "CLI", "versions": {"pacer": "pacer 0.1.0"},
            "rows": [{"id": "matrix", "command": "pacer matrix --json", "rounds_s": [0.03, 0.02, 0.04],
                      "cpu_s": [0.05, 0.05, 0.05], "cases": 52800, "counterexamples": 0}]},
    # pacer_reserve/limiter per round: 40/100, 60/100, 50/100 -> median 0.50 (met: <= 0.5)
    # pacer_reserve absolute: median of 40, 60, 50 = 50 (met: <= 50)
    "node": layer("node", [row("pacer_reserve", [40, 60, 50], bytes=48.0),
                           row("limiter_try_remove", [100, 100, 100])]),
    # aiolimiter/pacer per round: 600/100 = 6, 600/150 = 4, 700/140 = 5 -> median 5.00 (met: >= 5)
    # pacer_reserve absolute: median of 100, 150, 140 = 140 (missed: > 120)
    "python": layer("python", [row("pacer_reserve", [100, 150, 140], allocs=2.0),
                               row("aiolimiter_acquire", [600, 600, 700])]),
    # Reserve 1t: median of 70, 80, 90 = 80 (missed: > 75)
    # 2t: pacer/allow per round 90/100, 110/100, 95/100 -> median 0.95 (met: < 1)
    "go": layer("go", [row("pacer_reserve", [70, 80, 90]), row("pacer_reserve", [90, 110, 95], threads=2),
                       row("rate_allow", [100, 100, 100], threads=2),
                       row("rate_allow_n", [50, 50, 50], threads=2)]),
}


def report_of(fixture) -> str:
    """The report generated from `fixture` (one JSON file per key)."""
    with tempfile.TemporaryDirectory() as folder:
        results = Path(folder)
        for name, data in fixture.items():
            (results / ("%s.json" % name)).write_text(json.dumps(data))
        subprocess.run([sys.executable, str(REPORT), str(results), str(results / "out.md")],
                       check=True, capture_output=True)
        return (results / "out.md").read_text()


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.folder = tempfile.TemporaryDirectory()
        results = Path(cls.folder.name)
        for name, data in FIXTURE.items():
            (results / ("%s.json" % name)).write_text(json.dumps(data))
        out = results / "benchmarks.md"
        subprocess.run([sys.executable, str(REPORT), str(results), str(out)], check=True)
        cls.text = out.read_text()
        cls.targets = [line for line in cls.text.splitlines() if line.startswith("| ") and "**" in line]

    @classmethod
    def tearDownClass(cls):
        cls.folder.cleanup()

    def target(self, *parts: str) -> str:
        found = [t for t in self.targets if all(p in t for p in parts)]
        self.assertEqual(len(found), 1, "%r in %s" % (parts, "\n".join(self.targets)))
        return found[0]

    def test_ratio_is_the_median_of_per_round_ratios(self):
        line = self.target("`pacer_admit / cas_u64`", "| 1t |")
        self.assertIn("1.50× [1.00, 2.00]", line)
        self.assertIn("**met**", line)

    def test_difference_is_the_median_of_per_round_differences(self):
        line = self.target("`pacer_refuse − load_u128`", "| 1t |")
        self.assertIn("+4.00 ns [+2.00, +4.00]", line)
        self.assertIn("**missed**", line)
        line = self.target("`pacer_refuse − load_u128`", "| 2t |")
        self.assertIn("within 2 ns of a plain 128-bit load", line)
        self.assertIn("+2.50 ns [+2.50, +2.50]", line)
        self.assertIn("**missed**", line)
        self.assertIn("+2.00 ns [+1.00, +3.00]", self.target("`c_admit − rust_admit`"))
        self.assertIn("**met**", self.target("`c_admit − rust_admit`"))

    def test_binding_targets(self):
        self.assertIn("50.0 ns [40.0, 60.0] | **met**", self.target("Node", "at most 50 ns"))
        self.assertIn("0.50× [0.40, 0.60] | **met**", self.target("Node", "half of `limiter`"))
        self.assertIn("140.0 ns [100.0, 150.0] | **missed**", self.target("Python", "at most 120 ns"))
        self.assertIn("5.00× [4.00, 6.00] | **met**", self.target("Python", "aiolimiter"))
        self.assertIn("80.0 ns [70.0, 90.0] | **missed**", self.target("Go", "at most 75 ns"))
        self.assertIn("0.95× [0.90, 1.10] | **met**", self.target("Go", "`pacer_reserve / rate_allow`"))

    def test_cli_and_memory(self):
        self.assertIn("0.030 s [0.020, 0.040] | **met**", self.target("52800 cases"))
        self.assertIn("0 allocations | **met**", self.target("zero heap allocations"))
        self.assertIn("state word 16 bytes", self.target("at most 32 bytes"))

    def test_criterion_tables(self):
        self.assertIn("| benchmark | what | 1t | 2t |\n|---|---|---:|---:|\n| `pacer_admit` |", self.text)
        # cas_u64 2t rounds 10, 30, 40 -> median 30, range [10, 40]
        self.assertIn("| `cas_u64` | the same token bucket packed in one `AtomicU64`, CAS loop "
                      "| 6.00 [6.00, 7.00] | 30.00 [10.00, 40.00] |", self.text)
        self.assertIn("| benchmark | what | 1t |\n|---|---|---:|\n| `rust_admit` |", self.text)

    def test_competitor_rows_show_ratio_to_ours_and_allocations(self):
        # limiter 100 / ours 40, 60, 50 per round: 2.5, 1.67, 2.0 -> median 2.00
        limiter = [l for l in self.text.splitlines() if l.startswith("| `limiter_try_remove`")]
        self.assertEqual(len(limiter), 1)
        self.assertIn("| 2.00× |", limiter[0])
        ours = [l for l in self.text.splitlines() if l.startswith("| `pacer_reserve`") and "| 48 |" in l]
        self.assertEqual(len(ours), 1, "node pacer_reserve row with 48 bytes/call")

    def test_every_miss_is_explained(self):
        section = self.text.split("## Targets missed")[1]
        misses = [l for l in section.splitlines() if l.startswith("- **")]
        # refuse 1t (4 ns), refuse 2t (2.5 ns), admit/governor 1t (12/6, 9/6, 7/7 -> 1.5: missed),
        # admit/cas 2t (3, 1, 0.75 -> 1.0: met), governor 2t (1, 2, 0.5 -> 1.0: met),
        # c_refuse (4, 3, 5 -> +4: missed), Python 120 ns, Go 75 ns.
        self.assertEqual(len(misses), 6, "\n".join(misses))
        for miss in misses:
            self.assertNotIn("No explanation recorded", miss)
        # the refuse reason quotes the rule's own cost from the same run: median of 3, 3.5, 4
        refuse = [m for m in misses if "refuse path within" in m and "(1t)" in m]
        self.assertEqual(len(refuse), 1)
        self.assertIn("(`rule_refuse`), takes 3.5 ns [3.0, 4.0]: more than the whole allowance", refuse[0])
        # the governor reason quotes the closest 64-bit design from the same run:
        # gcra/governor 1t 4/6, 6/6, 7/7 -> 1.00 [0.67, 1.00]; 2t 20/30, 20/15, 20/60 -> 0.67 [0.33, 1.33];
        # pacer/gcra 1t 12/4, 9/6, 7/7 -> 1.50 [1.00, 3.00]; 2t 30/20 every round -> 1.50
        governor = [m for m in misses if "no slower than governor" in m]
        self.assertEqual(len(governor), 1)
        self.assertIn("it takes 1.00× [0.67, 1.00] governor's time (1t; 0.67× [0.33, 1.33] at 2t), and the "
                      "pacer takes 1.50× [1.00, 3.00] its time (1t; 1.50× [1.50, 1.50] at 2t): at one thread, on "
                      "the same word width, the rule costs about what governor's check does", governor[0])
        # and, the 1.5× target being met here, it carries the reason the state is 128 bits itself
        self.assertIn("the high-water mark is a full `u64` of milliseconds", governor[0])
        # the C reason quotes both paths' differences from the same run
        c_miss = [m for m in misses if "C call within 2 ns" in m]
        self.assertEqual(len(c_miss), 1)
        self.assertIn("adds +2.00 ns [+1.00, +3.00] on the admit path and +4.00 ns [+3.00, +5.00] on the "
                      "refuse path", c_miss[0])
        # the Go reason quotes the C call it makes from the same run: c_admit 13, 11, 12
        go_miss = [m for m in misses if "`Reserve` at most 75 ns" in m]
        self.assertEqual(len(go_miss), 1)
        self.assertIn("(`c_admit`, C ABI section) 12.0 ns [11.0, 13.0]", go_miss[0])

    def test_go_contended_miss_quotes_both_sides(self):
        # Go 2t rounds: pacer 110, 120, 95 over allow 100 -> 1.10, 1.20, 0.95 -> median 1.10 (missed);
        # both sides' medians with [min, max]; 1t: pacer 70, 80, 90 over allow 100 -> 0.80 [0.70, 0.90]
        fixture = json.loads(json.dumps(FIXTURE))
        rows = [r for r in fixture["go"]["rows"] if not (r["id"] == "pacer_reserve" and r["threads"] == 2)]
        rows += [row("pacer_reserve", [110, 120, 95], threads=2), row("rate_allow", [100, 100, 100])]
        fixture["go"]["rows"] = rows
        section = report_of(fixture).split("## Targets missed")[1]
        go = [l for l in section.splitlines() if l.startswith("- **") and "at 2 goroutines" in l]
        self.assertEqual(len(go), 1, section)
        self.assertIn("(2t): 1.10× [0.95, 1.20].**", go[0])
        self.assertIn("`pacer_reserve` takes 110.0 ns [95.0, 120.0] and `rate_allow` 100.0 ns [100.0, 100.0]",
                      go[0])
        self.assertIn("`Reserve` takes 0.80× [0.70, 0.90] of `Allow`'s time", go[0])

    def test_state_reason_is_printed_where_it_is_read(self):
        # admit/cas 2t: 30/10 every round -> 3.0 (missed); admit/governor 2t stays 1.0 (met), so the
        # governor reason is printed for 1t only and the cas reason must carry the state's reason itself
        fixture = json.loads(json.dumps(FIXTURE))
        rows = [r for r in fixture["core"]["rows"] if not (r["id"] == "cas_u64" and r["threads"] == 2)]
        fixture["core"]["rows"] = rows + [row("cas_u64", [10, 10, 10], threads=2)]
        section = report_of(fixture).split("## Targets missed")[1]
        cas = [l for l in section.splitlines() if l.startswith("- **") and "`pacer_admit / cas_u64`" in l]
        self.assertEqual(len(cas), 1, section)
        self.assertIn("the high-water mark is a full `u64` of milliseconds", cas[0])
        self.assertNotIn("is under the governor target below", cas[0])

    def test_missing_layer_fails(self):
        with tempfile.TemporaryDirectory() as folder:
            results = Path(folder)
            (results / "meta.json").write_text(json.dumps(FIXTURE["meta"]))
            (results / "core.json").write_text(json.dumps(FIXTURE["core"]))
            done = subprocess.run([sys.executable, str(REPORT), str(results), str(results / "out.md")],
                                  capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("no results from c, cli, node, python, go", done.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
