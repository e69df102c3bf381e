#!/usr/bin/env bash
# Model-checks the pacer's lock-free state with loom: every interleaving of
# the reserve/release CAS loops in core/src/loom_tests.rs (2–3 threads per
# model). Under `--cfg loom` the 128-bit state word is a loom mutex around a
# u128 (core/src/sync.rs), so each load and compare-exchange is one step.
#
# Usage: scripts/check-loom.sh [extra cargo test args]
#   env CARGO_TARGET_DIR (default target-loom), LOOM_MAX_PREEMPTIONS (loom's
#   own bound; unset = exhaustive)
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target-loom}"
export RUSTFLAGS="--cfg loom${RUSTFLAGS:+ $RUSTFLAGS}"
start=$SECONDS

cargo test -p pacer-core --release --lib loom_tests "$@"

echo "check-loom: done in $((SECONDS - start))s"
