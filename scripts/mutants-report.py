#!/usr/bin/env python3
"""Writes docs/verification.md from a cargo-mutants run (mutants.out/).

Every caught mutant is listed with the test that caught it, read from its
log (the first failing test binary and test names). Every missed or timed
out mutant must have a reason in SURVIVORS below, keyed by its name without
the line and column; one without a reason is printed as **unexplained** and
the script exits 1.

    python3 scripts/mutants-report.py [mutants.out] [docs/verification.md]
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

from doc_sections import kept

# Mutants that no test can catch, each with why. Key: "<file>: <what>",
# the mutant's name without ":line:col".
SURVIVORS = {
    "core/src/budget.rs: replace > with >= in backoff_ms": (
        "Equivalent. The saturation guard compares the ladder total, a "
        "multiple of 2000, with `u64::MAX`, which is odd: they are never "
        "equal, so `>` and `>=` agree on every input."
    ),
    "core/src/budget.rs: replace < with <= in wait_bound_ms": (
        "Equivalent. `share < ceiling ? share : ceiling` and `<=` pick the "
        "same value when the two are equal."
    ),
    "core/src/budget.rs: replace < with <= in retry_after_s": (
        "Equivalent. `min(wanted, cap)` returns the same value whichever "
        "side wins a tie."
    ),
    "core/src/budget.rs: replace > with >= in can_refuse": (
        "Equivalent (both guards, `max_retries > 0` and `rate > 0`). With "
        "either at 0 the product `schedule · rate` that follows is 0, below "
        "60000, so the result is false either way."
    ),
    "core/src/types.rs: replace | with ^ in StateView::pack": (
        "Equivalent (both joins). The token field is shifted left past the "
        "24-bit counter, which is masked to 24 bits, and the clock sits in "
        "the high 64 bits above both: the bit ranges are disjoint, and `|` "
        "and `^` agree on disjoint bits."
    ),
    "core/src/rule.rs: replace < with <= in Params::decide": (
        "Equivalent. `units = min(tokens + max_debt, one token)`: a tie "
        "yields one token on either branch."
    ),
    "core/src/rule.rs: replace < with <= in Params::release": (
        "Equivalent. The refund cap `min(tokens + debit, capacity)`: a tie "
        "yields capacity on either branch."
    ),
    "core/src/rule.rs: replace < with <= in Params::horizon_ms": (
        "Equivalent. `min(retries_left, max_retries)`: a tie yields the same "
        "count on either branch."
    ),
    "core/src/rule.rs: replace < with == in Params::booking_hint_s": (
        "Equivalent. `wanted` is unsigned, so `wanted < 1` and `wanted == 0` "
        "are the same test."
    ),
    "core/src/rule.rs: replace < with <= in Params::booking_hint_s": (
        "Equivalent. The floor of 1: at `wanted == 1` both branches return 1."
    ),
    "core/src/rule.rs: replace > with >= in Params::booking_hint_s": (
        "Equivalent. The cap: at `wanted == cap` both branches return the cap."
    ),
    "core/src/adaptive.rs: replace | with ^ in ControlView::pack": (
        "Equivalent (all six joins). The origin, the minute of the counts, "
        "the two counts, and the low field (`L` masked to 14 bits, the "
        "`again` bit 14, the probing bit 15) occupy disjoint bit ranges "
        "(64 + 16 + 16 + 16 + 16), and `|` and `^` agree on disjoint bits."
    ),
    "core/src/adaptive.rs: replace > with >= in Range::observe": (
        "Equivalent (both comparisons). `at = max(now, origin)` and the "
        "pause's origin `max(search origin + 60000, at)`: a tie yields the "
        "same instant on either branch."
    ),
    "core/src/adaptive.rs: replace > with >= in probe_wait_ms": (
        "Equivalent. The wait `max(spaced, PROBE_WAIT_MS)`: a tie yields the "
        "same wait on either branch."
    ),
    "core/src/adaptive.rs: delete field window from struct ControlView expression in Range::observe": (
        "Missed by this run, caught since: without `window: 0` the counts "
        "kept a later minute than the throttle's (an opening read from a "
        "clock ahead, then a throttle from one behind) are not moved to the "
        "pause's origin. The test `a_pause_moves_the_counts_from_the_"
        "throttles_minute` (core/src/adaptive.rs), written after this run, "
        "fails on it: a rerun with it of the 20 mutants that a filter on "
        "this mutant's name selects, this one among them, caught all 20."
    ),
    "core/src/adaptive.rs: replace > with >= in lowest_rate": (
        "Equivalent (both comparisons). `min(refusing, ceiling)` and "
        "`max(raised, floor)`: a tie yields the same rate on either branch."
    ),
    "core/src/adaptive.rs: replace > with >= in rolled": (
        "Equivalent. The minute index saturates at `COUNT_CAP`: at "
        "`index == COUNT_CAP` both branches give `COUNT_CAP`."
    ),
    "core/src/adaptive.rs: replace > with >= in through": (
        "Equivalent. `max(opened, opened_before)`: a tie yields the same "
        "count on either branch."
    ),
    "core/src/settings.rs: replace < with <= in resolve_inner": (
        "Equivalent. `min(DEFAULT_RETRIES, ceiling)`: a tie yields the same "
        "retry count on either branch."
    ),
}

PATTERN = re.compile(r"^(?P<file>[^:]+):\d+:\d+: (?P<what>.*)$")


def key_of(name):
    m = PATTERN.match(name)
    return "%s: %s" % (m["file"], m["what"]) if m else name


def line_of(name):
    m = re.match(r"^[^:]+:(\d+):", name)
    return int(m.group(1)) if m else 0


def catcher(log_text):
    """The first failing test binary and up to two failing tests in it."""
    binary = None
    failing_binary = None
    tests = []
    for line in log_text.splitlines():
        run = re.match(r"\s+Running `?(?:[^ `]*/)?deps/([A-Za-z0-9_]+)-[0-9a-f]+", line)
        if run:
            if tests:
                break
            binary = run.group(1)
            continue
        failed = re.match(r"^test (\S+) \.\.\. FAILED", line)
        if failed:
            failing_binary = binary
            tests.append(failed.group(1))
        doc = re.match(r"^\s+Doc-tests (\S+)", line)
        if doc and not tests:
            binary = "doc-tests " + doc.group(1)
    if not tests:
        if "error[E" in log_text or "could not compile" in log_text:
            return "the test build (a test names the changed item)"
        return "a test binary exited non-zero (see log)"
    binary = {"pacer_core": "unit tests"}.get(failing_binary, failing_binary)
    names = ", ".join("`%s`" % t for t in tests[:2])
    more = " (+%d)" % (len(tests) - 2) if len(tests) > 2 else ""
    return "%s: %s%s" % (binary, names, more)


KEEP_MARKER = "<!-- Written by hand from here on; scripts/mutants-report.py keeps it. -->"


def main():
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "mutants.out")
    doc_path = Path(sys.argv[2] if len(sys.argv) > 2 else "docs/verification.md")
    data = json.loads((out_dir / "outcomes.json").read_text())
    rows = []
    for outcome in data["outcomes"]:
        scenario = outcome["scenario"]
        if not isinstance(scenario, dict) or "Mutant" not in scenario:
            continue
        mutant = scenario["Mutant"]
        rows.append((mutant["file"], line_of(mutant["name"]), mutant["name"], outcome))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    counts = Counter(o["summary"] for _, _, _, o in rows)

    lines = []
    w = lines.append
    w("# Verification of the core")
    w("")
    w("Generated by `scripts/mutants-report.py` from a `scripts/mutants.sh` run;")
    w("do not edit by hand down to the adversarial table, which is kept from the")
    w("previous document. The reasons for survivors live in that script.")
    w("")
    w("## Mutation run")
    w("")
    w("| | |")
    w("|---|---|")
    w("| command | `bash scripts/mutants.sh` (cargo-mutants %s, `.cargo/mutants.toml`) |"
      % data.get("cargo_mutants_version", "?"))
    w("| started | %s |" % data.get("start_time", "?")[:19].replace("T", " "))
    w("| mutated | `core/src/**` except the loom model and the loom-only atomic shim |")
    w("| tests run per mutant | `cargo test -p pacer-core` (unit, vectors, rules, properties at 64 cases, text, alloc) |")
    w("| mutants | %d |" % len(rows))
    w("| caught | %d |" % counts.get("CaughtMutant", 0))
    w("| missed | %d |" % counts.get("MissedMutant", 0))
    w("| timeout | %d |" % counts.get("Timeout", 0))
    w("| unviable (does not compile) | %d |" % counts.get("Unviable", 0))
    w("")

    unexplained = []
    survivors = [r for r in rows if r[3]["summary"] in ("MissedMutant", "Timeout")]
    w("## Survivors, each with its reason")
    w("")
    if not survivors:
        w("None.")
    else:
        w("| mutant | outcome | why no test can catch it |")
        w("|---|---|---|")
        for _, _, name, outcome in survivors:
            reason = SURVIVORS.get(key_of(name))
            if reason is None:
                unexplained.append(name)
                reason = "**unexplained**"
            w("| `%s` | %s | %s |" % (name, outcome["summary"], reason))
    w("")
    stale = sorted(set(SURVIVORS) - {key_of(r[2]) for r in survivors})
    if stale:
        w("Reasons kept for mutants this run caught or did not generate: %s."
          % ", ".join("`%s`" % s for s in stale))
        w("")

    w("## Caught: mutation → the test that catches it")
    w("")
    w("The first failing test binary and its first failing tests, from each")
    w("mutant's log.")
    w("")
    w("| mutant | caught by |")
    w("|---|---|")
    for _, _, name, outcome in rows:
        if outcome["summary"] != "CaughtMutant":
            continue
        log = out_dir / outcome["log_path"]
        text = log.read_text(errors="replace") if log.exists() else ""
        w("| `%s` | %s |" % (name, catcher(text)))
    w("")
    w("## Unviable")
    w("")
    w("Mutants that do not compile (a replacement value of the wrong type, a")
    w("`const fn` that cannot call the replacement, …) test nothing and are")
    w("listed only by count above.")
    w("")
    w("## Not mutated here, and what covers it")
    w("")
    w("- `core/src/sync.rs`'s loom-only `AtomicU128` shim and")
    w("  `core/src/loom_tests.rs` compile only under `--cfg loom`, which this run")
    w("  does not build. `scripts/check-loom.sh` (in the test command) explores")
    w("  every interleaving of the models; with the compare-and-swap in `reserve`")
    w("  deliberately broken (load + store), 9 of the 10 models fail")
    w("  (`docs/design.md`, Loom).")
    w("- `is_lock_free` reports the platform, not a rule; excluded.")
    w("")
    # The hand-written part below the marker (the adversarial table) is
    # carried over from the existing document.
    block = kept(doc_path, KEEP_MARKER)
    if block is not None:
        lines += [block.rstrip("\n"), ""]
    doc_path.write_text("\n".join(lines))
    print("wrote %s: %d mutants, %s" % (doc_path, len(rows), dict(counts)), file=sys.stderr)
    if unexplained:
        print("unexplained survivors:", file=sys.stderr)
        for name in unexplained:
            print("  " + name, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
