import type { ObjectStorageActivities } from '../../activities/objectstorage/activities';
import { familyActivities } from '../kit/proxies';

/** What the object storage workflows share: their activity proxies and the backend's name. */
export const { calls, bookkeeping, waits } = familyActivities<ObjectStorageActivities>();

/** Named in failure messages ("The object storage server did not complete this step: ..."). */
export const OBJECT_STORAGE_SERVER = 'object storage server';
