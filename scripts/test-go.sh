#!/usr/bin/env bash
# The Go binding (bindings/go): builds libpacer.a and the Redis module with
# cargo, then runs gofmt, go vet, go test -race (RedisPacer's tests start
# their own redis-servers) and one short benchmark run against it.
# Needs go (1.26 or later, cgo with gcc), cargo and redis-server (installed
# by scripts/redis-deps.sh when absent).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v go >/dev/null || { echo "test-go: go is required" >&2; exit 1; }
command -v cargo >/dev/null || { echo "test-go: cargo is required" >&2; exit 1; }

bash scripts/redis-deps.sh
cargo build --release --locked -p pacer-ffi
cargo build --locked -p pacer-redis

# Both are where cargo put them (honouring CARGO_TARGET_DIR and cargo's
# configuration): cargo metadata's target_directory.
target=$(cargo metadata --format-version 1 --no-deps --locked |
  sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "test-go: cargo metadata named no target directory" >&2; exit 1; }
lib="$target/release/libpacer.a"
[ -f "$lib" ] || { echo "test-go: $lib was not built" >&2; exit 1; }
export PACER_REDIS_MODULE="$target/debug/libpacer_redis.so"
[ -f "$PACER_REDIS_MODULE" ] || { echo "test-go: $PACER_REDIS_MODULE was not built" >&2; exit 1; }

# Use the installed toolchain only. The dependencies, go-redis and (for the
# metrics package alone) client_golang, with what they need, come from the
# module proxy into the module cache on the first
# run (go mod download below), checked against go.sum; go changes neither
# go.mod nor go.sum here (-mod=readonly, its default).
export GOTOOLCHAIN=local CGO_ENABLED=1
# The package links -l:libpacer.a with -L<repo>/target/release; this -L comes
# first on the link line, so the library just built is the one linked (the
# final link of the test binary reads it every time).
export CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}"
# Built outside the repository's target/ (CARGO_TARGET_DIR): the package's
# compile-time check for libpacer.a (libcheck.go) looks there, so skip it.
[ "$target" -ef target ] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=pacer_lib_elsewhere"

# pacer.lua here is generated (go generate: go:embed reads only the
# package's folder); it must be redis/pacer.lua byte for byte.
cmp bindings/go/pacer.lua redis/pacer.lua ||
  { echo "test-go: bindings/go/pacer.lua differs from redis/pacer.lua: run go generate in bindings/go" >&2; exit 1; }

cd bindings/go
go mod download
echo "test-go: $(go version), library $lib, module $PACER_REDIS_MODULE"

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
