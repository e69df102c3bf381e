#!/usr/bin/env bash
# Clients of every kind on one fleet bucket keep the window bound
# (SPEC §12, §6.1): tests/fleet/check.py starts a redis-server with the
# module and the function library, runs the clients below at once on one
# key, and checks that every answer was counted by the server and that the
# admissions opened within the bound across all of them.
#
# Clients: the CLI (`pacer hammer`) through the module and the function,
# the Node binding's RedisPacer (module), the Python binding's (function)
# and the Go binding's (script, EVALSHA; tests/fleet/go, built here). Run
# after scripts/test-node.sh, test-python.sh and test-go.sh (the test
# command's order): it uses the addon, node-redis, the venv and the Go
# module cache they made.
set -euo pipefail
# shellcheck source=scripts/lib/root.sh
. "$(dirname "$0")/lib/root.sh"

bash scripts/redis-deps.sh
cargo build --locked -p pacer-redis -p pacer-cli
cargo build --release --locked -p pacer-ffi
target="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
# Built outside target/ (CARGO_TARGET_DIR): skip the Go package's check for libpacer.a there.
[ "$target" -ef "$root/target" ] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=pacer_lib_elsewhere"
module="$target/debug/libpacer_redis.so"
pacer="$target/debug/pacer"

# The Go client, linked with libpacer.a as scripts/test-go.sh links the
# binding (go.mod and go.sum pinned: -mod=readonly).
command -v go >/dev/null || { echo "test-fleet: go is required" >&2; exit 1; }
go_hammer="$target/fleet-hammer-go"
(cd tests/fleet/go &&
  GOTOOLCHAIN=local CGO_ENABLED=1 CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}" \
    go build -mod=readonly -o "$go_hammer" .)

# shellcheck source=scripts/lib/fleet-clients.sh
. scripts/lib/fleet-clients.sh
fleet_clients "$pacer" "$go_hammer"
[ -x target/python-venv/bin/python ] || { echo "test-fleet: run scripts/test-python.sh first (its venv)" >&2; exit 1; }
[ -d bindings/node/node_modules/redis ] || { echo "test-fleet: run scripts/test-node.sh first (node-redis)" >&2; exit 1; }
python3 tests/fleet/check.py --module "$module" "${hammer_clients[@]}"

# The replies of tests/fleet/replies.json, produced again on real servers.
python3 tests/fleet/capture_replies.py --module "$module"

# The fleet under faults (docs/fleet-clients.md, "Under faults"): a
# replica, a deleted function, a slow link, an emptied script cache, and
# calls cancelled at random points, on one key from three languages.
python3 tests/fleet/fault.py "${fault_clients[@]}"
# A real Redis Cluster (tests/fleet/cluster_check.py: 3 primaries and 3
# replicas): buckets on every shard, a slot moved and a primary failed over
# under traffic, and pacer replay and watch through a cluster connection;
# the CLI by every door, the Node binding's RedisPacer on its own cluster
# client (rootNodes) by the module, the Python one's (startup_nodes) by the
# function, the Go one's (ClusterAddrs) by the script.
python3 tests/fleet/cluster_check.py --module "$module" --pacer "$pacer" "${cluster_clients[@]}"
# The same cluster's faults under traffic (tests/fleet/cluster_fault.py):
# the busy key's primary paused, then killed with kill -9 until its
# replica takes over, with the fault run's clients (Node and Python by
# the module, Go by the script) given the seed nodes.
python3 tests/fleet/cluster_fault.py --module "$module" "${fault_clients[@]}"
echo "test-fleet: ok"
