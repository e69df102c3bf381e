#!/usr/bin/env bash
# The one test command: everything CI runs. Installs what it needs itself.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's time is printed when the next begins, and the total at the
# end (pass or fail): the whole must stay under 30 minutes on two cores.
step_name=""
step_start=$SECONDS
step_time() {
    if [ -n "$step_name" ]; then
        printf '(%s: %d s; %d s in all)\n' "$step_name" $((SECONDS - step_start)) "$SECONDS"
    fi
}
step() {
    step_time
    step_name=$1
    step_start=$SECONDS
    printf '\n== %s\n' "$*"
}
trap step_time EXIT

step "Redis engine dependencies: redis-server, libclang-dev (installed when absent)"
bash scripts/redis-deps.sh

step "vectors are current (scripts/gen-vectors.py)"
python3 scripts/gen-vectors.py --check

step "the metric set is listed once (docs/metrics.md): the dashboard and the alert queries name only it"
python3 scripts/check-metrics-doc.py

step "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (workspace; the Redis engine has its own step)"
cargo test --workspace --locked --exclude pacer-redis

step "Redis engine: module and script against real redis-servers, differential with the core"
bash scripts/test-redis.sh

step "no_std and no allocator in the core"
bash scripts/check-nostd.sh

step "C ABI: static, dynamic, sanitizers, valgrind, threads, C++ header"
bash scripts/test-c.sh

step "Node binding: addon, node --test, tsc, npm pack into an empty folder"
bash scripts/test-node.sh

step "Go binding: go vet, go test -race, vectors, one benchmark run"
bash scripts/test-go.sh

step "Python binding: pip install into a venv, pytest"
bash scripts/test-python.sh

step "Release check: crates (cargo publish --dry-run), the abi3 manylinux wheel and the sdist (twine check), the npm packages (npm publish --dry-run), the Go module by its path"
bash scripts/release-check.sh

step "Shared pacers: C processes (fork, SIGKILL, creation race, attach checks), Node and Go attach"
bash scripts/test-shm.sh

step "Fleet: clients of every kind on one Redis key keep the window bound"
bash scripts/test-fleet.sh

step "Fuzzing the C ABI, bounded: regressions, then about a minute of cargo-fuzz under ASan"
bash scripts/test-fuzz.sh

step "Benchmark code, not timed: criterion test mode, report generator, bench/{node,python,go} --smoke, bench-redis.sh, bench-clients.sh and bench-redis-cluster.py --smoke"
bash scripts/test-bench.sh
# The Markdown goes to stdout; its answer checks and "smoke ok" to stderr.
bash scripts/bench-redis.sh --smoke >/dev/null
bash scripts/bench-clients.sh --smoke >/dev/null
python3 scripts/bench-redis-cluster.py --smoke >/dev/null

step "loom model of the lock-free state"
bash scripts/check-loom.sh
