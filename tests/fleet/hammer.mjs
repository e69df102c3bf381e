// The Node binding's RedisPacer as a fleet client for tests/fleet/check.py
// and tests/fleet/cluster_check.py:
//   node tests/fleet/hammer.mjs URL KEY CALLS EVERY_MS RATE BURST IDLE RETRIES
// URL: one server, or a Redis Cluster's seed nodes separated by commas
// (rootNodes; a call may then take up to 4 s, a failover's wait among it).
// One JSON line per reserve (wall-clock ms). Any fallback answer is an
// error here: the check is about the server's decisions.
import { createRequire } from 'node:module';
import { setTimeout as sleep } from 'node:timers/promises';

const require = createRequire(import.meta.url);
const { RedisPacer } = require('../../bindings/node');

const [url, key, calls, every, rate, burst, idle, retries] = process.argv.slice(2);
const cluster = url.includes(',');
const pacer = await RedisPacer.connect({
  ...(cluster ? { rootNodes: url.split(',') } : { url }),
  key,
  ratePerMinute: Number(rate),
  burst: Number(burst),
  idleTimeoutMs: Number(idle),
  maxRetries: Number(retries),
  releasePolicy: 'refund',
  engine: 'module',
  onFailure: 'closed',
  timeoutMs: cluster ? 4000 : 1000,
});
try {
  for (let i = 0; i < Number(calls); i++) {
    const sendMs = Date.now();
    const d = await pacer.reserve();
    const replyMs = Date.now();
    if (d.fallback) throw new Error(`answered by the ${d.fallback} policy, not the server`);
    const line = { client: 'node', send_ms: sendMs, reply_ms: replyMs, answer: d.kind };
    if (d.kind === 'admitted') line.wait_ms = d.waitMs;
    else line.retry_after_s = d.retryAfterSeconds;
    process.stdout.write(JSON.stringify(line) + '\n');
    await sleep(Number(every));
  }
} finally {
  await pacer.close();
}
