'use strict';
// The loader's pure parts (platforms.js): which platform package serves a
// process, the Node version gate, and the order native.js looks for the
// addon in (a development build first, then the platform's package), with
// a fake host so every platform can be tried here. Expected names and
// messages are written out by hand.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {
  PLATFORMS, platformName, hostPlatform, packageFor, addonFile, nodeUnsupported, glibcVersion, loadAddon,
} = require('../platforms.js');
const pkg = require('../package.json');


// Each platform package's name and the Rust target that builds it, written
// by hand (the loader's table and the release workflow must both say this).
const TARGETS = [
  ['linux-x64-gnu', 'x86_64-unknown-linux-gnu'],
  ['linux-arm64-gnu', 'aarch64-unknown-linux-gnu'],
  ['linux-x64-musl', 'x86_64-unknown-linux-musl'],
  ['darwin-x64', 'x86_64-apple-darwin'],
  ['darwin-arm64', 'aarch64-apple-darwin'],
  ['win32-x64-msvc', 'x86_64-pc-windows-msvc'],
];

test('packageFor: each published platform by process.platform, process.arch and glibc', () => {
  const cases = [
    [{ platform: 'linux', arch: 'x64', glibc: '2.36' }, 'connpacer-linux-x64-gnu'],
    [{ platform: 'linux', arch: 'x64', glibc: undefined }, 'connpacer-linux-x64-musl'],
    [{ platform: 'linux', arch: 'arm64', glibc: '2.31' }, 'connpacer-linux-arm64-gnu'],
    [{ platform: 'darwin', arch: 'x64' }, 'connpacer-darwin-x64'],
    [{ platform: 'darwin', arch: 'arm64' }, 'connpacer-darwin-arm64'],
    [{ platform: 'win32', arch: 'x64' }, 'connpacer-win32-x64-msvc'],
    // glibc means nothing off Linux.
    [{ platform: 'darwin', arch: 'arm64', glibc: '2.36' }, 'connpacer-darwin-arm64'],
  ];
  for (const [target, expected] of cases) assert.equal(packageFor(target), expected, JSON.stringify(target));
});

test('packageFor: null where no package is published', () => {
  const cases = [
    { platform: 'linux', arch: 'arm64', glibc: undefined }, // linux-arm64-musl
    { platform: 'linux', arch: 'ia32', glibc: '2.36' },
    { platform: 'freebsd', arch: 'x64' },
    { platform: 'win32', arch: 'arm64' },
    { platform: 'win32', arch: 'ia32' },
    { platform: 'android', arch: 'arm64' },
  ];
  for (const target of cases) assert.equal(packageFor(target), null, JSON.stringify(target));
});

test('platformName: the name an unsupported platform is reported by', () => {
  assert.equal(platformName({ platform: 'linux', arch: 'arm64', glibc: undefined }), 'linux-arm64-musl');
  assert.equal(platformName({ platform: 'freebsd', arch: 'x64' }), 'freebsd-x64');
  assert.equal(platformName({ platform: 'win32', arch: 'arm64' }), 'win32-arm64-msvc');
});

test('the table: six platforms, each with its Rust target, as release-node.yml builds them', () => {
  assert.deepEqual(PLATFORMS.map((p) => [p.name, p.target]), TARGETS);
  assert.equal(addonFile('linux-x64-gnu'), 'pacer.linux-x64-gnu.node');
});

test('each platform folder npm/<name> matches the table and the main package', () => {
  const expectedOptional = {
    'connpacer-linux-x64-gnu': pkg.version,
    'connpacer-linux-arm64-gnu': pkg.version,
    'connpacer-linux-x64-musl': pkg.version,
    'connpacer-darwin-x64': pkg.version,
    'connpacer-darwin-arm64': pkg.version,
    'connpacer-win32-x64-msvc': pkg.version,
  };
  assert.deepEqual(pkg.optionalDependencies, expectedOptional);
  assert.ok(!pkg.files.includes('pacer.node'), 'the main package ships no addon');
  const root = path.join(__dirname, '..', 'npm');
  assert.deepEqual(fs.readdirSync(root).sort(), [
    'darwin-arm64', 'darwin-x64', 'linux-arm64-gnu', 'linux-x64-gnu', 'linux-x64-musl', 'win32-x64-msvc',
  ]);
  for (const p of PLATFORMS) {
    const platformPkg = JSON.parse(fs.readFileSync(path.join(root, p.name, 'package.json'), 'utf8'));
    assert.equal(platformPkg.name, `connpacer-${p.name}`);
    assert.equal(platformPkg.version, pkg.version, p.name);
    assert.equal(platformPkg.main, `pacer.${p.name}.node`);
    assert.deepEqual(platformPkg.files, [`pacer.${p.name}.node`]);
    assert.deepEqual(platformPkg.os, [p.platform]);
    assert.deepEqual(platformPkg.cpu, [p.arch]);
    assert.deepEqual(platformPkg.libc, p.libc === null ? undefined : [p.libc]);
  }
});

