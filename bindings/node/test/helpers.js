'use strict';
// Test helpers: a fake clock and scheduler (nothing really sleeps), the
// shared vectors, the check that an error names what was wrong, and a small
// pacer on that clock.
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { Pacer } = require('../index.js');

class FakeTime {
  constructor(start = 0) {
    this.nowMs = start;
    this.timers = [];
    this.now = () => this.nowMs;
    this.schedule = (ms, fire) => {
      const timer = { at: this.nowMs + ms, ms, fire, cancelled: false, fired: false };
      this.timers.push(timer);
      return () => {
        timer.cancelled = true;
      };
    };
  }

  /** Timers neither fired nor cancelled. */
  pending() {
    return this.timers.filter((t) => !t.cancelled && !t.fired);
  }

  /** Moves the clock and fires due timers in time order, letting promise
   * reactions run after each (so a woken request reads the clock it woke at). */
  async advance(ms) {
    const until = this.nowMs + ms;
    for (;;) {
      const due = this.pending().filter((t) => t.at <= until).sort((a, b) => a.at - b.at);
      if (due.length === 0) break;
      const timer = due[0];
      this.nowMs = timer.at;
      timer.fired = true;
      timer.fire();
      await flush();
    }
    this.nowMs = until;
  }
}

/** Lets queued promise reactions run. */
function flush() {
  return new Promise((resolve) => setImmediate(resolve));
}

function loadVectors(name) {
  const file = path.join(__dirname, '..', '..', '..', 'tests', 'vectors', `${name}.json`);
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

const quiet = () => {};

/** Asserts `fn` throws a `type` whose message names `name` (`label` says
 * which case failed). */
function throwsNaming(fn, type, name, label) {
  assert.throws(fn, (e) => {
    assert.ok(e instanceof type, `${label}: ${e?.constructor?.name} ${e?.message}, expected ${type.name}`);
    assert.ok(e.message.includes(name), `${label}: "${e.message}" does not name ${name}`);
    return true;
  }, label);
}

// rate 60, burst 1, idle 30000, retries 3: bound floor((30000-14000)/8) = 2000,
// cap 2 s, schedule 3·2000 = 6000 >= 1000: refusing; one token a second.
function smallPacer(time, extra = {}) {
  return new Pacer({
    ratePerMinute: 60,
    burst: 1,
    idleTimeoutMs: 30000,
    maxRetries: 3,
    now: time.now,
    schedule: time.schedule,
    onNotice: quiet,
    ...extra,
  });
}

/** A small pacer at t=0 whose one token an admit took, and a second admit
 * queued behind it (for 1000 ms) under `controller`'s signal. */
async function oneQueued() {
  const time = new FakeTime();
  const pacer = smallPacer(time);
  await pacer.admit();
  const controller = new AbortController();
  const queued = pacer.admit({ signal: controller.signal });
  return { time, pacer, controller, queued };
}

/** `counters()` of a pacer that decided nothing: every count 0, and the
 * eight wait buckets (WAIT_BOUNDS_MS: 10, 50, 100, 500, 1000, 2500, 5000,
 * 10000 ms) 0. */
const ZERO_COUNTS = Object.freeze({
  admitted: 0, admittedAfterWait: 0, refused: 0, shaped: 0, released: 0, refunded: 0, clockRegressions: 0,
  booked: 0, redeemed: 0, opened: 0, throttled: 0, waitMsTotal: 0, waitBuckets: Object.freeze([0, 0, 0, 0, 0, 0, 0, 0]),
});

/** `counters()` with `changed`'s counts, every other 0. */
function counts(changed) {
  return { ...ZERO_COUNTS, waitBuckets: [...ZERO_COUNTS.waitBuckets], ...changed };
}

module.exports = {
  FakeTime, flush, loadVectors, quiet, throwsNaming, smallPacer, oneQueued, ZERO_COUNTS, counts,
};
