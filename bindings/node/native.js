'use strict';
// Loads the addon and checks it belongs to this package version: a
// development build beside this file (pacer.node, from `npm run build`,
// scripts/build.js) when there is one, else the prebuilt one of this
// platform's package (connpacer-<platform>, an optional dependency; see
// platforms.js).
const fs = require('node:fs');
const { version } = require('./package.json');
const { nodeUnsupported, glibcVersion, loadAddon } = require('./platforms.js');

const tooOld = nodeUnsupported(process.versions.node);
if (tooOld !== null) throw new Error(tooOld);

const native = loadAddon({
  dir: __dirname,
  platform: process.platform,
  arch: process.arch,
  glibc: () => glibcVersion(process),
  exists: (file) => fs.existsSync(file),
  load: (file) => require(file),
  resolve: (id) => require.resolve(id),
});

const nativeConstants = native.constants();
// The wait histogram's bounds (the core's WAIT_BOUNDS_MS), frozen with the rest.
nativeConstants.waitBoundsMs = Object.freeze(nativeConstants.waitBoundsMs);
const constants = Object.freeze(nativeConstants);
if (constants.version !== version) {
  throw new Error(
    `pacer: the native addon is version ${constants.version} but this package is ${version}; `
      + `install the same version of both, or rebuild it with "npm run build" in ${__dirname}`,
  );
}

// Field widths of the addon's decision encoding (src/lib.rs, `encode`).
const PACED_WAIT_SPAN = 16384;
const SHAPED_DEBIT_SPAN = 65536;
const REFUSAL_HINT_SPAN = 32;
const PATH_PACED = 1;
const PATH_SHAPED = 2;

/**
 * Decodes one `NativePacer.reserve` number. Admitted: `{admitted: true,
 * waitMs, path (0..3), seq, debitUnits, clockRegressed}` (debitUnits 0 when
 * nothing was debited, so there is no ticket); refused: `{admitted: false,
 * requiredWaitMs, retryAfterSeconds, clockRegressed}`. A shaped admission
 * waits the bound, which the caller passes in.
 */
function decodeDecision(code, waitBoundMs) {
  if (typeof code !== 'number') {
    // A read from a detached `exchange` (its buffer moved away by a
    // script) gives `undefined`: fail clearly rather than decode it.
    throw new Error('pacer: the addon answered no decision (its exchange buffer is gone)');
  }
  // Codes pass 2^31, but `&` on a whole double keeps its low 32 bits, so
  // the low fields come out with `&` and the high ones by exact division.
  if (code >= 0) {
    const low = code & 7;
    const path = low & 3;
    const payload = (code - low) / 8;
    let waitMs = 0;
    let seq = 0;
    let debitUnits = 0;
    if (path === PATH_PACED) {
      waitMs = payload & (PACED_WAIT_SPAN - 1);
      seq = (payload - waitMs) / PACED_WAIT_SPAN;
      debitUnits = constants.unitsPerToken;
    } else if (path === PATH_SHAPED) {
      debitUnits = payload & (SHAPED_DEBIT_SPAN - 1);
      seq = (payload - debitUnits) / SHAPED_DEBIT_SPAN;
      waitMs = waitBoundMs;
    }
    return { admitted: true, waitMs, path, seq, debitUnits, clockRegressed: low >= 4 };
  }
  const flat = -code - 1;
  const low = flat & (REFUSAL_HINT_SPAN - 1);
  return {
    admitted: false,
    requiredWaitMs: (flat - low) / REFUSAL_HINT_SPAN,
    retryAfterSeconds: low >> 1,
    clockRegressed: (low & 1) === 1,
  };
}

/**
 * The hot calls' exchange (src/hot.rs): a caller writes the clock to
 * `exchange[0]`, calls `reserveHot(handle)` (or `reserveSharedHot(handle)`,
 * which reads its own clock), and reads the decision's code from
 * `exchange[1]`. Numbers passed that way cost the call no Node-API
 * conversions and no heap number. (`index.js` writes the same steps out in
 * `Pacer.reserve`.)
 */
const { exchange } = native;

/** `reserveHot(handle)` at `nowMs`: the decision's code. */
function reserveCode(handle, nowMs) {
  exchange[0] = nowMs;
  native.reserveHot(handle);
  return exchange[1];
}

/** What the upstream answered to a new connection (SPEC §14), as the
 * addon's `observe` takes it: the core's `Outcome` numbers. */
const OUTCOME_CODES = Object.freeze({ opened: 1, throttled: 2 });

/** The addon's number for `outcome`, 'opened' or 'throttled'; anything
 * else is a TypeError naming the argument. */
function outcomeCode(outcome) {
  const code = typeof outcome === 'string' && Object.hasOwn(OUTCOME_CODES, outcome) ? OUTCOME_CODES[outcome] : 0;
  if (code === 0) {
    const given = typeof outcome === 'string' ? JSON.stringify(outcome) : typeof outcome;
    throw new TypeError(`pacer: outcome must be 'opened' or 'throttled', got ${given}`);
  }
  return code;
}

module.exports = {
  native, constants, decodeDecision, outcomeCode, reserveCode, PACED_WAIT_SPAN, REFUSAL_HINT_SPAN,
  PATH_PACED,
};
