#!/usr/bin/env bash
# The Redis engine against real redis-servers: each test starts its own on a
# free loopback port in a temporary directory (redis/tests/common) and kills
# it when done. Installs redis-server and libclang-dev when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/redis-deps.sh
# The module the tests load is the cdylib built beside the test binaries.
cargo build -p pacer-redis --locked
cargo test -p pacer-redis --locked -- --show-output
# Nothing left running: a test's server runs in a pacer-redis-* directory.
left=""
for pid in $(pgrep -x redis-server || true); do
    case "$(readlink "/proc/$pid/cwd" 2>/dev/null || true)" in
        */pacer-redis-*) left="$left $pid" ;;
    esac
done
if [ -n "$left" ]; then
    echo "test-redis: test servers still running after the tests:$left" >&2
    exit 1
fi
echo "test-redis: ok"
