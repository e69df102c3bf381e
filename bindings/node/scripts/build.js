#!/usr/bin/env node
// Builds the addon with cargo and places it beside index.js as pacer.node
// (a development build, which native.js loads before any platform package),
// and copies the repository's redis/pacer.lua beside it as pacer.lua (the
// script RedisPacer runs; the one committed copy is redis/pacer.lua).
//
//   node scripts/build.js                     the development build (npm run build)
//   node scripts/build.js --platform-package [--target <rust triple>]
//       builds for the triple (default: this machine's platform) and places
//       the addon in that platform's package, npm/<platform>/pacer.<platform>.node
//   node scripts/build.js --lua-only          copies pacer.lua only: npm runs
//       this before it packs the main package (prepack), which carries no addon
//
// Only cargo and this package's files are needed: nothing is downloaded
// beyond crates.io.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { PLATFORMS, addonFile, hostPlatform } = require('../platforms.js');

const packageDir = path.resolve(__dirname, '..');
const workspaceDir = path.resolve(packageDir, '..', '..');
const profile = process.env.PACER_NODE_PROFILE || 'release';
const targetDir = process.env.CARGO_TARGET_DIR
  ? path.resolve(workspaceDir, process.env.CARGO_TARGET_DIR)
  : path.join(workspaceDir, 'target');

function usage(message) {
  console.error(`pacer: ${message}`);
  console.error('usage: node scripts/build.js [--lua-only | --platform-package [--target <rust triple>]]');
  process.exit(2);
}
const argv = process.argv.slice(2);
let luaOnly = false;
let platformPackage = false;
let triple = null;
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === '--lua-only') luaOnly = true;
  else if (argv[i] === '--platform-package') platformPackage = true;
  else if (argv[i] === '--target' && i + 1 < argv.length) triple = argv[++i];
  else usage(`unknown argument ${argv[i]}`);
}
if (luaOnly && (platformPackage || triple !== null)) usage('--lua-only builds nothing');
if (triple !== null && !platformPackage) usage('--target goes with --platform-package');

// Copy to a temporary name and rename, so a running process never loads a
// half-written file.
function place(source, target) {
  fs.copyFileSync(source, `${target}.tmp`);
  fs.renameSync(`${target}.tmp`, target);
}
const script = path.join(packageDir, 'pacer.lua');
place(path.join(workspaceDir, 'redis', 'pacer.lua'), script);
console.log(`pacer: copied redis/pacer.lua to ${path.relative(process.cwd(), script)}`);
if (luaOnly) process.exit(0);

// The platform the addon is for: the triple's, else this machine's.
let platform = null;
if (triple !== null) {
  platform = PLATFORMS.find((p) => p.target === triple) ?? null;
  if (platform === null) usage(`no platform package builds ${triple} (platforms.js)`);
} else if (platformPackage) {
  platform = hostPlatform();
  if (platform === null) usage(`no platform package is listed for this machine (${process.platform}, ${process.arch})`);
}

const args = ['build', '--locked', '-p', 'pacer-node'];
if (profile === 'release') args.push('--release');
if (triple !== null) args.push('--target', triple);
execFileSync('cargo', args, { cwd: workspaceDir, stdio: 'inherit' });

const os = platform === null ? process.platform : platform.platform;
const libraryName = {
  linux: 'libpacer_node.so',
  darwin: 'libpacer_node.dylib',
  win32: 'pacer_node.dll',
}[os];
if (!libraryName) throw new Error(`pacer: no addon file name known for ${os}`);
const built = path.join(targetDir, ...(triple === null ? [] : [triple]), profile === 'release' ? 'release' : 'debug', libraryName);
const destination = platform === null
  ? path.join(packageDir, 'pacer.node')
  : path.join(packageDir, 'npm', platform.name, addonFile(platform.name));
place(built, destination);
console.log(`pacer: built ${path.relative(process.cwd(), destination)}`);
