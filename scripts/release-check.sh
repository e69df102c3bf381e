#!/usr/bin/env bash
# The release check: every artefact a registry would take, built and checked
# by its own tool's dry run, nothing published. Part of the test command.
#
# - Rust: the four crates (pacer-core, pacer-ffi, pacer-cli, pacer-redis)
#   packaged together (`cargo publish --dry-run`: each .crate built and
#   compiled from what it carries, the others found in a local registry
#   overlay, since none is on crates.io yet), and pacer-core's docs built
#   with warnings as errors;
# - Go: a module of its own requires the binding by its published path,
#   github.com/connpacer/pacer/bindings/go (a replace directive in that
#   module, not in the binding's), and go vet and go build pass there;
# - Python and Node: scripts/release-python.sh and scripts/release-node.sh
#   (the abi3 manylinux wheel and the sdist; the main and platform npm
#   packages).
#
# It prints one line per artefact: name, tag or platform, size in bytes.
# Each guard is tried on purpose once per run (a crate that reads a file
# outside itself must fail to package; the Python and Node scripts do the
# same for an unrepaired wheel and a platform package without its binary).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artefacts="$work/artefacts"
: >"$artefacts"
say() { printf 'release-check: %s\n' "$*"; }
fail() { printf 'release-check: FAILED: %s\n' "$*" >&2; exit 1; }

# Where cargo builds, and the version every crate takes from the workspace
# (one cargo metadata call).
read -r target version < <(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; m = json.load(sys.stdin); print(m["target_directory"], next(p["version"] for p in m["packages"] if p["name"] == "pacer-core"))')
[ -n "${target:-}" ] && [ -n "${version:-}" ] || fail "cargo metadata named no target directory or crate version"

# --- Rust ---------------------------------------------------------------
crates=(pacer-core pacer-ffi pacer-cli pacer-redis)

# Packages crates ($@ are -p flags) of the workspace in $1; fails when any
# does not package or its packaged copy does not compile. The git state is
# not what is checked (the content is), so a working tree with changes is
# allowed.
package_crates() {
  local dir=$1
  shift
  (cd "$dir" && cargo publish --dry-run --allow-dirty --locked "$@")
}

# The guard, tried on purpose: a crate that includes a file from outside its
# own folder (as pacer-cli did with ../redis/pacer.lua before it carried the
# script) compiles in the workspace but not from its package.
bad="$work/bad-crate"
mkdir -p "$bad/inner/src"
printf 'text\n' >"$bad/outside.txt"
cat >"$bad/Cargo.toml" <<'TOML'
[workspace]
members = ["inner"]
resolver = "2"
TOML
cat >"$bad/inner/Cargo.toml" <<'TOML'
[package]
name = "release-check-bad"
version = "0.1.0"
edition = "2021"
license = "MIT"
description = "reads a file outside its package"
TOML
printf 'pub const TEXT: &str = include_str!("../../outside.txt");\n' >"$bad/inner/src/lib.rs"
(cd "$bad" && cargo generate-lockfile --offline -q)
if CARGO_TARGET_DIR="$work/bad-target" package_crates "$bad" -p release-check-bad >"$work/bad.log" 2>&1; then
  cat "$work/bad.log" >&2
  fail "a crate that reads ../../outside.txt packaged: the crate check cannot fail"
fi
grep -q "failed to verify package tarball" "$work/bad.log" ||
  { cat "$work/bad.log" >&2; fail "the bad crate failed for another reason than its package"; }
say "guard: a crate that reads a file outside itself does not package (as required)"

# In a target folder of its own: a packaged crate is compiled under the same
# name as the workspace's, and pacer-ffi's library (a cdylib, so its file
# name carries no hash) would overwrite the workspace's build of it, built
# against another pacer-core.
packaged="$target/release-check"
CARGO_TARGET_DIR="$packaged" package_crates "$root" "${crates[@]/#/-p}" 2>&1 | grep -v '^ *Compiling ' ||
  fail "a crate does not package: see cargo's output above"
# The same crates again, unverified (just checked), for their files: cargo
# package leaves them in <target>/package/.
CARGO_TARGET_DIR="$packaged" cargo package --no-verify --allow-dirty --locked -q "${crates[@]/#/-p}"
for crate in "${crates[@]}"; do
  file="$packaged/package/$crate-$version.crate"
  [ -f "$file" ] || fail "$crate: no $file after packaging"
  # What each crate must carry besides its sources.
  listing=$(tar -tzf "$file")
  for need in README.md LICENSE Cargo.toml; do
    grep -q "^[^/]*/$need\$" <<<"$listing" || fail "$crate: the package has no $need"
  done
  case $crate in
    pacer-ffi) grep -q '^[^/]*/include/pacer.h$' <<<"$listing" || fail "pacer-ffi: the package has no include/pacer.h" ;;
    pacer-cli | pacer-redis) grep -q '^[^/]*/pacer.lua$' <<<"$listing" || fail "$crate: the package has no pacer.lua" ;;
  esac
  printf '%s crate %s\n' "$(basename "$file")" "$(stat -c %s "$file")" >>"$artefacts"
