'use strict';
// The one abortable sleep both entry points use.

/**
 * Resolves after `ms` through `schedule(ms, fire) → cancel`; rejects with
 * `abortError(signal)` if `signal` aborts first (and cancels the timer).
 * The caller has already checked that `signal` is not aborted, and nothing
 * is awaited between that check and this call.
 *
 * `control`, when given, lets the caller see and end the sleep from
 * outside (the idiomatic Pacer's `close()`): `control.outcome` becomes
 * 'fired', 'aborted' or 'interrupted' the moment the sleep settles, and
 * `control.interrupt(error)` rejects a sleep still pending with `error`
 * (cancelling its timer and its abort listener), returning whether it did.
 */
function sleep(schedule, ms, signal, abortError, control) {
  return new Promise((resolve, reject) => {
    let settled = false;
    let cancelTimer;
    const settle = (outcome) => {
      settled = true;
      if (control) control.outcome = outcome;
    };
    const onAbort = () => {
      if (settled) return;
      settle('aborted');
      cancelTimer?.();
      reject(abortError(signal));
    };
    const fire = () => {
      if (settled) return;
      settle('fired');
      signal?.removeEventListener('abort', onAbort);
      resolve();
    };
    if (control) {
      control.interrupt = (error) => {
        if (settled) return false;
        settle('interrupted');
        cancelTimer?.();
        signal?.removeEventListener('abort', onAbort);
        reject(error);
        return true;
      };
    }
    signal?.addEventListener('abort', onAbort, { once: true });
    cancelTimer = schedule(ms, fire);
    // The schedule may have fired synchronously.
    if (settled) cancelTimer();
  });
}

module.exports = { sleep };