test('nodeUnsupported: Node 20 and later run it; older is one line naming the version', () => {
  assert.equal(nodeUnsupported('20.0.0'), null);
  assert.equal(nodeUnsupported('20.20.2'), null);
  assert.equal(nodeUnsupported('24.1.0'), null);
  assert.equal(nodeUnsupported('18.20.4'), 'pacer: Node 18.20.4 is not supported; connpacer needs Node 20 or later');
  assert.equal(nodeUnsupported('19.9.0'), 'pacer: Node 19.9.0 is not supported; connpacer needs Node 20 or later');
});

test('glibcVersion: asks process.report on Linux only, without the network part, and restores it', () => {
  const asked = [];
  const fakeReport = (header) => ({
    excludeNetwork: false,
    getReport() {
      asked.push(this.excludeNetwork);
      return { header };
    },
  });
  const glibc = { platform: 'linux', report: fakeReport({ glibcVersionRuntime: '2.36' }) };
  assert.equal(glibcVersion(glibc), '2.36');
  assert.equal(glibc.report.excludeNetwork, false);
  assert.equal(glibcVersion({ platform: 'linux', report: fakeReport({}) }), undefined);
  assert.deepEqual(asked, [true, true]);
  assert.equal(glibcVersion({ platform: 'darwin', report: fakeReport({ glibcVersionRuntime: '2.36' }) }), undefined);
  assert.deepEqual(asked, [true, true]);
});

test('hostPlatform: the platform of the process given, glibc read from its report', () => {
  const report = (header) => ({ excludeNetwork: false, getReport: () => ({ header }) });
  assert.equal(hostPlatform({ platform: 'linux', arch: 'x64', report: report({ glibcVersionRuntime: '2.36' }) }).name, 'linux-x64-gnu');
  assert.equal(hostPlatform({ platform: 'linux', arch: 'x64', report: report({}) }).name, 'linux-x64-musl');
  assert.equal(hostPlatform({ platform: 'darwin', arch: 'arm64', report: report({}) }).name, 'darwin-arm64');
  assert.equal(hostPlatform({ platform: 'freebsd', arch: 'x64', report: report({}) }), null);
});

/** A host for loadAddon: `files` exist, `installed` packages resolve to
 * their main file, `broken` files throw when loaded. */
function fakeHost({ platform = 'linux', arch = 'x64', glibc = '2.36', files = [], installed = {}, broken = [] } = {}) {
  const loaded = [];
  let glibcAsked = 0;
  return {
    loaded,
    glibcAsked: () => glibcAsked,
    dir: '/app/node_modules/connpacer',
    platform,
    arch,
    glibc: () => {
      glibcAsked += 1;
      return glibc;
    },
    exists: (file) => files.includes(file),
    resolve: (id) => {
      if (Object.hasOwn(installed, id)) return installed[id];
      const error = new Error(`Cannot find module '${id}'\nRequire stack:\n- /app/x.js`);
      error.code = 'MODULE_NOT_FOUND';
      throw error;
    },
    load: (file) => {
      loaded.push(file);
      if (broken.includes(file)) throw new Error(`${file}: invalid ELF header\nmore`);
      return { file };
    },
  };
}

test('loadAddon: a development build beside the package wins, without asking for glibc', () => {
  const host = fakeHost({
    files: ['/app/node_modules/connpacer/pacer.node'],
    installed: { 'connpacer-linux-x64-gnu': '/app/node_modules/connpacer-linux-x64-gnu/pacer.linux-x64-gnu.node' },
  });
  assert.deepEqual(loadAddon(host), { file: '/app/node_modules/connpacer/pacer.node' });
  assert.deepEqual(host.loaded, ['/app/node_modules/connpacer/pacer.node']);
  assert.equal(host.glibcAsked(), 0);
});

