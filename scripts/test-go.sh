#!/usr/bin/env bash
# The Go binding (bindings/go): builds libpacer.a with cargo, then runs
# gofmt, go vet, go test -race and one short benchmark run against it.
# Needs go (1.24 or later, cgo with gcc) and cargo; downloads nothing for Go.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

command -v go >/dev/null || { echo "test-go: go is required" >&2; exit 1; }
command -v cargo >/dev/null || { echo "test-go: cargo is required" >&2; exit 1; }

cargo build --release --locked -p pacer-ffi

# The library is where cargo put it: $CARGO_TARGET_DIR (relative to the
# repository root when relative) or target/.
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
lib="$target/release/libpacer.a"
[ -f "$lib" ] || { echo "test-go: $lib was not built" >&2; exit 1; }

# Use the installed toolchain only, and no module downloads (the binding
# has no dependencies outside the standard library).
export GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=1
# The package links -l:libpacer.a with -L<repo>/target/release; this -L comes
# first on the link line, so the library just built is the one linked (the
# final link of the test binary reads it every time).
export CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}"

cd bindings/go
echo "test-go: $(go version), library $lib"

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test-go: gofmt would change:" >&2
  echo "$unformatted" >&2
  exit 1
fi

go vet ./...
echo "test-go: go vet ok"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
go test -race -count=1 -v ./... 2>&1 | tee "$log"
tests=$(grep -c '^--- PASS' "$log" || true)
subtests=$(grep -c '^    --- PASS' "$log" || true)
echo "test-go: go test -race: $tests tests passed ($subtests subtests)"

go test -run '^$' -bench . -benchtime 1000x -count=1 ./...
