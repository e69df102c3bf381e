// The host's call site, as the fixture needs it: pace only a request that
// needs a new connection; after a wait, look again for a connection that
// freed up meanwhile and, if one did, hand the admission back.
import {
  sharedWsUpgradePacer,
  type ConnectionPacer,
  type UpgradeAdmission,
} from './ws-upgrade-pacer.js';

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
