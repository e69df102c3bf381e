#!/usr/bin/env bash
# Builds and installs the Python package (bindings/python) into its own
# virtual environment, the way a user would (pip install, not editable: the
# build runs cargo for libpacer.a and compiles the cffi module), then runs
# its tests; then makes the release artefacts (scripts/release-python.sh:
# the abi3 wheel repaired to manylinux, the sdist, their checks) and installs
# that wheel into a fresh venv for every CPython 3.10+ on the machine, where
# the whole test suite runs again against it with no cargo on PATH. Needs
# python3 (3.10+, with venv and pip), cargo and a C compiler.
# The fleet pacer's tests (tests/test_redis.py) start their own redis-servers:
# redis-server comes from scripts/redis-deps.sh, and the module they load is
# the debug build of pacer-redis, named by PACER_REDIS_MODULE.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/redis-deps.sh
# The dependency versions the tests run (redis-py): fixed, see the file.
export PIP_CONSTRAINT="$PWD/bindings/python/tests/constraints.txt"
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
# With the "redis" extra: redis-py, for RedisPacer and AsyncRedisPacer; with
# "metrics": prometheus_client, for pacer.metrics.
"$py" -m pip install --quiet --disable-pip-version-check "./bindings/python[redis,metrics]"
"$py" -m pytest bindings/python/tests -q -p no:cacheprovider
# The held connection's tests again on servers without the module (the
# function and the script, as where a server cannot load it).
env -u PACER_REDIS_MODULE "$py" -m pytest bindings/python/tests/test_redis_held.py -q -p no:cacheprovider
# The Redis Cluster tests (tests/test_redis_cluster.py, two clusters of six
# redis-servers) run once for each redis-py version: here, and again below
# only under an interpreter whose pinned redis-py differs (3.10's).
cluster_tested=" $("$py" -c 'import redis; print(redis.__version__)') "

# The release artefacts: the abi3 wheel repaired to manylinux (the one a
# registry gets), the sdist, twine check, a wheel built from the sdist.
bash scripts/release-python.sh
wheel=$(ls target/python-dist/*.whl)
case "${wheel##*/}" in
  *-cp310-abi3-manylinux_*_x86_64.whl) ;;
  *) echo "test-python: not a manylinux abi3 wheel: $wheel" >&2; exit 1 ;;
esac

# Every CPython 3.10 or later on the machine: python3.N on PATH (a pyenv
# shim counts only if it runs, i.e. its version is selected), and the
# versions pyenv has installed. One per version; each is asked its own.
interpreters=()
versions=" "
old_pythons=()
candidates=()
IFS=: read -ra path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  candidates+=("$dir"/python3.[0-9] "$dir"/python3.[0-9][0-9])
done
if command -v pyenv >/dev/null 2>&1; then
  candidates+=("$(pyenv root)"/versions/*/bin/python3.[0-9] "$(pyenv root)"/versions/*/bin/python3.[0-9][0-9])
fi
for candidate in "${candidates[@]}"; do
  [ -x "$candidate" ] || continue
  version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2]) if sys.implementation.name == "cpython" else None' 2>/dev/null) || continue
  case "$versions" in *" $version "*) continue ;; esac
  versions+="$version "
  if [ "${version#3.}" -ge 10 ]; then
    interpreters+=("$candidate")
  else
    old_pythons+=("$candidate")
  fi
done
[ ${#interpreters[@]} -gt 0 ] || { echo "test-python: no CPython 3.10+ found" >&2; exit 1; }
echo "test-python: CPython 3.10+ found:$(for i in "${interpreters[@]}"; do printf ' %s' "$i"; done)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nocargo=/usr/bin:/bin
if PATH=$nocargo command -v cargo >/dev/null; then
  echo "test-python: cargo is on $nocargo; the no-cargo check needs another PATH" >&2; exit 1
fi
# The whole suite, against the installed wheel: pytest runs from the
# repository root, where no `pacer` folder is (the package is in
# bindings/python/src, never on sys.path), and
# test_abi.py::test_the_installed_package_is_under_test checks where pacer
# and its compiled module came from; the path is printed below too.
for interpreter in "${interpreters[@]}"; do
  venv="$work/venv-${interpreter//\//_}"
  "$interpreter" -m venv "$venv"
  PATH=$nocargo "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest==8.3.5 "$wheel[redis,metrics]"
  PATH=$nocargo PACER_SCRIPT="$PWD/redis/pacer.lua" "$venv/bin/python" - "$venv" <<'PY'
import os
import shutil
import sys
from importlib import resources
import pacer
assert shutil.which("cargo") is None, "cargo is on PATH"
assert os.path.realpath(pacer.__file__).startswith(os.path.realpath(sys.argv[1])), pacer.__file__
assert {m.__file__.rsplit(".", 2)[-2] for m in (sys.modules["pacer._fast"], sys.modules["pacer._pacer_cffi"])} == {"abi3"}
# The wheel carries RedisPacer's script, byte for byte redis/pacer.lua
# (setup.py copies it in at build time: the one committed copy).
with open(os.environ["PACER_SCRIPT"], "rb") as f:
    assert resources.files("pacer").joinpath("pacer.lua").read_bytes() == f.read(), "the wheel's pacer.lua"
p = pacer.Pacer(rate_per_minute=60, burst=1, clock=lambda: 0.0)
first, second = p.reserve(0), p.reserve(0)
assert isinstance(first, pacer.Admitted) and first.wait_ms == 0, first
assert isinstance(second, pacer.Admitted) and second.wait_ms == 1000, second
print("test-python: Python %d.%d imports pacer from %s" % (sys.version_info[0], sys.version_info[1], pacer.__file__))
PY
  redis_py=$("$venv/bin/python" -c 'import redis; print(redis.__version__)')
  case "$cluster_tested" in
    *" $redis_py "*) cluster_tests=0 ;;
    *) cluster_tests=1; cluster_tested+="$redis_py " ;;
  esac
  PATH=$nocargo PYTHONDONTWRITEBYTECODE=1 PACER_CLUSTER_TESTS=$cluster_tests \
    "$venv/bin/python" -m pytest bindings/python/tests -q -p no:cacheprovider
  echo "test-python: $(basename "$wheel") passes the suite under $interpreter with no cargo on PATH"
done

# An older Python given the installed package (a PYTHONPATH, say) gets one
# ImportError naming the Python it needs, not a failure somewhere inside.
site=$("$venv/bin/python" -c 'import pacer, os; print(os.path.dirname(os.path.dirname(pacer.__file__)))')
for interpreter in "${old_pythons[@]}"; do
  version=$("$interpreter" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  expected="ImportError: pacer: connpacer needs Python 3.10 or later, and this is Python $version; install it with a Python 3.10+ interpreter ('python3.10 -m pip install connpacer')"
  got=$(cd "$work" && PYTHONPATH=$site "$interpreter" -c 'import pacer' 2>&1 | tail -n 1) || true
  [ "$got" = "$expected" ] || { echo "test-python: under $interpreter, import pacer said: $got" >&2; exit 1; }
  echo "test-python: Python $version refuses the package with: ${got#ImportError: }"
done
