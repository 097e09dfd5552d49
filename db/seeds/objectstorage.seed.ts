import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { createBucket, createKey } from '../../domain/objectstorage/manage';
import { bucketPrefixOf } from '../../domain/objectstorage/names';
import { ObjectStorageProvisioner } from '../../domain/objectstorage/provisioner';
import { activeKeys, findBucket, findStorage, LIVE_STATUSES } from '../../domain/objectstorage/store';
import type { Providers } from '../../providers';

/** The seeded bucket of an account, and its object. */
export const demoBucketOf = (accountId: number) => `${bucketPrefixOf(accountId)}demo`;
const DEMO_OBJECT = 'hello.txt';

/**
 * Every live object storage service gets its place on its host's server (after a host restart the
 * server starts again here), and the seeded account's gets a real bucket `cus<n>-demo` holding
 * `hello.txt`, and an S3 key `demo` (its secret is sealed: presign URLs with it, or create a key of
 * your own to get a secret). Idempotent.
 */
export async function seedObjectStorage(db: Knex, providers: Providers, keyring: Keyring): Promise<void> {
  const services: Array<{ id: number; account_id: number; family: string; product: string }> = await db('services')
    .where({ family: 'objectstorage' })
    .whereIn('status', [...LIVE_STATUSES])
    .orderBy('id');
  const provisioner = new ObjectStorageProvisioner(db, providers.objectstorage, providers.hosts);
  for (const service of services) {
    const target = {
      id: Number(service.id),
      accountId: Number(service.account_id),
      family: 'objectstorage',
      productFamily: 'objectstorage',
      product: service.product,
      label: null,
      options: {},
      billingCycle: null,
    };
    await provisioner.provision(target);
    const storage = (await findStorage(db, target.id))!;
    const deps = { db, objectstorage: providers.objectstorage, keyring };
    const bucket = demoBucketOf(target.accountId);
    if (!(await findBucket(db, target.id, bucket))) await createBucket(deps, storage, bucket);
    await providers.objectstorage.putObject(target.id, bucket, DEMO_OBJECT, 'Hello from the seeded object storage.\n');
    if ((await activeKeys(db, target.id)).length === 0) await createKey(deps, storage, { name: 'demo', scope: null });
  }
}
