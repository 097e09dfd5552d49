import { createObjectStorageActivities } from '../activities/objectstorage/activities';
import { objectStorageDevRoutes } from '../api/routes/objectstorage/dev.routes';
import { objectStorageRoutes } from '../api/routes/objectstorage/routes';
import { seedObjectStorage } from '../db/seeds/objectstorage.seed';
import { ObjectStorageKeeper, ObjectStorageSnapshots } from '../domain/objectstorage/keeper';
import { ObjectStorageProvisioner } from '../domain/objectstorage/provisioner';
import { objectStorageBackend } from '../providers/objectstorage.backend';
import { defineFamily } from './manifest';

/**
 * Object storage (SPEC "Object storage"): one SeaweedFS per host, the accounts placed there kept
 * apart by their keys' policies; buckets and keys are synchronous writes, emptying a bucket the
 * `objectstorage.empty` workflow (docs/objectstorage.md).
 */
export const objectStorageFamily = defineFamily({
  name: 'objectstorage',
  routes: objectStorageRoutes,
  devRoutes: objectStorageDevRoutes,
  backend: objectStorageBackend,
  provisioner: ({ db, providers }) => new ObjectStorageProvisioner(db, providers.objectstorage, providers.hosts),
  activities: (deps) => createObjectStorageActivities(deps),
  workflows: 'workflows/objectstorage',
  // The host's server runs, buckets made over S3 are found, and usage is snapshotted: for the accounts placed on this host.
  keepers: ({ db, providers, logger, config }) => {
    const host = providers.hosts.places('objectstorage') && providers.hosts.self ? { host: providers.hosts.self } : {};
    const common = { db, objectstorage: providers.objectstorage, local: providers.local.objectstorage ?? providers.objectstorage, logger, ...host };
    return [
      new ObjectStorageKeeper({ ...common, intervalMs: config.OBJECTSTORAGE_RECONCILE_INTERVAL, retentionMs: config.OBJECTSTORAGE_RETENTION }),
      new ObjectStorageSnapshots({ ...common, intervalMs: config.OBJECTSTORAGE_SNAPSHOT_INTERVAL }),
    ];
  },
  seed: ({ db, providers, keyring }) => seedObjectStorage(db, providers, keyring),
  config: [
    'OBJECTSTORAGE_BACKEND',
    'OBJECTSTORAGE_DATA_DIR',
    'OBJECTSTORAGE_BIND_ADDRESS',
    'OBJECTSTORAGE_S3_PORT',
    'OBJECTSTORAGE_PUBLIC_ENDPOINT',
    'OBJECTSTORAGE_REGION',
    'OBJECTSTORAGE_RECONCILE_INTERVAL',
    'OBJECTSTORAGE_SNAPSHOT_INTERVAL',
    'OBJECTSTORAGE_RETENTION',
  ],
});
