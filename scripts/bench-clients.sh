#!/usr/bin/env bash
# The fleet clients' figure (issue: per-call latency beside a PING): each
# binding's RedisPacer.reserve beside its client library's PING on the same
# connection, for the module, the function and the script.
#
#   bash scripts/bench-clients.sh            # 5 rounds of 20000; Markdown on stdout
#   bash scripts/bench-clients.sh --write    # the same, and it replaces the section
#                                            # between <!-- clients:begin --> and
#                                            # <!-- clients:end --> in docs/benchmarks.md
#   bash scripts/bench-clients.sh --smoke    # one round of 200: checks the harness
#   ROUNDS=9 CALLS=20000 bash scripts/bench-clients.sh --write
#
# Builds what it needs: the module (release), libpacer.a for the Go
# harness, the Node addon with node-redis (npm ci), a venv with the Python
# binding and redis-py (target/bench-python-venv). bench/clients/run.py
# starts and stops the server; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib/bench-args.sh
. scripts/lib/bench-args.sh
bench_args bench-clients 2,15 "$@"
if [ "$smoke" = 1 ]; then
    # The smoke run checks the harness, not the speed: the debug module that
    # scripts/test-redis.sh has already built serves (PROFILE=release for the other).
    ROUNDS="${ROUNDS:-1}" CALLS="${CALLS:-200}" PROFILE="${PROFILE:-debug}"
else
    ROUNDS="${ROUNDS:-5}" CALLS="${CALLS:-20000}" PROFILE="${PROFILE:-release}"
fi
for tool in cargo node npm go python3; do
    command -v "$tool" >/dev/null || { echo "bench-clients: $tool is required" >&2; exit 1; }
done

bash scripts/redis-deps.sh >&2
module_build=(cargo build --locked -p pacer-redis)
[ "$PROFILE" = release ] && module_build+=(--release)
"${module_build[@]}" >&2
cargo build --locked --release -p pacer-ffi >&2
target="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
# Built outside target/ (CARGO_TARGET_DIR): skip the Go package's check for libpacer.a there.
[ "$target" -ef target ] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=pacer_lib_elsewhere"

# Node: the addon and node-redis, as scripts/test-node.sh makes them.
(cd bindings/node && { [ -d node_modules/redis ] || npm ci --no-audit --no-fund --loglevel=error; } &&
    node scripts/build.js) >&2
# Python: the binding with its "redis" extra in the benchmarks' venv.
venv=target/bench-python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
PIP_CONSTRAINT="$PWD/bindings/python/tests/constraints.txt" \
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "./bindings/python[redis]" >&2
# Go: the harness, linked with libpacer.a (go.mod and go.sum pinned).
(cd bench/clients/go && GOTOOLCHAIN=local CGO_ENABLED=1 CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}" \
    go build -mod=readonly -o "$target/bench-clients-go" .) >&2

revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain -- bindings bench/clients redis 2>/dev/null | head -c1)" ] ||
    revision="$revision, with uncommitted changes under bindings/, bench/clients/ or redis/"

args=(--module "$target/$PROFILE/libpacer_redis.so" --profile "$PROFILE" --rounds "$ROUNDS" --calls "$CALLS" --revision "$revision"
    --client "node=node bench/clients/node.mjs {url} {key} {engine} {calls} {rounds}"
    --client "python=$venv/bin/python bench/clients/python.py {url} {key} {engine} {calls} {rounds}"
    --client "go=$target/bench-clients-go {url} {key} {engine} {calls} {rounds}")
[ "$smoke" = 1 ] && args+=(--smoke)
[ "$write" = 1 ] && args+=(--write docs/benchmarks.md)
python3 bench/clients/run.py "${args[@]}"
