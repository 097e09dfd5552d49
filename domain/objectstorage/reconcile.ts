import type { Knex } from 'knex';
import type { ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { renderKeys } from './manage';
import { bucketsOf, forgetBucket, insertBucket, lockStorage, type StorageRow } from './store';

/**
 * Brings an account's bucket records in line with its host's server (SPEC: the bucket list
 * "includes buckets created directly over the S3 protocol"). Over S3 an account's keys may create
 * and delete buckets only under its prefix (their policy: providers/seaweedfs/seaweedfs.adapter.ts),
 * so every server bucket under the prefix is the account's: one not recorded is recorded
 * (`created_at` null, private), and a recorded one under the prefix that the server no longer has
 * is forgotten, after the keys' policies dropped it. Runs under the storage lock, like the API's changes.
 */
export async function reconcileBuckets(db: Knex, objectstorage: ObjectStorageProvider, storage: StorageRow): Promise<{ added: string[]; removed: string[] }> {
  const onServer = await objectstorage.listBuckets(storage.service_id, storage.bucket_prefix);
  return db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    const recorded = await bucketsOf(trx, locked.service_id);
    const serverNames = new Set(onServer.map((b) => b.name));
    const recordedNames = new Set(recorded.map((b) => b.name));
    const added: string[] = [];
    for (const bucket of onServer) {
      if (!recordedNames.has(bucket.name) && (await insertBucket(trx, { name: bucket.name, service_id: locked.service_id, created_at: null })))
        added.push(bucket.name);
    }
    // Read again under the lock: a bucket the API created since the listing is not "gone".
    const removed = recorded
      .filter((b) => b.name.startsWith(locked.bucket_prefix) && !serverNames.has(b.name) && b.recorded_at < new Date(Date.now() - 60_000))
      .map((b) => b.name);
    if (added.length > 0 || removed.length > 0) {
      const names = [...recordedNames, ...added].filter((n) => !removed.includes(n));
      await renderKeys(trx, { objectstorage }, locked, names);
      for (const name of removed) await forgetBucket(trx, locked.service_id, name);
    }
    return { added, removed };
  });
}
