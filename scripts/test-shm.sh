#!/usr/bin/env bash
# Shared pacers (one bucket for every process on the machine): the C tests
# with fork() (plain, then under AddressSanitizer + UBSan), then the Node, Go
# and Python smoke tests that attach to a pacer a C process created and
# debited. Honours CARGO_TARGET_DIR (relative to the repository root when
# relative); default target/. Skips Node, Go or Python with a message when
# the tool is missing. Python uses the virtual environment of
# scripts/test-python.sh (target/python-venv), creating it if needed, and
# installs the package there first, so it tests the current sources.
set -euo pipefail
# shellcheck source=scripts/lib/root.sh
. "$(dirname "$0")/lib/root.sh"

target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
export CARGO_TARGET_DIR="$target"

cargo build --release --locked -p pacer-ffi
lib="$target/release/libpacer.a"
out="$target/shm-tests"
mkdir -p "$out"

# Test files go to /dev/shm (the default) unless PACER_SHM_TEST_DIR says.
dir="${PACER_SHM_TEST_DIR:-/dev/shm}"

CFLAGS=(-std=c11 -Wall -Wextra -Werror -pedantic -O1 -g -I "$root/include")
LIBS=("$lib" -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc)
gcc "${CFLAGS[@]}" tests/c/test_shm.c "${LIBS[@]}" -o "$out/test_shm"
gcc "${CFLAGS[@]}" -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
  tests/c/test_shm.c "${LIBS[@]}" -o "$out/test_shm_asan"

echo "-- shared pacer (C, fork)"
"$out/test_shm" "$dir"
echo "-- shared pacer (C, fork) under ASan + UBSan"
"$out/test_shm_asan" "$dir"

# The smoke tests run `test_shm debit PATH N` to create and debit a pacer.
export PACER_SHM_HELPER="$out/test_shm"
export PACER_SHM_TEST_DIR="$dir"

if command -v node >/dev/null; then
  echo "-- shared pacer from Node"
  (
    cd bindings/node
    node scripts/build.js
    node --test --test-reporter=spec test/shared.test.js
  )
else
  echo "-- Node smoke test skipped: node not found"
fi

if command -v go >/dev/null; then
  echo "-- shared pacer from Go"
  (
    export GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=1
    export CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}"
    [ "$target" -ef "$root/target" ] || export GOFLAGS="${GOFLAGS:+$GOFLAGS }-tags=pacer_lib_elsewhere"
    cd bindings/go
    go test -race -count=1 -run 'Shared' -v .
  )
else
  echo "-- Go smoke test skipped: go not found"
fi
if command -v python3 >/dev/null; then
  echo "-- shared pacer from Python"
  venv="$root/target/python-venv"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  py="$venv/bin/python"
  # As scripts/test-python.sh does: a local folder is always rebuilt and reinstalled.
  "$py" -m pip install --quiet --disable-pip-version-check pytest==8.3.5
  "$py" -m pip install --quiet --disable-pip-version-check ./bindings/python
  "$py" -m pytest bindings/python/tests/test_shared.py -v -p no:cacheprovider
else
  echo "-- Python smoke test skipped: python3 not found"
fi
echo "test-shm: ok"
