#!/usr/bin/env bash
# The Node binding's benchmarks (bench.mjs): the addon's hot call and the
# public Pacer beside limiter, p-throttle and a plain JS bucket.
#
#   bash bench/node/run.sh            ROUNDS rounds (default 3); JSON to
#                                     ${BENCH_OUT:-target-bench/results}/node.json
#   bash bench/node/run.sh --smoke    a few hundred calls per case, answers
#                                     checked, nothing written
#
# Installs the competitors from package-lock.json and builds the addon with
# the binding's own build step (bindings/node/scripts/build.js) when
# pacer.node is missing or older than its sources.
set -euo pipefail
cd "$(dirname "$0")"
repo="$(cd ../.. && pwd)"
binding="$repo/bindings/node"

command -v node >/dev/null || { echo "bench-node: node is required" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "bench-node: Node >= 20 required, found $(node --version)" >&2; exit 1; }

# Competitors, exactly as locked (reinstalled when the lock file changes).
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm ci --no-audit --no-fund --loglevel=error >&2
fi

# The addon, rebuilt when anything it is built from is newer.
if [ ! -f "$binding/pacer.node" ] || [ -n "$(find "$binding/src" "$binding/Cargo.toml" "$binding/build.rs" \
        "$repo/core/src" "$repo/core/Cargo.toml" "$repo/ffi/src" "$repo/ffi/Cargo.toml" "$repo/Cargo.lock" \
        -newer "$binding/pacer.node" -print -quit 2>/dev/null)" ]; then
    (cd "$binding" && node scripts/build.js) >&2
fi

exec node --expose-gc bench.mjs "$@"
