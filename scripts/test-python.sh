#!/usr/bin/env bash
# Builds and installs the Python package (bindings/python) into its own
# virtual environment, the way a user would (pip install, not editable: the
# build runs cargo for libpacer.a and compiles the cffi module), then runs
# its tests. Needs python3 (3.10+, with venv and pip), cargo and a C compiler.
# The fleet pacer's tests (tests/test_redis.py) start their own redis-servers:
# redis-server comes from scripts/redis-deps.sh, and the module they load is
# the debug build of pacer-redis, named by PACER_REDIS_MODULE.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/redis-deps.sh
cargo build --locked -p pacer-redis
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
export PACER_REDIS_MODULE="$target_dir/debug/libpacer_redis.so"

venv=target/python-venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check pytest==8.3.5
# A local folder is always rebuilt and reinstalled, even at the same version.
# With the "redis" extra: redis-py, for RedisPacer and AsyncRedisPacer.
"$py" -m pip install --quiet --disable-pip-version-check "./bindings/python[redis]"
"$py" -m pytest bindings/python/tests -q -p no:cacheprovider
