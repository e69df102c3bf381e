#!/usr/bin/env bash
# The Node binding: installs its npm dev tools (typescript, @types/node,
# redis) from the lock file, builds the addon with cargo (the development
# build, ./pacer.node, and this platform's package, npm/<platform>), runs
# node's test runner and the type check, then packs the main package and the
# platform package and installs both tarballs into an empty folder to run an
# admit() example and every ```js block of README.md there; installs the main
# tarball alone to see the loader's message for a missing platform package.
# (scripts/release-node.sh, the packages' dry runs, runs in the release
# check, scripts/release-check.sh.) The RedisPacer tests and the README's
# fleet block start their own redis-servers (Debian's, installed by redis-deps.sh when absent),
# some with the module built here (PACER_REDIS_MODULE).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/bindings/node"

command -v node >/dev/null || { echo "test-node: node is required" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "test-node: Node >= 20 required, found $(node --version)" >&2; exit 1; }

# The lock file lists the platform packages (optional dependencies) with no
# source: until they are on the registry npm ci finds none and skips them,
# as it skips any optional dependency it cannot fetch.
npm ci --no-audit --no-fund
node scripts/build.js
node scripts/build.js --platform-package
platform=$(node -p 'require("./platforms.js").hostPlatform()?.name ?? ""')
[ -n "$platform" ] || { echo "test-node: no platform package is listed for this machine" >&2; exit 1; }
bash "$root/scripts/redis-deps.sh"
(cd "$root" && cargo build --locked -p pacer-redis)
target_dir=$(cd "$root" && cargo metadata --format-version 1 --no-deps --locked \
  | node -e 'let s = ""; process.stdin.on("data", (d) => { s += d; }).on("end", () => console.log(JSON.parse(s).target_directory))')
export PACER_REDIS_MODULE="$target_dir/debug/libpacer_redis.so"
[ -f "$PACER_REDIS_MODULE" ] || { echo "test-node: $PACER_REDIS_MODULE was not built" >&2; exit 1; }
npm test
npm run typecheck
echo "test-node: typecheck ok (tsc $(npx tsc --version))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$(npm pack --pack-destination "$work" 2>/dev/null | tail -n 1)
platform_tarball=$(cd "npm/$platform" && npm pack --pack-destination "$work" 2>/dev/null | tail -n 1)
# The main package carries no addon; the platform package carries it.
# (Each listing is read whole before grep -q looks at it: grep leaving a
# pipe early would fail the pipeline under pipefail.)
listing=$(tar -tzf "$work/$tarball")
if grep -q '\.node$' <<<"$listing"; then
  echo "test-node: $tarball carries a .node file" >&2; exit 1
fi
listing=$(tar -tzf "$work/$platform_tarball")
grep -qxF "package/pacer.$platform.node" <<<"$listing" \
  || { echo "test-node: $platform_tarball does not carry pacer.$platform.node" >&2; exit 1; }
# RedisPacer's script ships in the tarball, byte for byte redis/pacer.lua
# (npm's prepack, scripts/build.js, copies it in: the one committed copy is
# redis/pacer.lua).
tar -xzf "$work/$tarball" -C "$work" package/pacer.lua package/redis.js
cmp "$work/package/pacer.lua" "$root/redis/pacer.lua"
mkdir "$work/app"
cp examples/admit.mjs "$work/app/"
(
  cd "$work/app"
  npm init -y >/dev/null
  # The platform tarball carries the built addon: the two install and run
  # with no Rust toolchain on PATH (node and npm only).
  mkdir "$work/nocargo"
  ln -s "$(command -v node)" "$work/nocargo/node"
  ln -s "$(command -v npm)" "$work/nocargo/npm"
  if PATH="$work/nocargo:/usr/bin:/bin" command -v cargo >/dev/null; then
    echo "test-node: cargo is on /usr/bin or /bin; the no-cargo check needs another PATH" >&2; exit 1
  fi
  # Both tarballs in one install, offline: the platform tarball is a
  # dependency of the app, so connpacer's optional dependency on it (same
  # name, same version) is met by it and never fetched. The other platforms'
  # packages npm would look up; --offline makes each lookup fail at once,
  # from the cache, instead of asking the registry (which, until they are
  # published, answers 404: the same outcome), and npm 11 drops an optional
  # dependency it cannot fetch and installs the rest. (--omit=optional
  # changes nothing here: npm still resolves optional dependencies, it only
  # leaves them out when it writes node_modules, and the platform tarball,
  # named on the command line, is no optional dependency of the app.)
  PATH="$work/nocargo:/usr/bin:/bin" npm install --offline --no-audit --no-fund "$work/$platform_tarball" "$work/$tarball" >/dev/null
  [ ! -e node_modules/connpacer/pacer.node ] || { echo "test-node: the installed connpacer has a pacer.node" >&2; exit 1; }
  [ -f "node_modules/connpacer-$platform/pacer.$platform.node" ] || { echo "test-node: connpacer-$platform has no addon" >&2; exit 1; }
  output=$(PATH="$work/nocargo:/usr/bin:/bin" node admit.mjs)
  echo "$output"
  grep -q '^#0 admitted after 0 ms$' <<<"$output"
  grep -q '^#1 admitted after' <<<"$output"
  grep -q '^#3 refused: 200, retry-after 2$' <<<"$output"
)
echo "test-node: packed $tarball and $platform_tarball install into an empty folder with no cargo on PATH and admit"

