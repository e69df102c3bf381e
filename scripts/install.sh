#!/usr/bin/env bash
# Installs the C library like any other: builds it (cargo, release) and puts
# under PREFIX (default /usr/local)
#   lib/libpacer.a  lib/libpacer.so  include/pacer.h  lib/pkgconfig/pacer.pc
#
#   bash scripts/install.sh [PREFIX]
#
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc app.c $(pkg-config --cflags --libs pacer)
# and, unless PREFIX/lib is on the loader's path (ldconfig), an rpath:
# -Wl,-rpath,$(pkg-config --variable=libdir pacer). The CLI installs with
# cargo: cargo install --locked --path cli (puts `pacer` in ~/.cargo/bin).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix="${1:-/usr/local}"
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac

cargo build --release --locked -p pacer-ffi
target="$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)

install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 644 "$target/release/libpacer.a" "$prefix/lib/libpacer.a"
install -m 755 "$target/release/libpacer.so" "$prefix/lib/libpacer.so"
install -m 644 include/pacer.h "$prefix/include/pacer.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|\${prefix}/lib|" -e "s|@INCLUDEDIR@|\${prefix}/include|" \
    -e "s|@VERSION@|$version|" ffi/pacer.pc.in > "$prefix/lib/pkgconfig/pacer.pc"
echo "install: libpacer $version under $prefix (lib/, include/pacer.h, lib/pkgconfig/pacer.pc)"
