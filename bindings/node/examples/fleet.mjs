// Three proxies or three hundred: every process that calls this with the same
// key and configuration paces against one bucket in Redis. Asks for four new
// connections (burst 1: the second and third wait about 1 s and 2 s, the
// fourth is refused). Run: REDIS_URL=redis://127.0.0.1:6379 node examples/fleet.mjs
import { RedisPacer, refusalResponse } from 'connpacer';

const pacer = await RedisPacer.connect({
  url: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
  key: 'pacer:example',
  ratePerMinute: 60,
  burst: 1,
  idleTimeoutMs: 30000,
  maxRetries: 3,
  onFailure: 'local', // when Redis fails: pace in-process at rate/fleetSize
  fleetSize: 3,
});
const outcomes = await Promise.all([pacer.admit(), pacer.admit(), pacer.admit(), pacer.admit()]);
for (const [i, outcome] of outcomes.entries()) {
  const decidedBy = outcome.fallback ? `fallback ${outcome.fallback}` : `engine ${pacer.engine}`;
  if (outcome.kind === 'admitted') {
    console.log(`#${i} admitted after ${outcome.waitedMs} ms (${decidedBy})`);
  } else {
    const response = refusalResponse(outcome.retryAfterSeconds);
    console.log(`#${i} refused: ${response.status}, retry-after ${response.headers['retry-after']}`);
  }
}
await pacer.close();
