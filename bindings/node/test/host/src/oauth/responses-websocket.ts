// The host's call site, as the fixture needs it: pace only a request that
// needs a new connection; after a wait, look again for a connection that
// freed up meanwhile and, if one did, hand the admission back.
import {
  sharedWsUpgradePacer,
  type ConnectionPacer,
  type UpgradeAdmission,
} from './ws-upgrade-pacer.js';
import { classifyUpgradeAnswer } from '../upstream-retry.js';

export type Opened =
  | { outcome: 'opened'; admission: UpgradeAdmission }
  | { outcome: 'reused'; admission: UpgradeAdmission }
  | { outcome: 'refused'; retryAfterSeconds: number };

export async function openUpstream(options: {
  pacer?: ConnectionPacer;
  signal?: AbortSignal;
  idleConnectionAfterWait?: () => boolean;
}): Promise<Opened> {
  const admission = await (options.pacer ?? sharedWsUpgradePacer()).admit(options.signal);
  if (admission.kind === 'refused') {
    return { outcome: 'refused', retryAfterSeconds: admission.retryAfterSeconds };
  }
  if ((admission.queued ?? admission.waitedMs > 0) && options.idleConnectionAfterWait?.() === true) {
    admission.release?.();
    return { outcome: 'reused', admission };
  }
  return { outcome: 'opened', admission };
}

export type Upgraded =
  | { outcome: 'upgraded' }
  | { outcome: 'rate-limited' | 'failed'; status: number }
  | Extract<Opened, { outcome: 'refused' }>;

/** Opens a websocket to the upstream: the paced call site above, then the
 * upgrade request (`upgrade`, the network call), whose answer the host
 * classifies and reports to its pacer (adaptive pacing follows the
 * upstream's rate limit; without adaptive settings the reports change
 * nothing). */
export async function upgradeUpstream(
  options: { pacer?: ConnectionPacer; signal?: AbortSignal; upgrade: () => Promise<{ status: number }> },
): Promise<Upgraded> {
  const pacer = options.pacer ?? sharedWsUpgradePacer();
  const opened = await openUpstream({ pacer, signal: options.signal });
  if (opened.outcome === 'refused') return opened;
  const { status } = await options.upgrade();
  switch (classifyUpgradeAnswer(status)) {
    case 'rate-limited':
      void pacer.observe?.('throttled');
      return { outcome: 'rate-limited', status };
    case 'upgraded':
      void pacer.observe?.('opened');
      return { outcome: 'upgraded' };
    default:
      return { outcome: 'failed', status };
  }
}
