'use strict';
// Which prebuilt addon package serves a process, and how native.js finds the
// addon: the pure parts of the loader, so node --test can drive them with
// any platform (test/platforms.test.js).
//
// The layout is napi-rs's: the main package `connpacer` lists one package
// per platform in optionalDependencies, each carrying one file,
// pacer.<platform>.node, and declaring os/cpu/libc so npm installs only the
// one that fits. The folders are npm/<platform>/ (package.json committed,
// the .node file placed there by `node scripts/build.js --platform-package`).
const path = require('node:path');

/** The published platforms: name (the package is `connpacer-<name>`),
 * Node's process.platform and process.arch, the C library on Linux, and
 * the Rust target that builds it (.github/workflows/release-node.yml). */
const PLATFORMS = Object.freeze([
  { name: 'linux-x64-gnu', platform: 'linux', arch: 'x64', libc: 'glibc', target: 'x86_64-unknown-linux-gnu' },
  { name: 'linux-arm64-gnu', platform: 'linux', arch: 'arm64', libc: 'glibc', target: 'aarch64-unknown-linux-gnu' },
  { name: 'linux-x64-musl', platform: 'linux', arch: 'x64', libc: 'musl', target: 'x86_64-unknown-linux-musl' },
  { name: 'darwin-x64', platform: 'darwin', arch: 'x64', libc: null, target: 'x86_64-apple-darwin' },
  { name: 'darwin-arm64', platform: 'darwin', arch: 'arm64', libc: null, target: 'aarch64-apple-darwin' },
  { name: 'win32-x64-msvc', platform: 'win32', arch: 'x64', libc: null, target: 'x86_64-pc-windows-msvc' },
].map(Object.freeze));

const PACKAGE_PREFIX = 'connpacer-';
const MIN_NODE_MAJOR = 20;

/**
 * The platform's name as the packages spell it, whether or not one is
 * published: `<platform>-<arch>`, then `-gnu` or `-musl` on Linux (glibc is
 * `process.report`'s glibcVersionRuntime: set on glibc, absent on musl),
 * `-msvc` on Windows.
 */
function platformName({ platform, arch, glibc }) {
  let abi = '';
  if (platform === 'linux') abi = glibc ? '-gnu' : '-musl';
  else if (platform === 'win32') abi = '-msvc';
  return `${platform}-${arch}${abi}`;
}

/** The published platform that serves {platform, arch, glibc}, or null. */
function platformFor(target) {
  const name = platformName(target);
  return PLATFORMS.find((p) => p.name === name) ?? null;
}

/** The published platform of the running process (`proc`, `process` by
 * default), or null: what the loader looks for, and what the build and
 * release scripts build and pack. */
function hostPlatform(proc = process) {
  return platformFor({ platform: proc.platform, arch: proc.arch, glibc: glibcVersion(proc) });
}

/** The prebuilt addon's package for {platform, arch, glibc}, or null when
 * none is published for it. */
function packageFor(target) {
  const found = platformFor(target);
  return found === null ? null : PACKAGE_PREFIX + found.name;
}

/** The addon's file inside a platform package (its `main`). */
function addonFile(name) {
  return `pacer.${name}.node`;
}

/** Null when Node `version` (process.versions.node) can run the package,
 * else the one-line reason. */
function nodeUnsupported(version) {
  const major = Number(String(version).split('.')[0]);
  if (Number.isInteger(major) && major >= MIN_NODE_MAJOR) return null;
  return `pacer: Node ${version} is not supported; connpacer needs Node ${MIN_NODE_MAJOR} or later`;
}

/** glibc's version on this process's Linux, or undefined (musl, or not
 * Linux). Asks process.report, without the network part of the report
 * (which can wait on name lookups). */
function glibcVersion(proc = process) {
  if (proc.platform !== 'linux' || typeof proc.report?.getReport !== 'function') return undefined;
  const exclude = proc.report.excludeNetwork;
  proc.report.excludeNetwork = true;
  try {
    return proc.report.getReport().header?.glibcVersionRuntime || undefined;
  } finally {
    proc.report.excludeNetwork = exclude;
  }
}

/**
 * Finds and loads the addon. `host` is {dir, platform, arch, glibc(),
 * exists(file), load(id), resolve(id)}: native.js passes the real ones.
 * A development build, `dir`/pacer.node (`npm run build`), wins when it is
 * there; else the platform's package. Every failure is an Error with a
 * one-line message (and the underlying error as its cause).
 */
function loadAddon(host) {
  const local = path.join(host.dir, 'pacer.node');
  if (host.exists(local)) {
    try {
      return host.load(local);
    } catch (error) {
      throw new Error(
        `pacer: cannot load the native addon ${local} (${firstLine(error)}); `
          + 'rebuild it with "npm run build" (needs cargo)',
        { cause: error },
      );
    }
  }
  const glibc = host.platform === 'linux' ? host.glibc() : undefined;
  const name = platformName({ platform: host.platform, arch: host.arch, glibc });
  const pkg = packageFor({ platform: host.platform, arch: host.arch, glibc });
  if (pkg === null) {
    throw new Error(
      `pacer: no prebuilt native addon for ${name} (there are for ${PLATFORMS.map((p) => p.name).join(', ')}); `
        + 'build one from source with "npm run build" (needs cargo)',
    );
  }
  let resolved;
  try {
    resolved = host.resolve(pkg);
  } catch (error) {
    throw new Error(
      `pacer: the native addon's package ${pkg} is not installed; install it with "npm install ${pkg}", `
        + 'or build the addon from source with "npm run build" (needs cargo)',
      { cause: error },
    );
  }
  try {
    return host.load(resolved);
  } catch (error) {
    throw new Error(`pacer: cannot load the native addon ${resolved} from ${pkg} (${firstLine(error)})`, { cause: error });
  }
}

function firstLine(error) {
  return String(error?.message ?? error).split('\n')[0];
}

module.exports = {
  PLATFORMS, PACKAGE_PREFIX, MIN_NODE_MAJOR, platformName, platformFor, hostPlatform, packageFor,
  addonFile, nodeUnsupported, glibcVersion, loadAddon,
};