# The main tarball alone (no platform package, no pacer.node): importing it
# fails with one line naming the package to install, by require and import.
mkdir "$work/alone"
(
  cd "$work/alone"
  npm init -y >/dev/null
  PATH="$work/nocargo:/usr/bin:/bin" npm install --offline --no-audit --no-fund "$work/$tarball" >/dev/null
  [ ! -e "node_modules/connpacer-$platform" ] || { echo "test-node: connpacer-$platform came with the main tarball" >&2; exit 1; }
  expected='pacer: the native addon'"'"'s package connpacer-linux-x64-gnu is not installed; install it with "npm install connpacer-linux-x64-gnu", or build the addon from source with "npm run build" (needs cargo)'
  if [ "$platform" != linux-x64-gnu ]; then
    expected=${expected//linux-x64-gnu/$platform}
  fi
  got=$(node -e 'try { require("connpacer"); console.log("loaded"); } catch (error) { console.log(error.message); }')
  [ "$got" = "$expected" ] || { echo "test-node: require('connpacer') without its platform package said: $got" >&2; exit 1; }
  got=$(node --input-type=module -e 'import("connpacer").then(() => console.log("loaded"), (error) => console.log(error.message));')
  [ "$got" = "$expected" ] || { echo "test-node: import('connpacer') without its platform package said: $got" >&2; exit 1; }
  # Uncaught, it is the error line node prints.
  if node -e 'require("connpacer")' 2>"$work/alone.err"; then
    echo "test-node: require('connpacer') without its platform package succeeded" >&2; exit 1
  fi
  grep -qxF "Error: $expected" "$work/alone.err" || { echo "test-node: no line 'Error: $expected' on stderr" >&2; exit 1; }
  # The README shows the same line (for linux-x64-gnu).
  if [ "$platform" = linux-x64-gnu ]; then
    grep -qxF "$expected" "$root/bindings/node/README.md" || { echo "test-node: README.md does not show the line '$expected'" >&2; exit 1; }
  fi
)
echo "test-node: $tarball alone fails to load with the line naming connpacer-$platform"

# The drop-in swap, by the README's own lines, in a project laid out like the
# proxy (test/host): install the tarball, copy the module file over the
# host's, compile with tsc, run the host's view of its pacer.
mkdir "$work/host"
cp -R test/host/. "$work/host/"
steps=$(sed -n '/<!-- dropin-swap:begin -->/,/<!-- dropin-swap:end -->/p' README.md | sed '/^<!--/d; /^```/d')
[ -n "$steps" ] || { echo "test-node: README.md has no dropin-swap block" >&2; exit 1; }
(
  cd "$work/host"
  export PACER_TARBALL="$work/$tarball"
  export PACER_PLATFORM_TARBALL="$work/$platform_tarball"
  # Offline, as above: the other platforms' packages are not fetched.
  npm_config_offline=true bash -euo pipefail -c "$steps" >/dev/null
  [ -f "node_modules/connpacer-$platform/pacer.$platform.node" ] || { echo "test-node: the swap did not install connpacer-$platform" >&2; exit 1; }
  cmp src/oauth/ws-upgrade-pacer.ts "$root/bindings/node/dropin/ws-upgrade-pacer.ts"
  # The host's own type definitions for Node, as it has them installed.
  mkdir -p node_modules/@types
  ln -s "$root/bindings/node/node_modules/@types/node" node_modules/@types/node
  "$root/bindings/node/node_modules/.bin/tsc" -p .
  node --test --test-timeout=20000 --test-reporter=spec dist/test/ws-upgrade-pacer.test.js
)
echo "test-node: the README's drop-in swap compiles and passes in a host laid out like the proxy"

# Every ```js block of the README runs as written, as a user would paste it
# into a file of their project: scripts/readme-blocks.js extracts the blocks
# in order (exactly 3, or it fails), writes each to its own file in the app
# folder above (pacer from the two tarballs, plus the redis package at the version
# the tests pin, for the fleet block) and runs it with node; a block that
# reads REDIS_URL gets a redis-server with PACER_REDIS_MODULE of its own.
redis_version=$(node -p 'require("./package.json").devDependencies.redis')
(cd "$work/app" && npm install --no-audit --no-fund "redis@$redis_version" >/dev/null)
node scripts/readme-blocks.js --expect 3 README.md "$work/app" | tee "$work/readme-blocks.out"
# What the blocks' comments say they print (the fleet one decided by the module).
for line in '  2 | refused 1 1' '  3 | #0 admitted after 0 ms (engine module)' '  3 | #3 refused: 200, retry-after 2'; do
  grep -qxF "$line" "$work/readme-blocks.out" || { echo "test-node: no line '$line' from the README's blocks" >&2; exit 1; }
done
echo "test-node: the README's js blocks run as written where the tarballs are installed"
