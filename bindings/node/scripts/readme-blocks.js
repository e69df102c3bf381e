#!/usr/bin/env node
// Runs every ```js block of a README as a reader would: each block, exactly
// as written, becomes its own file in an app folder where the package is
// installed (readme-block-<n>.mjs, or .cjs for a block that only require()s),
// and runs there with node. A block that reads process.env.REDIS_URL gets a
// redis-server of its own (with PACER_REDIS_MODULE loaded, as the RedisPacer
// tests start one: free loopback port, temporary directory), stopped when
// the block ends, whatever happens.
//
// Usage: node scripts/readme-blocks.js --expect <count> <README.md> <app folder>
// Fails when the number of ```js blocks is not <count> (so a block cannot
// drop out unnoticed), when a JavaScript block is fenced other than ```js,
// or when any block exits non-zero or runs past the time limit.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { RedisServer } = require('../test/redis-server.js');

const TIME_LIMIT_MS = 20000;

function usage(message) {
  console.error(`readme-blocks: ${message}`);
  console.error('usage: node scripts/readme-blocks.js --expect <count> <README.md> <app folder>');
  process.exit(2);
}

function parseArgs(argv) {
  let expect;
  const rest = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--expect') expect = argv[++i];
    else rest.push(argv[i]);
  }
  if (expect === undefined || !/^\d+$/.test(expect)) usage('--expect <count> is required');
  if (rest.length !== 2) usage('a README and an app folder are required');
  return { expect: Number(expect), readme: path.resolve(rest[0]), app: path.resolve(rest[1]) };
}

/** The ```js blocks of `text`, in order: {line (1-based, of the fence), code}. */
function extractBlocks(text, file) {
  const lines = text.split('\n');
  const blocks = [];
  for (let i = 0; i < lines.length; i++) {
    const fence = /^(\s*)(`{3,}|~{3,})\s*([^\s`]*)/.exec(lines[i]);
    if (!fence) continue;
    const [, indent, marks, info] = fence;
    const lang = info.toLowerCase();
    if (['javascript', 'mjs', 'cjs', 'node', 'jsx'].includes(lang)) {
      throw new Error(`${file}:${i + 1}: a JavaScript block fenced as ${marks}${info}; fence it as ${marks}js so it runs`);
    }
    if (indent !== '') {
      if (lang === 'js') throw new Error(`${file}:${i + 1}: an indented ${marks}js block; it would not run as shown`);
      continue;
    }
    const start = i;
    const body = [];
    for (i += 1; i < lines.length && !new RegExp(`^${marks}\\s*$`).test(lines[i]); i++) body.push(lines[i]);
    if (i >= lines.length) throw new Error(`${file}:${start + 1}: the block opened here is never closed`);
    if (lang === 'js') blocks.push({ line: start + 1, code: `${body.join('\n')}\n` });
  }
  return blocks;
}

/** .mjs for a block with import/export statements (or neither those nor
 * require(), so top-level await works); .cjs for one that require()s. */
function extensionFor(code) {
  if (/^\s*(import|export)\s*[\w{*'"]/m.test(code)) return '.mjs';
  return /\brequire\s*\(/.test(code) ? '.cjs' : '.mjs';
}

const children = new Set();
process.on('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});

function run(file, cwd, env) {
  return new Promise((resolve) => {
    const started = performance.now();
    const child = spawn(process.execPath, [file], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let output = '';
    child.stdout.on('data', (chunk) => { output += chunk; });
    child.stderr.on('data', (chunk) => { output += chunk; });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, TIME_LIMIT_MS);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      resolve({ code, signal, timedOut, output, ms: Math.round(performance.now() - started) });
    });
  });
}

async function main() {
  const { expect, readme, app } = parseArgs(process.argv.slice(2));
  const name = path.basename(readme);
  if (!fs.existsSync(path.join(app, 'node_modules'))) usage(`${app} has no node_modules: install the package there first`);
  const blocks = extractBlocks(fs.readFileSync(readme, 'utf8'), name);
  if (blocks.length !== expect) {
    console.error(`readme-blocks: ${name} has ${blocks.length} js blocks, expected ${expect}`
      + ' (a block added or removed: update the count in scripts/test-node.sh)');
    return 1;
  }
  let failed = 0;
  for (const [index, { line, code }] of blocks.entries()) {
    const n = index + 1;
    const fileName = `readme-block-${n}${extensionFor(code)}`;
    fs.writeFileSync(path.join(app, fileName), code);
    const env = { ...process.env };
    let redis = null;
    try {
      if (/process\.env\.REDIS_URL\b/.test(code)) {
        redis = await RedisServer.start({ module: true });
        env.REDIS_URL = redis.url;
      }
      const where = `block ${n} (${name}:${line}, ${fileName}${redis ? ', REDIS_URL on a fresh redis-server' : ''})`;
      console.log(`readme-blocks: ${where}`);
      const result = await run(fileName, app, env);
      if (result.output !== '') {
        for (const text of result.output.replace(/\n$/, '').split('\n')) console.log(`  ${n} | ${text}`);
      }
      if (result.timedOut) {
        console.log(`readme-blocks: block ${n} FAILED: still running after ${TIME_LIMIT_MS} ms`);
        failed += 1;
      } else if (result.code !== 0) {
        console.log(`readme-blocks: block ${n} FAILED: exit ${result.code ?? result.signal}`);
        failed += 1;
      } else {
        console.log(`readme-blocks: block ${n} ok (${result.ms} ms)`);
      }
    } finally {
      if (redis) await redis.stop();
    }
  }
  if (failed > 0) {
    console.log(`readme-blocks: ${failed} of ${blocks.length} js blocks in ${name} failed`);
    return 1;
  }
  console.log(`readme-blocks: all ${blocks.length} js blocks in ${name} ran`);
  return 0;
}

main().then((code) => { process.exitCode = code; }, (error) => {
  console.error(`readme-blocks: ${error.message}`);
  process.exitCode = 1;
});