test('loadAddon: else the platform package, by glibc or musl', () => {
  const gnu = fakeHost({
    installed: { 'connpacer-linux-x64-gnu': '/app/node_modules/connpacer-linux-x64-gnu/pacer.linux-x64-gnu.node' },
  });
  assert.deepEqual(loadAddon(gnu), { file: '/app/node_modules/connpacer-linux-x64-gnu/pacer.linux-x64-gnu.node' });
  const musl = fakeHost({
    glibc: null, // (undefined would take the fake's default)
    installed: { 'connpacer-linux-x64-musl': '/m/pacer.linux-x64-musl.node', 'connpacer-linux-x64-gnu': '/g/x.node' },
  });
  assert.deepEqual(loadAddon(musl), { file: '/m/pacer.linux-x64-musl.node' });
  const mac = fakeHost({ platform: 'darwin', arch: 'arm64', installed: { 'connpacer-darwin-arm64': '/d/x.node' } });
  assert.deepEqual(loadAddon(mac), { file: '/d/x.node' });
  assert.equal(mac.glibcAsked(), 0);
});

test('loadAddon: neither there is one line naming the package and how to get it', () => {
  const host = fakeHost();
  assert.throws(() => loadAddon(host), {
    message: 'pacer: the native addon\'s package connpacer-linux-x64-gnu is not installed; '
      + 'install it with "npm install connpacer-linux-x64-gnu", or build the addon from source with "npm run build" (needs cargo)',
  });
  assert.deepEqual(host.loaded, []);
});

test('loadAddon: an unsupported platform is one line naming it', () => {
  assert.throws(() => loadAddon(fakeHost({ platform: 'freebsd', arch: 'x64' })), {
    message: 'pacer: no prebuilt native addon for freebsd-x64 (there are for linux-x64-gnu, linux-arm64-gnu, '
      + 'linux-x64-musl, darwin-x64, darwin-arm64, win32-x64-msvc); build one from source with "npm run build" (needs cargo)',
  });
  assert.throws(() => loadAddon(fakeHost({ arch: 'arm64', glibc: null })), /^Error: pacer: no prebuilt native addon for linux-arm64-musl \(/);
  // A development build serves an unsupported platform too.
  const local = fakeHost({ platform: 'freebsd', arch: 'x64', files: ['/app/node_modules/connpacer/pacer.node'] });
  assert.deepEqual(loadAddon(local), { file: '/app/node_modules/connpacer/pacer.node' });
});

test('loadAddon: a file that will not load is named, on one line, with its first line of error', () => {
  const local = fakeHost({
    files: ['/app/node_modules/connpacer/pacer.node'],
    broken: ['/app/node_modules/connpacer/pacer.node'],
    installed: { 'connpacer-linux-x64-gnu': '/g/x.node' },
  });
  assert.throws(() => loadAddon(local), {
    message: 'pacer: cannot load the native addon /app/node_modules/connpacer/pacer.node '
      + '(/app/node_modules/connpacer/pacer.node: invalid ELF header); rebuild it with "npm run build" (needs cargo)',
  });
  // A broken development build is not passed over for the package.
  assert.deepEqual(local.loaded, ['/app/node_modules/connpacer/pacer.node']);
  const packaged = fakeHost({ installed: { 'connpacer-linux-x64-gnu': '/g/x.node' }, broken: ['/g/x.node'] });
  assert.throws(() => loadAddon(packaged), {
    message: 'pacer: cannot load the native addon /g/x.node from connpacer-linux-x64-gnu (/g/x.node: invalid ELF header)',
  });
});

test('this process: the checkout\'s tests load the development build', () => {
  const here = { platform: process.platform, arch: process.arch, glibc: glibcVersion(process) };
  if (here.platform === 'linux' && here.arch === 'x64' && here.glibc !== undefined) {
    assert.equal(packageFor(here), 'connpacer-linux-x64-gnu');
  }
  const { native } = require('../native.js');
  assert.equal(typeof native.constants, 'function');
  assert.ok(fs.existsSync(path.join(__dirname, '..', 'pacer.node')));
});

test('the release workflow builds each platform on its Rust target', () => {
  const workflow = fs.readFileSync(path.join(__dirname, '..', '..', '..', '.github', 'workflows', 'release-node.yml'), 'utf8');
  const built = [...workflow.matchAll(/^ {10}- platform: (\S+)\n {12}target: (\S+)$/gm)].map((m) => [m[1], m[2]]);
  assert.deepEqual(built, TARGETS);
});
