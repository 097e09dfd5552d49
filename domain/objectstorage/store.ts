import type { Knex } from 'knex';
import { conflict, notFound } from '../errors';
import { LIVE_STATUSES } from '../per-account';

export { LIVE_STATUSES };
import { whereVisibleService, type Principal } from '../principal';
import type { ServiceRow } from '../services';

/**
 * The object storage family's control-plane records, and the only SQL on its tables
 * (db/migrations/20261125000900_objectstorage.ts). An account's object storage is its live
 * `objectstorage` service; changes to its buckets and keys hold its row (`lockStorage`) while the
 * server applies them, so the buckets a key's policy names are always the recorded ones.
 */
export interface StorageRow {
  service_id: number;
  account_id: number;
  s3_endpoint: string;
  region: string;
  bucket_prefix: string;
  host: string | null;
  terminated_at: Date | null;
  created_at: Date;
}

export interface BucketRow {
  name: string;
  service_id: number;
  access: 'private' | 'public';
  public_url: string | null;
  created_at: Date | null;
  recorded_at: Date;
}

export interface KeyRow {
  id: number;
  service_id: number;
  name: string;
  access_key_id: string | null;
  secret_sealed: string | null;
  scope: string | null;
  created_at: Date;
  deleted_at: Date | null;
}

export interface StorageTarget {
  service: ServiceRow;
  storage: StorageRow;
}

const num = <T extends { service_id: number }>(row: T | undefined): T | null => (row ? { ...row, service_id: Number(row.service_id) } : null);

export interface VisibleStorage {
  service: ServiceRow;
  /** Null while the order that creates it is still building it. */
  storage: StorageRow | null;
}

/**
 * The account's object storage, when the principal may see its service (404 otherwise): its newest
 * `objectstorage` service that is live, or terminated with its buckets still kept (the retention).
 * An account holds one live at a time (orders refuse a second), so a live one is the newest.
 */
