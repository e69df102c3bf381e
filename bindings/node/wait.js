'use strict';
// The one abortable sleep both entry points use.

/**
 * Resolves after `ms` through `schedule(ms, fire) → cancel`; rejects with
 * `abortError(signal)` if `signal` aborts first (and cancels the timer).
 * The caller has already checked that `signal` is not aborted, and nothing
 * is awaited between that check and this call.
 */
function sleep(schedule, ms, signal, abortError) {
  return new Promise((resolve, reject) => {
    let settled = false;
    let cancelTimer;
    const onAbort = () => {
      if (settled) return;
      settled = true;
      cancelTimer?.();
      reject(abortError(signal));
    };
    const fire = () => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    cancelTimer = schedule(ms, fire);
    // The schedule may have fired synchronously.
    if (settled) cancelTimer();
  });
}

module.exports = { sleep };
