#!/usr/bin/env bash
# The flake hunt: runs the suites that touch real clocks, threads or
# processes ROUNDS times (default 10) while two busy processes load this
# 2-core machine, counts the failures, and writes docs/flake-hunt.md.
# Not part of the test command (about 20-30 minutes without loom, plus about
# 4 minutes a loom round); a failure here is a test that depends on how fast
# the machine runs, and blocks landing like any red test.
#
# Usage: scripts/flake-hunt.sh
#   env ROUNDS (default 10), LOOM_ROUNDS (default ROUNDS; 0 skips loom),
#       STRESS (busy processes, default 2), OUT (default docs/flake-hunt.md)
set -euo pipefail
# shellcheck source=scripts/lib/root.sh
. "$(dirname "$0")/lib/root.sh"
rounds="${ROUNDS:-10}"
loom_rounds="${LOOM_ROUNDS:-$rounds}"
stress="${STRESS:-2}"
out="${OUT:-docs/flake-hunt.md}"
logs=$(mktemp -d)

# Build everything once, unloaded, through the suites' own scripts (they
# install what they need); the rounds then only run tests.
echo "flake-hunt: building"
# The Go modules and the Node addon before test-shm.sh, which uses them
# offline (GOPROXY=off), as the test command's order has them.
build() {
  local log="$logs/build-$1.log"
  shift
  "$@" >"$log" 2>&1 || { echo "flake-hunt: building failed: $*" >&2; tail -20 "$log" >&2; exit 1; }
}
build c bash scripts/test-c.sh
build node bash -c 'cd bindings/node && npm ci --no-audit --no-fund && node scripts/build.js'
build go bash -c 'cd bindings/go && go mod download && go vet ./...'
build python bash scripts/test-python.sh
build shm bash scripts/test-shm.sh
build cli cargo test -p pacer-cli --test watch --no-run
# The fleet's checks once (they build the CLI, the module and the Go fleet
# hammer), then the cluster checks alone each round.
build fleet bash scripts/test-fleet.sh

busy=()
stop_busy() { for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap 'stop_busy; rm -rf "$logs"' EXIT
for _ in $(seq "$stress"); do
  (while :; do :; done) &
  busy+=("$!")
done

suites=(c-threads shm python node go cli-watch fleet-cluster cluster-fault)
[ "$loom_rounds" -gt 0 ] && suites+=(loom)
declare -A passed failed
for s in "${suites[@]}"; do passed[$s]=0; failed[$s]=0; done

# The fleet's cluster checks with the clients scripts/test-fleet.sh gives
# them (debug builds, as that script made them).
# shellcheck source=scripts/lib/fleet-clients.sh
. scripts/lib/fleet-clients.sh
fleet_clients target/debug/pacer target/fleet-hammer-go

run_suite() {
  case "$1" in
    c-threads) "$root/target/c-tests/test_threads" ;;
    shm) bash scripts/test-shm.sh ;;
    python) target/python-venv/bin/python -m pytest bindings/python/tests -q -p no:cacheprovider ;;
    node) (cd bindings/node && node --test test/) ;;
    go) (cd bindings/go && go test -race -count=1 ./...) ;;
    cli-watch) cargo test -q -p pacer-cli --test watch ;;
    fleet-cluster) python3 tests/fleet/cluster_check.py --module target/debug/libpacer_redis.so \
      --pacer target/debug/pacer "${cluster_clients[@]}" ;;
    cluster-fault) python3 tests/fleet/cluster_fault.py --module target/debug/libpacer_redis.so "${fault_clients[@]}" ;;
    loom) bash scripts/check-loom.sh ;;
  esac
}

start=$SECONDS
loads=()
for round in $(seq "$rounds"); do
  for s in "${suites[@]}"; do
    if [ "$s" = loom ] && [ "$round" -gt "$loom_rounds" ]; then continue; fi
    if run_suite "$s" >"$logs/$s.$round.log" 2>&1; then
      passed[$s]=$((passed[$s] + 1))
    else
      failed[$s]=$((failed[$s] + 1))
      echo "flake-hunt: $s failed in round $round; its log:"
      tail -40 "$logs/$s.$round.log"
    fi
  done
  loads+=("$(cut -d' ' -f1 /proc/loadavg)")
  echo "flake-hunt: round $round of $rounds done ($((SECONDS - start)) s, load ${loads[-1]})"
done
stop_busy

total_failed=0
for s in "${suites[@]}"; do total_failed=$((total_failed + failed[$s])); done
{
  echo "# Flake hunt"
  echo
  echo "Written by \`scripts/flake-hunt.sh\`: each suite below ran repeatedly while"
  echo "$stress busy processes (\`while :; do :; done\`) loaded this $(nproc)-core machine."
  echo "A failure is a test that depends on how fast the machine runs."
  echo
  changed=$(git status --porcelain -- . ':!docs' | awk '{print $2}' | paste -sd, - || true)
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ), revision $(git rev-parse --short HEAD)${changed:+ (uncommitted: $changed)}"
  echo "- rounds: $rounds (loom: $loom_rounds), wall time $((SECONDS - start)) s"
  echo "- 1-minute load average after each round: ${loads[*]}"
  echo
  echo "| suite | what runs | passed | failed |"
  echo "|---|---|---|---|"
  for s in "${suites[@]}"; do
    case "$s" in
      c-threads) what='`tests/c/test_threads.c`: 8-thread hammer, 2-thread release/redeem races' ;;
      shm) what='`scripts/test-shm.sh`: fork hammer, SIGKILL, creation race, attach checks; Node, Go, Python smoke' ;;
      python) what='pytest `bindings/python/tests`' ;;
      node) what='`node --test` in `bindings/node`' ;;
      go) what='`go test -race` in `bindings/go`' ;;
      cli-watch) what='`cli/tests/watch.rs`: `pacer watch` against shared buckets driven by another process and Redis buckets driven by `pacer hammer`' ;;
      fleet-cluster) what='`tests/fleet/cluster_check.py`: six clients on a Redis Cluster through a slot move and a failover' ;;
      cluster-fault) what='`tests/fleet/cluster_fault.py`: three clients on a Redis Cluster while the busy primary is paused, then killed' ;;
      loom) what='`scripts/check-loom.sh` (loom models of the core)' ;;
    esac
    echo "| $s | $what | ${passed[$s]} | ${failed[$s]} |"
  done
  echo
  echo "Total failures: $total_failed."
} >"$out"
cat "$out"
[ "$total_failed" -eq 0 ]
