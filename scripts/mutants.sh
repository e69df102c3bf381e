#!/usr/bin/env bash
# Mutation testing of the core (long: not part of the test command).
# Installs cargo-mutants if missing, mutates core/src, runs the core's tests
# against each mutant, and leaves the results in mutants.out/. The summary
# and the table of what survived and why is docs/verification.md, written
# by scripts/mutants-report.py at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null 2>&1 || cargo install --locked cargo-mutants@27.1.0
# Property tests run fewer cases per mutant; the normal test command runs
# the full count.
export PROPTEST_CASES="${PROPTEST_CASES:-64}"
cargo mutants --package pacer-core --jobs "${JOBS:-2}" "$@" || true
echo "caught: $(wc -l < mutants.out/caught.txt)  missed: $(wc -l < mutants.out/missed.txt)  timeout: $(wc -l < mutants.out/timeout.txt)  unviable: $(wc -l < mutants.out/unviable.txt)"
# Tables the run into docs/verification.md; fails on a survivor without a
# reason in the script.
python3 scripts/mutants-report.py mutants.out docs/verification.md
