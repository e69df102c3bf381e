// The Node binding's RedisPacer.reserve beside node-redis's PING on the
// same connection (bench/clients/run.sh):
//   node bench/clients/node.mjs URL KEY ENGINE CALLS ROUNDS
// One JSON line per round: the mean µs per call of CALLS sequential PINGs
// and of CALLS sequential reserves (the order alternates by round).
import { createRequire } from 'node:module';

const bindings = new URL('../../bindings/node/', import.meta.url).pathname;
const require = createRequire(bindings);
const { RedisPacer } = require(bindings);
const { createClient } = require('redis');

const [url, key, engine, calls, rounds] = process.argv.slice(2);
const n = Number(calls);
const client = createClient({ url });
await client.connect();
const pacer = await RedisPacer.connect({
  client, key, engine, ratePerMinute: 600, burst: 1000000, idleTimeoutMs: 120000, maxRetries: 5,
  onFailure: 'closed',
});

async function pings() {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await client.ping();
  return Number(process.hrtime.bigint() - start) / 1000 / n;
}

async function reserves() {
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) {
    const d = await pacer.reserve();
    if (d.kind !== 'admitted' || d.waitMs !== 0 || d.fallback !== undefined) {
      throw new Error(`reserve ${i}: ${JSON.stringify(d)}`);
    }
  }
  return Number(process.hrtime.bigint() - start) / 1000 / n;
}

try {
  if (pacer.engine !== null && pacer.engine !== engine) throw new Error(`engine ${pacer.engine}`);
  for (let round = 0; round < Number(rounds); round++) {
    let ping;
    let reserve;
    if (round % 2 === 0) {
      ping = await pings();
      reserve = await reserves();
    } else {
      reserve = await reserves();
      ping = await pings();
    }
    if (pacer.engine !== engine) throw new Error(`engine ${pacer.engine}, want ${engine}`);
    console.log(JSON.stringify({ client: 'node', engine, round, ping_us: ping, reserve_us: reserve }));
  }
} finally {
  await pacer.close();
  await client.close();
}
