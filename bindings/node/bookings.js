'use strict';
// Keyed bookings (SPEC §11) over the addon, shared by the idiomatic Pacer
// (index.js, `admit({key})`) and the drop-in module (compat.js, opt-in).
// The caller's key is the request's identity across the client's retries;
// the map holds, per key refused so far, its attempts and its booking.
const { constants, decodeDecision } = require('./native.js');

class KeyedBookings {
  #native;
  #maxRetries;
  #pending = new Map();

  /**
   * `native` is a NativePacer or a NativeSharedPacer: the same calls, the
   * shared one reading the machine-wide clock itself (it ignores `nowMs`),
   * so the waits returned are from the reading each decision was made at.
   */
  constructor(native, maxRetries) {
    this.#native = native;
    this.#maxRetries = maxRetries;
  }

  /**
   * One attempt of request `key` at `nowMs`: redeems its booking if it
   * holds one, else reserves or books with the retries it has left (the
   * configured count minus the attempts refused so far). Returns the
   * decoded decision of `decodeDecision` (`admitted: true`, with `seq` and
   * `debitUnits` of the ticket) or `{admitted: false, requiredWaitMs,
   * retryAfterSeconds, clockRegressed}`.
   */
  attempt(key, nowMs, waitBoundMs) {
    const entry = this.#pending.get(key) ?? { attempts: 0, seq: 0, slotMs: -1 };
    let decision;
    if (entry.slotMs >= 0) {
      const [kind, value, requiredWaitMs] = this.#native.redeem(entry.seq, entry.slotMs, nowMs);
      decision = kind === 0
        ? { admitted: true, waitMs: value, path: PATH_BOOKED, seq: entry.seq, debitUnits: constants.unitsPerToken,
          clockRegressed: false }
        : { admitted: false, requiredWaitMs, retryAfterSeconds: value, clockRegressed: false };
    } else {
      const r = this.#native.reserveOrBook(nowMs, Math.max(0, this.#maxRetries - entry.attempts));
      if (r[0] === 0) {
        decision = decodeDecision(r[1], waitBoundMs);
      } else if (r[0] === 1) {
        [, entry.seq, entry.slotMs] = r;
        decision = { admitted: false, requiredWaitMs: r[5], retryAfterSeconds: r[3], clockRegressed: r[4] === 1 };
      } else {
        decision = { admitted: false, requiredWaitMs: r[1], retryAfterSeconds: r[2], clockRegressed: r[3] === 1 };
      }
    }
    if (decision.admitted) {
      this.#pending.delete(key);
    } else {
      entry.attempts += 1;
      this.#pending.set(key, entry);
    }
    return decision;
  }

  /** Releases the booking `key` holds, if any, and forgets the key; whether
   * a booking was refunded. */
  forget(key, nowMs) {
    const entry = this.#pending.get(key);
    this.#pending.delete(key);
    if (entry === undefined || entry.slotMs < 0) return false;
    return this.#native.release(entry.seq, constants.unitsPerToken, nowMs);
  }

  /** Keys refused and not yet admitted or forgotten. */
  get size() {
    return this.#pending.size;
  }
}

/** The core's AdmitPath::Booked. */
const PATH_BOOKED = 4;

/** Throws unless `key` can key a request. */
function checkKey(key) {
  if (key === null || (typeof key !== 'string' && typeof key !== 'number' && typeof key !== 'symbol')) {
    const shown = typeof key === 'object' ? (key === null ? 'null' : 'an object') : typeof key;
    throw new TypeError(`pacer: key must be a string, number or symbol, got ${shown}`);
  }
  return key;
}

module.exports = { KeyedBookings, checkKey, PATH_BOOKED };
