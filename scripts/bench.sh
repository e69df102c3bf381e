#!/usr/bin/env bash
# Runs the benchmarks of every layer and writes docs/benchmarks.md from them:
#
#   core    criterion, core/benches/reserve.rs (the pacer beside governor, a
#           mutex bucket and bare CAS loops, 1 and 2 threads) and the
#           allocation/size test core/tests/alloc_free.rs
#   c       criterion, ffi/benches/call.rs (pacer_reserve as a C call beside
#           the direct Rust call)
#   cli     `pacer matrix` timed ROUNDS times, `pacer matrix --exhaustive` once
#   node    bench/node/run.sh   (the addon beside limiter, p-throttle, a JS bucket)
#   python  bench/python/run.sh (beside aiolimiter, limits, pyrate-limiter, a Python bucket)
#   go      bench/go/run.sh     (beside golang.org/x/time/rate)
#
#   bash scripts/bench.sh                         # everything, 3 rounds
#   ROUNDS=5 WARMUP=2 MEASURE=5 bash scripts/bench.sh   # longer, steadier
#   LAYERS="core node" EXHAUSTIVE=0 bash scripts/bench.sh   # a subset; the
#                       document then says which layers were not run
#
# Each layer measures all of its cases in every round, in one process where
# it can, so every ratio is taken within one run; the document gives the
# median over rounds and the range. Installs what it needs (cargo, npm, pip
# into target/bench-python-venv, go modules) on a fresh clone. The criterion
# builds use $BENCH_TARGET_DIR (default target-bench) so they do not contend
# with target/; the bindings build where their own test scripts do.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
WARMUP="${WARMUP:-1}"
MEASURE="${MEASURE:-3}"
EXHAUSTIVE="${EXHAUSTIVE:-1}"
LAYERS="${LAYERS:-core c cli node python go}"
BENCH_TARGET_DIR="${BENCH_TARGET_DIR:-$PWD/target-bench}"
export BENCH_OUT="$BENCH_TARGET_DIR/results"
export ROUNDS
OUT="docs/benchmarks.md"

rm -rf "$BENCH_OUT"
mkdir -p "$BENCH_OUT"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

wants() { [[ " $LAYERS " == *" $1 "* ]]; }
criterion_args=(-- --warm-up-time "$WARMUP" --measurement-time "$MEASURE" --noplot)

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
started="$(date +%s)"

# Criterion: one run of a bench per round; its estimates are copied aside.
criterion_rounds() { # LAYER PACKAGE BENCH GROUP
    local layer=$1 package=$2 bench=$3 group=$4
    local dir="$BENCH_TARGET_DIR/criterion/$group"
    for round in $(seq 1 "$ROUNDS"); do
        rm -rf "$dir"
        echo "== $layer round $round/$ROUNDS: cargo bench -p $package --bench $bench" >&2
        CARGO_TARGET_DIR="$BENCH_TARGET_DIR" cargo bench --locked -p "$package" --bench "$bench" "${criterion_args[@]}" >&2
        mkdir -p "$scratch/$layer"
        cp -r "$dir" "$scratch/$layer/round$round"
    done
}

if wants core; then
    criterion_rounds core pacer-core reserve reserve
    alloc_cmd=(cargo test --locked -p pacer-core --release --test alloc_free -- --nocapture --test-threads 1)
    echo "== ${alloc_cmd[*]}" >&2
    alloc_status=0
    CARGO_TARGET_DIR="$BENCH_TARGET_DIR" "${alloc_cmd[@]}" >"$scratch/alloc_free.log" 2>&1 || alloc_status=$?
    cat "$scratch/alloc_free.log" >&2
    python3 scripts/bench-collect.py criterion core "$scratch/core" "$BENCH_OUT/core.json" \
        --command "cargo bench -p pacer-core --bench reserve ${criterion_args[*]}" \
        --alloc-log "$scratch/alloc_free.log" --alloc-status "$alloc_status" \
        --alloc-command "${alloc_cmd[*]}"
    [ "$alloc_status" = 0 ] || { echo "alloc_free test failed (see above)" >&2; exit 1; }
fi

if wants c; then
    criterion_rounds c pacer-ffi call call
    python3 scripts/bench-collect.py criterion c "$scratch/c" "$BENCH_OUT/c.json" \
        --command "cargo bench -p pacer-ffi --bench call ${criterion_args[*]}"
fi

if wants cli; then
    echo "== cli: cargo build --release -p pacer-cli" >&2
    cargo build --locked --release -p pacer-cli >&2
    pacer_bin="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/pacer"
    exhaustive=()
    [ "$EXHAUSTIVE" = 1 ] && exhaustive=(--exhaustive)
    python3 scripts/bench-collect.py cli "$pacer_bin" "$BENCH_OUT/cli.json" "${exhaustive[@]}"
fi

for lang in node python go; do
    if wants "$lang"; then
        echo "== $lang: ROUNDS=$ROUNDS bash bench/$lang/run.sh" >&2
        bash "bench/$lang/run.sh"
    fi
done

load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$BENCH_OUT/meta.json" <<PY
import json, sys, tomllib

def rustflags_from_config():
    """The flags .cargo/config.toml gives x86_64 builds (RUSTFLAGS unset)."""
    with open(".cargo/config.toml", "rb") as f:
        config = tomllib.load(f)
    flags = config.get("target", {}).get('cfg(target_arch = "x86_64")', {}).get("rustflags", [])
    return " ".join(flags) + " (.cargo/config.toml)" if flags else ""

json.dump({
    "command": "ROUNDS=$ROUNDS WARMUP=$WARMUP MEASURE=$MEASURE EXHAUSTIVE=$EXHAUSTIVE LAYERS=\"$LAYERS\" bash scripts/bench.sh",
    "layers": "$LAYERS".split(),
    "rounds": $ROUNDS,
    "date": "$(date -u '+%Y-%m-%d %H:%M UTC')",
    "minutes": round(($(date +%s) - $started) / 60, 1),
    "load_before": "$load_before",
    "load_after": "$load_after",
    "revision": "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)",
    "dirty": bool("$(git status --porcelain --untracked-files=no -- . ':!docs/benchmarks.md' 2>/dev/null | head -c1)"),
    "nproc": "$(nproc)",
    "cpu": "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')",
    "cpu_flags": "$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'cx16|avx|avx2|hypervisor' | tr '\n' ' ' | sed 's/ $//')",
    "rustc": "$(rustc --version)",
    "rustflags": "${RUSTFLAGS:-}" or rustflags_from_config(),
}, open(sys.argv[1], "w"), indent=1)
PY
python3 scripts/bench-report.py "$BENCH_OUT" "$OUT"
