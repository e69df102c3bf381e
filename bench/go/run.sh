#!/usr/bin/env bash
# The Go binding's benchmarks (bench_test.go): the binding's hot calls
# beside golang.org/x/time/rate, at one and two goroutines.
#
#   bash bench/go/run.sh            ROUNDS rounds (default 3), one process
#                                   each; JSON to
#                                   ${BENCH_OUT:-<repo>/target-bench/results}/go.json
#   bash bench/go/run.sh --smoke    every case 100 times with its answers
#                                   checked, plus TestSmoke; nothing written
#
# Builds libpacer.a the way scripts/test-go.sh does (cargo, honouring
# CARGO_TARGET_DIR); x/time/rate comes through the module proxy at the
# version go.mod and go.sum pin. Needs go 1.26 or later (x/time v0.16.0
# asks for it) with cgo, cargo and python3.
set -euo pipefail
cd "$(dirname "$0")"
repo="$(cd ../.. && pwd)"

smoke=0
case "${1:-}" in
  --smoke) smoke=1 ;;
  "") ;;
  *) echo "usage: bash bench/go/run.sh [--smoke]" >&2; exit 2 ;;
esac

for tool in go cargo python3; do
  command -v "$tool" >/dev/null || { echo "bench-go: $tool is required" >&2; exit 1; }
done

# The binding's build step: libpacer.a, linked into the Go binary.
(cd "$repo" && cargo build --release --locked -p pacer-ffi) >&2
target="${CARGO_TARGET_DIR:-$repo/target}"
case "$target" in /*) ;; *) target="$repo/$target" ;; esac
[ -f "$target/release/libpacer.a" ] || { echo "bench-go: $target/release/libpacer.a was not built" >&2; exit 1; }
export CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}"
[ "$target" -ef "$repo/target" ] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=pacer_lib_elsewhere"
export GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS="${GOFLAGS:-} -mod=readonly"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go test -c -o "$work/bench.test" . >&2

if [ "$smoke" = 1 ]; then
  "$work/bench.test" -test.run '^TestSmoke$' -test.count 1 >&2
  log="$work/smoke.txt"
  if ! "$work/bench.test" -test.run '^$' -test.bench . -test.benchtime 100x -test.cpu 1,2 >"$log" 2>&1; then
    cat "$log" >&2
    echo "bench-go smoke: FAILED" >&2
    exit 1
  fi
  if grep -q -e '--- FAIL' -e '^FAIL' "$log"; then
    cat "$log" >&2
    echo "bench-go smoke: FAILED" >&2
    exit 1
  fi
  cases=$(grep -oE '^Benchmark[A-Za-z]+' "$log" | sort -u | wc -l)
  echo "bench-go smoke: $cases cases ok"
  exit 0
fi

rounds="${ROUNDS:-3}"
out_dir="${BENCH_OUT:-$repo/target-bench/results}"
mkdir -p "$out_dir"
files=()
for r in $(seq 1 "$rounds"); do
  echo "bench-go: round $r of $rounds" >&2
  "$work/bench.test" -test.run '^$' -test.bench . -test.benchmem -test.cpu 1,2 \
    -test.benchtime "${BENCHTIME:-1s}" >"$work/round$r.txt"
  if grep -q -e '--- FAIL' -e '^FAIL' "$work/round$r.txt"; then
    cat "$work/round$r.txt" >&2
    echo "bench-go: round $r failed" >&2
    exit 1
  fi
  files+=("$work/round$r.txt")
done

library=$("$work/bench.test" -test.run '^TestVersion$' -test.v | sed -n 's/.*pacer-library-version //p')
python3 report.py "$out_dir/go.json" "${files[@]}" -- \
  "go=$(go env GOVERSION)" \
  "golang.org/x/time=$(go list -m -f '{{.Version}}' golang.org/x/time)" \
  "libpacer=$library"