done
RUSTDOCFLAGS="-D warnings" cargo doc -p pacer-core --no-deps --locked -q
say "pacer-core's docs build with no warnings"

# --- Go -----------------------------------------------------------------
module=github.com/connpacer/pacer/bindings/go
[ "$(cd bindings/go && GOTOOLCHAIN=local go list -m)" = "$module" ] ||
  fail "bindings/go/go.mod does not declare $module"
cargo build --release --locked -q -p pacer-ffi
consumer="$work/go-consumer"
mkdir -p "$consumer"
cp bindings/go/go.sum "$consumer/"
cat >"$consumer/go.mod" <<EOF
module example.com/consumer

go 1.26.0

require $module v0.1.0

replace $module => $root/bindings/go
EOF
cat >"$consumer/main.go" <<'EOF'
package main

import (
	"fmt"

	pacer "github.com/connpacer/pacer/bindings/go"
)

func main() {
	fmt.Println("abi", pacer.LibraryABIVersion(), "header", pacer.HeaderABIVersion())
}
EOF
(
  cd "$consumer"
  export GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS=-mod=mod
  export CGO_LDFLAGS="-L$target/release ${CGO_LDFLAGS:-}"
  [ "$target" -ef "$root/target" ] || export GOFLAGS="$GOFLAGS -tags=pacer_lib_elsewhere"
  go vet ./...
  go build -o consumer .
  out=$(./consumer)
  [ "$out" = "abi 3 header 3" ] || fail "the Go consumer printed '$out', not 'abi 3 header 3'"
)
printf '%s go-module@bindings/go/v%s source\n' "$module" "$version" >>"$artefacts"
say "a module that requires $module by that path vets, builds and runs"

# --- Python and Node ----------------------------------------------------
bash scripts/release-python.sh | tee "$work/python.out"
# The platform package's addon, built where release-node.sh packs it from
# (bindings/node/npm/<platform>/).
(cd bindings/node && node scripts/build.js --platform-package >/dev/null)
platform=$(cd bindings/node && node -p 'require("./platforms.js").hostPlatform()?.name ?? ""')
[ -n "$platform" ] || fail "no Node platform package is listed for this machine"
bash scripts/release-node.sh | tee "$work/node.out"
# One line per artefact: the main package for any platform, then this one's.
grep -Eq '^connpacer-[0-9]+\.[0-9]+\.[0-9]+\.tgz any [1-9][0-9]*$' <(sed -n 1p "$work/node.out") ||
  fail "release-node.sh's first line is not the main package's"
grep -Eq "^connpacer-$platform-[0-9]+\.[0-9]+\.[0-9]+\.tgz $platform [1-9][0-9]*\$" <(sed -n 2p "$work/node.out") ||
  fail "release-node.sh's second line is not connpacer-$platform's"
[ "$(wc -l <"$work/node.out")" -eq 2 ] || fail "release-node.sh printed other than 2 lines"
# Their artefact lines (name, tag or platform, bytes) among their other output.
grep -hE '^[^ ]+ [^ ]+ [0-9]+$' "$work/python.out" "$work/node.out" >>"$artefacts"
grep -Eq '^connpacer-[^ ]+-cp310-abi3-manylinux_[0-9]+_[0-9]+_x86_64\.whl ' "$artefacts" ||
  fail "release-python.sh named no abi3 manylinux wheel"
grep -Eq '^connpacer-[^ ]+\.tar\.gz sdist ' "$artefacts" || fail "release-python.sh named no sdist"

say "artefacts (name, tag or platform, bytes; a Go module ships as source):"
cat "$artefacts"
