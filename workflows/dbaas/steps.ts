import type { DbaasActivities } from '../../activities/dbaas/activities';
import { familyActivities } from '../kit/proxies';

/** What the DBaaS workflows share: their activity proxies and the backend's name. */
export const { calls, bookkeeping, waits } = familyActivities<DbaasActivities>();

/** Named in failure messages ("The database instance did not complete this step: ..."). */
export const DATABASE_INSTANCE = 'database instance';
