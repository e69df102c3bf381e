#!/usr/bin/env bash
# What the Redis engine needs from Debian, installed when absent:
# redis-server and redis-tools (the tests start their own servers; the
# benchmark uses redis-benchmark) and libclang-dev (the redis-module
# crate's build runs bindgen). No service is left running: the package's
# own service start is suppressed, and any server it started anyway is
# stopped (only the package's own).
set -euo pipefail

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
# bindgen needs libclang and clang's own headers: the -dev package has both.
installed libclang-dev || missing+=(libclang-dev)
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
as_root() { if [ -n "$sudo" ]; then "$sudo" "$@"; else "$@"; fi; }
as_root apt-get update -qq
# RUNLEVEL=1 keeps invoke-rc.d from starting the packaged service.
as_root env RUNLEVEL=1 DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package's own server, if it started one anyway (its directory is
# /var/lib/redis); servers of anyone else are not touched.
as_root service redis-server stop >/dev/null 2>&1 || true
for pid in $(pgrep -x redis-server || true); do
    if [ "$(readlink "/proc/$pid/cwd" 2>/dev/null || true)" = /var/lib/redis ]; then
        as_root kill "$pid" || true
    fi
done
echo "redis-deps: redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') installed"
