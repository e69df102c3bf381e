#!/usr/bin/env bash
# The Node package's release check, publishing nothing: packs the main
# package (connpacer, no addon) and this machine's platform package
# (connpacer-<platform>, from bindings/node/npm/<platform>, whose addon
# `node scripts/build.js --platform-package` places there first), runs
# `npm publish --dry-run` on each tarball, and prints one line per
# artefact: tarball name, platform (`any` for the main package), size in
# bytes.
#
# It fails, with one line saying why, when a platform package's version (or
# the main package's optionalDependencies entry for it) differs from the
# main package's version, when a platform package's tarball does not carry
# its .node file, or when the main package's does carry one. Before it
# trusts the binary check it shows the check can fail: it packs a copy of
# the platform package without its binary and requires the check to reject
# that tarball.
#
# Usage: bash scripts/release-node.sh [--all] [output dir]
#   --all       every platform package, not only this machine's (the release
#               workflow, once each platform's build has placed its addon)
#   output dir  where the tarballs stay (else a temporary folder, removed)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/bindings/node"

fail() { echo "release-node: $*" >&2; exit 1; }

all=false
if [ "${1:-}" = --all ]; then all=true; shift; fi
[ $# -le 1 ] || fail "usage: bash scripts/release-node.sh [--all] [output dir]"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="${1:-$work/out}"
mkdir -p "$out"
out=$(cd "$out" && pwd)

version=$(node -p 'require("./package.json").version')

# Every platform folder, and every optional dependency, at the main
# package's version: npm installs the optional dependency by exact version,
# so one left behind would never be installed.
for dir in npm/*/; do
  name=$(node -p "require('./${dir}package.json').name")
  v=$(node -p "require('./${dir}package.json').version")
  [ "$v" = "$version" ] || fail "$name (${dir%/}) is version $v but connpacer is $version"
  dep=$(node -p "require('./package.json').optionalDependencies?.['$name'] ?? 'missing'")
  [ "$dep" = "$version" ] || fail "connpacer's optionalDependencies has $name at $dep, not $version"
done
listed=$(node -p 'Object.keys(require("./package.json").optionalDependencies ?? {}).join(" ")')
for name in $listed; do
  [ -f "npm/${name#connpacer-}/package.json" ] || fail "connpacer lists $name but npm/${name#connpacer-}/package.json is missing"
done

# This machine's platform (platforms.js, as the loader names it).
platform=$(node -e '
  const found = require("./platforms.js").hostPlatform();
  if (found === null) process.exit(1);
  console.log(found.name);
') || fail "no platform package is listed for this machine ($(node -p 'process.platform + "-" + process.arch'))"
addon="pacer.$platform.node"

# check_binary <tarball> <addon file>: fails (status 1, one line on stderr)
# unless the tarball carries package/<addon file>, not empty.
check_binary() {
  local listing
  listing=$(tar -tzf "$1")
  if ! grep -qxF "package/$2" <<<"$listing"; then
    echo "release-node: $(basename "$1") does not contain its binary $2 (build it: node scripts/build.js --platform-package)" >&2
    return 1
  fi
  if [ "$(tar -xzOf "$1" "package/$2" | wc -c)" -eq 0 ]; then
    echo "release-node: $(basename "$1") carries an empty $2" >&2
    return 1
  fi
}

# The check can fail: a copy of the platform package without its binary
# packs (npm packs a package whose `files` match nothing) and is rejected.
mkdir -p "$work/nobinary" "$work/guard"
(cd "npm/$platform" && find . -maxdepth 1 -type f ! -name '*.node' -exec cp {} "$work/nobinary/" \;)
[ ! -e "$work/nobinary/$addon" ] || fail "the copy without the binary has one"
nobinary=$(cd "$work/nobinary" && npm pack --pack-destination "$work/guard" 2>/dev/null | tail -n 1)
if check_binary "$work/guard/$nobinary" "$addon" 2>"$work/guard.err"; then
  fail "the binary check accepted $nobinary, packed without $addon"
fi
grep -qxF "release-node: $nobinary does not contain its binary $addon (build it: node scripts/build.js --platform-package)" "$work/guard.err" \
  || fail "the binary check rejected $nobinary for another reason: $(head -n 1 "$work/guard.err")"

# The artefacts: the main package, then each platform's.
main=$(npm pack --pack-destination "$out" 2>/dev/null | tail -n 1)
[ "$main" = "connpacer-$version.tgz" ] || fail "npm pack made $main, not connpacer-$version.tgz"
main_listing=$(tar -tzf "$out/$main")
if grep -q '\.node$' <<<"$main_listing"; then
  fail "$main carries a .node file; the addon ships in the platform packages"
fi
platforms=$platform
if $all; then platforms=$(for name in $listed; do echo "${name#connpacer-}"; done); fi
lines=("$main any $(wc -c <"$out/$main")")
tarballs=("$main")
for p in $platforms; do
  plat=$(cd "npm/$p" && npm pack --pack-destination "$out" 2>/dev/null | tail -n 1)
  [ "$plat" = "connpacer-$p-$version.tgz" ] || fail "npm pack made $plat, not connpacer-$p-$version.tgz"
  check_binary "$out/$plat" "pacer.$p.node" || exit 1
  lines+=("$plat $p $(wc -c <"$out/$plat")")
  tarballs+=("$plat")
done

# A dry run publishes nothing; --offline keeps it from asking the registry
# anything (npm 11's dry run needs no login and no network: checked with an
# unreachable registry too).
for tarball in "${tarballs[@]}"; do
  npm publish --dry-run --offline "$out/$tarball" >"$work/publish.out" 2>&1 \
    || { cat "$work/publish.out" >&2; fail "npm publish --dry-run failed for $tarball"; }
done

printf '%s\n' "${lines[@]}"
