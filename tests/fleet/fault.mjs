// The Node binding's RedisPacer as a client of the fault run
// (tests/fleet/fault.py):
//   node tests/fleet/fault.mjs URL KEY UNTIL_MS QUIET_FROM_MS QUIET_TO_MS EVERY_MS TIMEOUT_MS SEED RATE BURST IDLE RETRIES
// URL: one server, or a Redis Cluster's seed nodes separated by commas
// (rootNodes; tests/fleet/cluster_fault.py).
// Calls until the wall clock reads UNTIL_MS (none from QUIET_FROM_MS to
// QUIET_TO_MS), one JSON line per admit(): each call is aborted at a random
// point in [0, TIMEOUT_MS) or not at all; admissions the server made are
// kept (never released by hand), so the server's counters account for
// every answer.
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

const require = createRequire(import.meta.url);
const { RedisPacer } = require('../../bindings/node');

const [url, key, until, quietFrom, quietTo, every, timeoutMs, seed, rate, burst, idle, retries] = process.argv.slice(2);

// A small deterministic generator (xorshift32), so a run can be repeated.
let state = Number(seed) >>> 0 || 1;
function random() {
  state ^= state << 13; state >>>= 0;
  state ^= state >>> 17;
  state ^= state << 5; state >>>= 0;
  return state / 2 ** 32;
}

const pacer = await RedisPacer.connect({
  ...(url.includes(',') ? { rootNodes: url.split(',') } : { url }),
  key,
  ratePerMinute: Number(rate), burst: Number(burst), idleTimeoutMs: Number(idle),
  maxRetries: Number(retries), releasePolicy: 'refund',
  engine: 'auto', onFailure: 'closed', timeoutMs: Number(timeoutMs), retryAfterMs: 50,
  onNotice: () => {},
});
try {
  for (let i = 0; Date.now() < Number(until); i++) {
    const now = Date.now();
    if (now >= Number(quietFrom) && now < Number(quietTo)) await sleep(Number(quietTo) - now);
    const cancelAt = random() < 0.5 ? Math.floor(random() * Number(timeoutMs)) : null;
    const controller = new AbortController();
    const timer = cancelAt === null ? null : setTimeout(() => controller.abort(new Error('cancelled')), cancelAt);
    const line = { client: 'node', call: i, start_ms: Date.now(), cancel_at_ms: cancelAt };
    try {
      const d = await pacer.admit({ signal: controller.signal });
      line.outcome = d.kind;
      line.by = d.fallback ?? 'server';
      if (d.kind === 'admitted') line.wait_ms = d.waitedMs;
    } catch (error) {
      if (controller.signal.aborted && error === controller.signal.reason) line.outcome = 'cancelled';
      else { line.outcome = 'error'; line.error = String(error?.message ?? error); }
    } finally {
      if (timer !== null) clearTimeout(timer);
    }
    line.end_ms = Date.now();
    process.stdout.write(JSON.stringify(line) + '\n');
    await sleep(Number(every));
  }
} finally {
  await pacer.close();
}
