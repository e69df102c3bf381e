#!/usr/bin/env bash
# The Node binding: installs its npm dev tools (typescript, @types/node) from
# the lock file, builds the addon with cargo, runs node's test runner and the
# type check, then packs the package and installs the tarball into an empty
# folder to run an admit() example there.
set -euo pipefail
cd "$(dirname "$0")/../bindings/node"

command -v node >/dev/null || { echo "test-node: node is required" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "test-node: Node >= 20 required, found $(node --version)" >&2; exit 1; }

npm ci --no-audit --no-fund
node scripts/build.js
npm test
npm run typecheck
echo "test-node: typecheck ok (tsc $(npx tsc --version))"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$(npm pack --pack-destination "$work" 2>/dev/null | tail -n 1)
mkdir "$work/app"
cp examples/admit.mjs "$work/app/"
(
  cd "$work/app"
  npm init -y >/dev/null
  npm install --no-audit --no-fund "$work/$tarball" >/dev/null
  output=$(node admit.mjs)
  echo "$output"
  grep -q '^#0 admitted after 0 ms$' <<<"$output"
  grep -q '^#1 admitted after' <<<"$output"
  grep -q '^#3 refused: 200, retry-after 2$' <<<"$output"
)
echo "test-node: packed $tarball installs into an empty folder and admits"
