// Asks for three new connections through one pacer (burst 1, so the second
// and third wait about 1 s and 2 s), then answers a refusal the way a proxy
// would. Run: node examples/admit.mjs
import { Pacer, refusalResponse } from 'connpacer';

const pacer = new Pacer({ ratePerMinute: 60, burst: 1, idleTimeoutMs: 30000, maxRetries: 3 });
const started = performance.now();
const outcomes = await Promise.all([pacer.admit(), pacer.admit(), pacer.admit(), pacer.admit()]);
for (const [i, outcome] of outcomes.entries()) {
  if (outcome.kind === 'admitted') {
    console.log(`#${i} admitted after ${outcome.waitedMs} ms`);
  } else {
    const response = refusalResponse(outcome.retryAfterSeconds);
    console.log(`#${i} refused: ${response.status}, retry-after ${response.headers['retry-after']}`);
  }
}
console.log(`elapsed ${Math.round(performance.now() - started)} ms`);