export async function findVisibleStorage(db: Knex, principal: Principal): Promise<VisibleStorage> {
  const qb = db('services')
    .leftJoin('objectstorage_services', 'objectstorage_services.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'objectstorage' })
    .where((w) => w.whereIn('services.status', [...LIVE_STATUSES]).orWhereNotNull('objectstorage_services.service_id'))
    .orderBy('services.id', 'desc')
    .select('services.*', 'objectstorage_services.service_id as storage_id');
  whereVisibleService(qb, principal, 'services.id');
  const row: (ServiceRow & { storage_id: number | null }) | undefined = await qb.first();
  if (!row) throw notFound('object storage');
  const { storage_id, ...service } = row;
  return { service, storage: storage_id === null ? null : await findStorage(db, service.id) };
}

/** The storage of a visible object storage, or 409 while its order is still building it. */
export function requireStorage(found: VisibleStorage): StorageTarget {
  if (!found.storage) throw conflict('The object storage of this account is still being set up; try again in a few seconds.');
  return { service: found.service, storage: found.storage };
}

export async function findStorage(db: Knex | Knex.Transaction, serviceId: number): Promise<StorageRow | null> {
  const row = await db('objectstorage_services').where({ service_id: serviceId }).first();
  return row ? { ...row, service_id: Number(row.service_id), account_id: Number(row.account_id) } : null;
}

/** The storage row, locked until the transaction ends: one change of buckets or keys per account at a time. */
export async function lockStorage(trx: Knex.Transaction, serviceId: number): Promise<StorageRow> {
  const row = await trx('objectstorage_services').where({ service_id: serviceId }).forUpdate().first();
  if (!row) throw notFound('object storage');
  return { ...row, service_id: Number(row.service_id), account_id: Number(row.account_id) };
}

export async function recordStorage(db: Knex, row: Omit<StorageRow, 'created_at' | 'terminated_at'>): Promise<void> {
  await db('objectstorage_services').insert(row).onConflict('service_id').merge(['s3_endpoint', 'region', 'host']);
}

/** Every bucket of the service, by name. */
export async function bucketsOf(db: Knex | Knex.Transaction, serviceId: number): Promise<BucketRow[]> {
  const rows: BucketRow[] = await db('objectstorage_buckets').where({ service_id: serviceId }).orderBy('name');
  return rows.map((r) => num(r)!);
}

export async function findBucket(db: Knex | Knex.Transaction, serviceId: number, name: string): Promise<BucketRow | null> {
  return num(await db('objectstorage_buckets').where({ service_id: serviceId, name }).first());
}

/** The bucket of the service, or 404 (a bucket of another account looks the same as none). */
export async function requireBucket(db: Knex | Knex.Transaction, serviceId: number, name: string): Promise<BucketRow> {
  const row = await findBucket(db, serviceId, name);
  if (!row) throw notFound('bucket');
  return row;
}

export async function countBuckets(db: Knex | Knex.Transaction, serviceId: number): Promise<number> {
  const [{ n }] = await db('objectstorage_buckets').where({ service_id: serviceId }).count({ n: '*' });
  return Number(n);
}

/** Records a bucket; false when the name is taken (in any account). */
export async function insertBucket(trx: Knex.Transaction, row: { name: string; service_id: number; created_at: Date | null }): Promise<boolean> {
  const inserted = await trx('objectstorage_buckets')
    .insert({ ...row, created_at: row.created_at ?? null })
    .onConflict('name')
    .ignore()
    .returning('name');
  return inserted.length > 0;
}

export async function forgetBucket(trx: Knex | Knex.Transaction, serviceId: number, name: string): Promise<void> {
  await trx('objectstorage_buckets').where({ service_id: serviceId, name }).delete();
  await trx('objectstorage_counter_readings').where({ service_id: serviceId, bucket: name }).delete();
}

export async function setBucketAccess(
  trx: Knex.Transaction,
  serviceId: number,
  name: string,
  access: 'private' | 'public',
  publicUrl: string | null,
): Promise<BucketRow> {
  await trx('objectstorage_buckets').where({ service_id: serviceId, name }).update({ access, public_url: publicUrl });
  return (await findBucket(trx, serviceId, name))!;
}

/** Active keys of the service, oldest first. */
export async function activeKeys(db: Knex | Knex.Transaction, serviceId: number): Promise<KeyRow[]> {
  const rows: KeyRow[] = await db('objectstorage_keys').where({ service_id: serviceId }).whereNull('deleted_at').whereNotNull('access_key_id').orderBy('id');
  return rows.map((r) => ({ ...num(r)!, id: Number(r.id) }));
}

export async function findActiveKey(db: Knex | Knex.Transaction, serviceId: number, id: number): Promise<KeyRow | null> {
  const row = await db('objectstorage_keys').where({ service_id: serviceId, id }).whereNull('deleted_at').whereNotNull('access_key_id').first();
  return row ? { ...num(row)!, id: Number(row.id) } : null;
}

/** A keyset page of the service's active keys, newest first. */
export function activeKeysQuery(db: Knex, serviceId: number): Knex.QueryBuilder {
  return db('objectstorage_keys').where({ service_id: serviceId }).whereNull('deleted_at').whereNotNull('access_key_id');
}

/** The services of live accounts whose storage is recorded; with `host`, those placed there (a host keeps its own). */
export async function storagesToKeep(db: Knex, host?: string): Promise<StorageRow[]> {
  const query = db('objectstorage_services')
    .join('services', 'services.id', 'objectstorage_services.service_id')
    .whereIn('services.status', [...LIVE_STATUSES])
    .orderBy('objectstorage_services.service_id')
    .select('objectstorage_services.*');
  if (host !== undefined) query.join('placements', 'placements.service_id', 'objectstorage_services.service_id').where('placements.host', host);
  const rows: StorageRow[] = await query;
  return rows.map((r) => ({ ...r, service_id: Number(r.service_id), account_id: Number(r.account_id) }));
}

/** The storages terminated before `before` (their buckets are deleted: the retention sweep). */
export async function storagesPastRetention(db: Knex, before: Date, host?: string): Promise<StorageRow[]> {
  const query = db('objectstorage_services').where('objectstorage_services.terminated_at', '<', before).select('objectstorage_services.*');
  // By the host recorded at provisioning: the placement is released at termination.
  if (host !== undefined) query.where('objectstorage_services.host', host);
  const rows: StorageRow[] = await query;
  return rows.map((r) => ({ ...r, service_id: Number(r.service_id), account_id: Number(r.account_id) }));
}

/** Marks the storage terminated (its keys are deleted now, its buckets after the retention); the first time counts. */
export async function markTerminated(db: Knex, serviceId: number): Promise<void> {
  await db('objectstorage_services').where({ service_id: serviceId }).whereNull('terminated_at').update({ terminated_at: db.fn.now() });
}

export async function forgetStorage(db: Knex, serviceId: number): Promise<void> {
  await db('objectstorage_services').where({ service_id: serviceId }).delete();
}

export async function markKeyDeleted(db: Knex | Knex.Transaction, id: number): Promise<void> {
  await db('objectstorage_keys').where({ id }).whereNull('deleted_at').update({ deleted_at: db.fn.now() });
}
