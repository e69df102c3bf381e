// The host's request budget, as the fixture needs it: the idle timeout and
// retry count from the environment (defaults 120000 ms and 5), and a count
// of calls so a test can see the pacer asked the host rather than itself.
import { emitParentNotice } from './parent-notice.js';

export interface UpstreamRequestBudget {
  idleTimeoutMs: number;
  totalTimeoutMs: number;
  maxRetries: number;
}

export let budgetCalls = 0;

function setting(name: string, fallback: number): number {
  const raw = process.env[name]?.trim();
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (Number.isInteger(value) && value >= 0) return value;
  emitParentNotice(`clodex: fixture budget ignores ${name}=${raw}`);
  return fallback;
}

export function upstreamRequestBudget(): UpstreamRequestBudget {
  budgetCalls += 1;
  return {
    idleTimeoutMs: setting('CLODEX_UPSTREAM_IDLE_TIMEOUT_MS', 120_000),
    totalTimeoutMs: 600_000,
    maxRetries: setting('CLODEX_UPSTREAM_MAX_RETRIES', 5),
  };
}

/** How the host reads the upstream's answer to a websocket upgrade: 101
 * switched protocols; 403 and 429 are the upstream's rate limit, retried
 * with backoff; anything else failed. */
export type UpgradeAnswer = 'upgraded' | 'rate-limited' | 'failed';

export function classifyUpgradeAnswer(status: number): UpgradeAnswer {
  if (status === 101) return 'upgraded';
  if (status === 403 || status === 429) return 'rate-limited';
  return 'failed';
}
