#!/usr/bin/env bash
# The Node binding: installs its npm dev tools (typescript, @types/node,
# redis) from the lock file, builds the addon with cargo, runs node's test
# runner and the type check, then packs the package and installs the tarball
# into an empty folder to run an admit() example and every ```js block of
# README.md there. The RedisPacer tests and the README's fleet block start
# their own redis-servers (Debian's, installed by redis-deps.sh when absent),
# some with the module built here (PACER_REDIS_MODULE).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/bindings/node"

command -v node >/dev/null || { echo "test-node: node is required" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "test-node: Node >= 20 required, found $(node --version)" >&2; exit 1; }

npm ci --no-audit --no-fund
node scripts/build.js
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
  # The tarball carries the built addon: it installs and runs with no Rust
  # toolchain on PATH (node and npm only).
  mkdir "$work/nocargo"
  ln -s "$(command -v node)" "$work/nocargo/node"
  ln -s "$(command -v npm)" "$work/nocargo/npm"
  if PATH="$work/nocargo:/usr/bin:/bin" command -v cargo >/dev/null; then
    echo "test-node: cargo is on /usr/bin or /bin; the no-cargo check needs another PATH" >&2; exit 1
  fi
  PATH="$work/nocargo:/usr/bin:/bin" npm install --no-audit --no-fund "$work/$tarball" >/dev/null
  output=$(PATH="$work/nocargo:/usr/bin:/bin" node admit.mjs)
  echo "$output"
  grep -q '^#0 admitted after 0 ms$' <<<"$output"
  grep -q '^#1 admitted after' <<<"$output"
  grep -q '^#3 refused: 200, retry-after 2$' <<<"$output"
)
echo "test-node: packed $tarball installs into an empty folder with no cargo on PATH and admits"

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
  bash -euo pipefail -c "$steps" >/dev/null
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
# folder above (pacer from the tarball, plus the redis package at the version
# the tests pin, for the fleet block) and runs it with node; a block that
# reads REDIS_URL gets a redis-server with PACER_REDIS_MODULE of its own.
redis_version=$(node -p 'require("./package.json").devDependencies.redis')
(cd "$work/app" && npm install --no-audit --no-fund "redis@$redis_version" >/dev/null)
node scripts/readme-blocks.js --expect 3 README.md "$work/app" | tee "$work/readme-blocks.out"
# What the blocks' comments say they print (the fleet one decided by the module).
for line in '  2 | refused 1 1' '  3 | #0 admitted after 0 ms (engine module)' '  3 | #3 refused: 200, retry-after 2'; do
  grep -qxF "$line" "$work/readme-blocks.out" || { echo "test-node: no line '$line' from the README's blocks" >&2; exit 1; }
done
echo "test-node: the README's js blocks run as written where the tarball is installed"
