#!/usr/bin/env bash
# What the Redis engine needs from Debian, installed when absent:
# redis-server and redis-tools (the tests start their own servers; the
# benchmark uses redis-benchmark) and libclang-dev (the redis-module
# crate's build runs bindgen). No service is left running: the package's
# own service start is suppressed, and any server it started anyway is
# stopped.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
    && ! ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
    missing+=(libclang-dev)
fi
if [ ${#missing[@]} -eq 0 ]; then
    echo "redis-deps: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), libclang present"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "redis-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    sudo="sudo"
fi
echo "redis-deps: installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# RUNLEVEL=1 keeps invoke-rc.d from starting the packaged service.
RUNLEVEL=1 $sudo -E apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if pgrep -x redis-server >/dev/null 2>&1; then
    $sudo service redis-server stop >/dev/null 2>&1 || $sudo pkill -x redis-server || true
fi
echo "redis-deps: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') installed"
