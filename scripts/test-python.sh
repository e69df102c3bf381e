#!/usr/bin/env bash
# Builds and installs the Python package (bindings/python) into its own
# virtual environment, the way a user would (pip install, not editable: the
# build runs cargo for libpacer.a and compiles the cffi module), then runs
# its tests; then builds a binary wheel and checks it installs and runs in a
# fresh venv with no cargo on PATH. Needs python3 (3.10+, with venv and pip),
# cargo and a C compiler.
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

# A binary wheel installs and works where there is no Rust toolchain: built
# here (pip wheel runs cargo), installed into a fresh venv and run with a
# PATH that has no cargo on it.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/wheels" ./bindings/python
wheel=$(ls "$work"/wheels/*.whl)
case "$wheel" in *-linux_*.whl|*manylinux*.whl) ;; *) echo "test-python: not a binary wheel: $wheel" >&2; exit 1 ;; esac
python3 -m venv "$work/venv"
nocargo=/usr/bin:/bin
if PATH=$nocargo command -v cargo >/dev/null; then
  echo "test-python: cargo is on $nocargo; the no-cargo check needs another PATH" >&2; exit 1
fi
PATH=$nocargo "$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$wheel"
PATH=$nocargo PACER_SCRIPT="$PWD/redis/pacer.lua" "$work/venv/bin/python" - <<'PY'
import os
import shutil
from importlib import resources
import pacer
assert shutil.which("cargo") is None, "cargo is on PATH"
# The wheel carries RedisPacer's script, byte for byte redis/pacer.lua
# (setup.py copies it in at build time: the one committed copy).
with open(os.environ["PACER_SCRIPT"], "rb") as f:
    assert resources.files("pacer").joinpath("pacer.lua").read_bytes() == f.read(), "the wheel's pacer.lua"
p = pacer.Pacer(rate_per_minute=60, burst=1, clock=lambda: 0.0)
first, second = p.reserve(0), p.reserve(0)
assert isinstance(first, pacer.Admitted) and first.wait_ms == 0, first
assert isinstance(second, pacer.Admitted) and second.wait_ms == 1000, second
print("test-python: the wheel", pacer.__name__, "installs and admits without cargo")
PY
echo "test-python: $(basename "$wheel") installed into a fresh venv with no cargo on PATH"
