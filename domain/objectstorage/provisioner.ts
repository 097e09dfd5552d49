import type { Knex } from 'knex';
import type { HostDirectory } from '../../providers/host-routing';
import type { ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { placeIfHosted } from '../hosts/directory';
import { onePerAccount } from '../per-account';
import type { ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { deleteAllKeys } from './manage';
import { bucketPrefixOf } from './names';
import { findStorage, markTerminated, recordStorage } from './store';

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

  /** One per account (domain/per-account.ts). */
  readonly prepareOrder = onePerAccount('objectstorage', 'an object storage (its buckets and keys are under /v1/object-storage)');

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
