import { proxyActivities } from '@temporalio/workflow';
import type { WordpressActivities } from '../../activities/wordpress/activities';
import { familyActivities } from '../kit/proxies';

/** What the hosted sites' workflows share: their activity proxies and the backend's name. */
export const { calls, bookkeeping, waits } = familyActivities<WordpressActivities>();

/**
 * Work on a site that takes as long as the site is big (a backup's dump and archive, a restore):
 * it heartbeats while it works, so a lost worker is noticed in seconds and the work runs again on
 * another (each such activity is idempotent by the backup's id); a few attempts in all.
 */
export const long = proxyActivities<WordpressActivities>({
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 3 },
});

/** Named in failure messages ("The site host did not complete this step: ..."). */
export const SITE_HOST = 'site host';
