import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import type { ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { releaseService } from '../hosts/directory';
import { reconcileBuckets } from './reconcile';
import { bucketsOf, forgetBucket, forgetStorage, storagesPastRetention, storagesToKeep } from './store';
import { takeSnapshot } from './usage';

interface KeeperDeps {
  db: Knex;
  objectstorage: ObjectStorageProvider;
  /**
   * The host's own adapter, not routed by placement (a terminated service's placement is released
   * while its buckets wait out the retention); the routed provider when the family is on no host.
   */
  local: ObjectStorageProvider;
  logger: Logger;
  /** The host whose accounts it keeps (its own); every recorded one when object storage runs on no host (the simulator). */
  host?: string;
}

/**
 * Keeps the object storage of the accounts placed on this host, every OBJECTSTORAGE_RECONCILE_INTERVAL:
 * - the host's SeaweedFS runs (`open` starts it when it does not: after a host restart or a crash);
 * - buckets created or deleted directly over S3 are found (reconcile.ts);
 * - the buckets of services terminated longer than OBJECTSTORAGE_RETENTION ago are deleted with
 *   their contents, and the account's place on the server is forgotten.
 */
export class ObjectStorageKeeper extends PeriodicService {
  readonly name = 'objectstorage-keeper';

  constructor(private readonly deps: KeeperDeps & { intervalMs: number; retentionMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    const { db, objectstorage, local, logger, host } = this.deps;
    try {
      for (const storage of await storagesToKeep(db, host)) {
        try {
          await objectstorage.open(storage.service_id);
          const { added, removed } = await reconcileBuckets(db, objectstorage, storage);
          if (added.length || removed.length) logger.info({ service: `svc_${storage.service_id}`, added, removed }, 'buckets made or deleted over S3 recorded');
        } catch (err) {
          logger.warn({ service: `svc_${storage.service_id}`, err: (err as Error).message }, 'object storage could not be kept; next pass retries');
        }
      }
      for (const storage of await storagesPastRetention(db, new Date(Date.now() - this.deps.retentionMs), host)) {
        try {
          for (const bucket of await bucketsOf(db, storage.service_id)) {
            await local.deleteBucket(storage.service_id, bucket.name, { purge: true });
            await forgetBucket(db, storage.service_id, bucket.name);
          }
          await local.close(storage.service_id);
          await forgetStorage(db, storage.service_id);
          await releaseService(db, storage.service_id);
          logger.info({ service: `svc_${storage.service_id}` }, 'object storage of a terminated service deleted after its retention');
        } catch (err) {
          logger.warn(
            { service: `svc_${storage.service_id}`, err: (err as Error).message },
            'buckets past their retention could not be deleted; next pass retries',
          );
        }
      }
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'object storage keeper pass failed; next pass retries');
    }
  }
}

/** Retakes today's usage snapshot of every account placed on this host, every OBJECTSTORAGE_SNAPSHOT_INTERVAL (and at start). */
export class ObjectStorageSnapshots extends PeriodicService {
  readonly name = 'objectstorage-snapshots';

  constructor(private readonly deps: KeeperDeps & { intervalMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    const { db, objectstorage, logger, host } = this.deps;
    try {
      for (const storage of await storagesToKeep(db, host)) {
        try {
          await takeSnapshot(db, objectstorage, storage);
        } catch (err) {
          logger.warn({ service: `svc_${storage.service_id}`, err: (err as Error).message }, 'usage snapshot failed; next pass retries');
        }
      }
    } catch (err) {
      logger.warn({ err: (err as Error).message }, 'usage snapshot pass failed; next pass retries');
    }
  }
}
