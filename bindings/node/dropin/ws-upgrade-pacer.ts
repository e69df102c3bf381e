// The proxy's new-connection pacer, decided by the pacer core: this file
// replaces src/oauth/ws-upgrade-pacer.ts as it is. It hands the pacer the
// proxy's own notice channel and request budget, then exports the same
// names and shapes the module it replaces did (bindings/node/README.md,
// "Drop-in module").
import { emitParentNotice } from '../parent-notice.js';
import { upstreamRequestBudget } from '../upstream-retry.js';
import { useHost } from 'connpacer/compat';

useHost({ emitParentNotice, upstreamRequestBudget });

export * from 'connpacer/compat';
