#!/usr/bin/env node
// Builds the addon with cargo and places it beside index.js as pacer.node,
// and copies the repository's redis/pacer.lua beside it as pacer.lua (the
// script RedisPacer runs; the one committed copy is redis/pacer.lua). npm
// runs this before it packs (prepack), so the tarball carries both.
// Only cargo and this package's files are needed: nothing is downloaded
// beyond crates.io.
'use strict';
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const packageDir = path.resolve(__dirname, '..');
const workspaceDir = path.resolve(packageDir, '..', '..');
const profile = process.env.PACER_NODE_PROFILE || 'release';
const targetDir = process.env.CARGO_TARGET_DIR
  ? path.resolve(workspaceDir, process.env.CARGO_TARGET_DIR)
  : path.join(workspaceDir, 'target');

const args = ['build', '--locked', '-p', 'pacer-node'];
if (profile === 'release') args.push('--release');
execFileSync('cargo', args, { cwd: workspaceDir, stdio: 'inherit' });

const libraryName = {
  linux: 'libpacer_node.so',
  darwin: 'libpacer_node.dylib',
  win32: 'pacer_node.dll',
}[process.platform];
if (!libraryName) throw new Error(`pacer: no addon file name known for ${process.platform}`);
const built = path.join(targetDir, profile === 'release' ? 'release' : 'debug', libraryName);
const destination = path.join(packageDir, 'pacer.node');
// Copy to a temporary name and rename, so a running process never loads a
// half-written file.
function place(source, target) {
  fs.copyFileSync(source, `${target}.tmp`);
  fs.renameSync(`${target}.tmp`, target);
}
place(built, destination);
console.log(`pacer: built ${path.relative(process.cwd(), destination)}`);
const script = path.join(packageDir, 'pacer.lua');
place(path.join(workspaceDir, 'redis', 'pacer.lua'), script);
console.log(`pacer: copied redis/pacer.lua to ${path.relative(process.cwd(), script)}`);
