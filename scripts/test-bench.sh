#!/usr/bin/env bash
# Keeps the benchmark code from rotting without timing anything: every
# criterion bench runs once in test mode (each answer checked), the
# collector and the report generator run on a hand-made fixture whose
# figures are worked out by hand in tests/bench/test_report.py, the CLI
# timer runs once, and each language harness runs its --smoke mode
# (installs its pinned competitors, runs every case a few hundred times,
# checks their answers). `bash scripts/bench.sh` takes the real figures.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "-- criterion benches, test mode (core, C ABI)"
cargo test --locked -p pacer-core -p pacer-ffi --benches

echo "-- report generator on a fixture"
python3 tests/bench/test_report.py

echo "-- CLI timer (debug build, one run)"
cargo build --locked -p pacer-cli
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
target_dir="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
ROUNDS=1 python3 scripts/bench-collect.py cli "$target_dir/debug/pacer" "$scratch/cli.json"
python3 - "$scratch/cli.json" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))["rows"][0]
assert row["id"] == "matrix" and row["cases"] == 52800 and row["counterexamples"] == 0, row
assert len(row["rounds_s"]) == 1 and row["rounds_s"][0] > 0, row
print("bench-collect cli: matrix %d cases, 0 counterexamples" % row["cases"])
PY

for lang in node python go; do
    echo "-- bench/$lang/run.sh --smoke"
    bash "bench/$lang/run.sh" --smoke
done
