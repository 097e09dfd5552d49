import { storagesToKeep } from '../../../domain/objectstorage/store';
import { takeSnapshot, utcDay } from '../../../domain/objectstorage/usage';
import { defineDevRoute } from '../../route';

/**
 * Local stand-in (CLOUD_DEV_ENDPOINTS=1, loopback only; DECISIONS "Object storage"): takes today's
 * usage snapshot of every object storage now, replacing today's points, instead of waiting for the
 * hosts' OBJECTSTORAGE_SNAPSHOT_INTERVAL.
 */
export const objectStorageDevRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/objectstorage/snapshot',
    operationId: 'devObjectStorageSnapshot',
    summary: "Take today's object storage usage snapshot now",
    responses: [{ status: 200, description: 'The date of the snapshot and the services it covered' }],
    async handler({ deps }) {
      const storages = await storagesToKeep(deps.db);
      for (const storage of storages) await takeSnapshot(deps.db, deps.providers.objectstorage, storage);
      return { body: { object: 'objectstorage_snapshot', date: utcDay(), services: storages.map((s) => `svc_${s.service_id}`) } };
    },
  }),
];
