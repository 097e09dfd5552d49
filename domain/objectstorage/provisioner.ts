import type { Knex } from 'knex';
import type { HostDirectory } from '../../providers/host-routing';
import type { ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { DomainError } from '../errors';
import { placeIfHosted } from '../hosts/directory';
import type { PreparedOrder, ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { deleteAllKeys } from './manage';
import { bucketPrefixOf } from './names';
import { findStorage, LIVE_STATUSES, markTerminated, recordStorage } from './store';

/**
 * Builds an ordered object storage: the account's place on its host's S3 server and the record of
 * where its buckets are reached. One per account: a second order while one is live (or ordered and
 * not paid yet) is refused before billing. Termination deletes the keys at once (every request and
 * presigned URL signed with them is refused); the buckets are kept for OBJECTSTORAGE_RETENTION, then
 * deleted by the host's keeper (domain/objectstorage/keeper.ts).
 */
export class ObjectStorageProvisioner implements ServiceProvisioner {
  constructor(
    private readonly db: Knex,
    private readonly objectstorage: ObjectStorageProvider,
    private readonly hosts: HostDirectory,
  ) {}

  async prepareOrder(_db: Knex, options: Record<string, unknown>, account: { id: number }): Promise<PreparedOrder> {
    await refuseSecond(this.db, account.id);
    return {
      options,
      hold: async (trx) => {
        // One order of the account at a time gets here: the second waits, then sees the first.
        await trx('accounts').where({ id: account.id }).forUpdate().first();
        await refuseSecond(trx, account.id);
      },
    };
  }

  async provision(service: ProvisionTarget): Promise<void> {
    const host = await placeIfHosted(this.db, this.hosts, 'objectstorage', service.id);
    const endpoint = await this.objectstorage.open(service.id);
    await recordStorage(this.db, {
      service_id: service.id,
      account_id: service.accountId,
      s3_endpoint: endpoint.s3Endpoint,
      region: endpoint.region,
      bucket_prefix: bucketPrefixOf(service.accountId),
      host,
    });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    return (await findStorage(this.db, service.id)) !== null;
  }

  async deprovision(service: ProvisionTarget): Promise<void> {
    const storage = await findStorage(this.db, service.id);
    if (!storage) return;
    await deleteAllKeys({ db: this.db, objectstorage: this.objectstorage }, storage);
    await markTerminated(this.db, service.id);
  }
}

/** 409 when the account holds a live object storage, or has ordered one that is not paid yet. */
async function refuseSecond(db: Knex | Knex.Transaction, accountId: number): Promise<void> {
  const live = await db('services')
    .where({ account_id: accountId, family: 'objectstorage' })
    .whereIn('status', [...LIVE_STATUSES])
    .first('id');
  const ordered = await db('orders')
    .join('products', 'products.id', 'orders.product_id')
    .where({ 'orders.account_id': accountId, 'orders.status': 'pending', 'products.product_family': 'objectstorage' })
    .first('orders.id');
  if (live || ordered) {
    throw new DomainError(
      409,
      'invalid_request_error',
      'already_exists',
      'This account has an object storage already (one per account); its buckets and keys are under /v1/object-storage.',
      'product',
    );
  }
}
