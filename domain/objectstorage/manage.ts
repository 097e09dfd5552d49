import { GetObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { BackendRefusedError } from '../../providers/errors';
import type { KeyAccess, ObjectStorageProvider } from '../../providers/objectstorage.provider';
import { conflict, notFound, quotaExceeded, validationFailed } from '../errors';
import { bucketNameProblem, prefixOwner } from './names';
import {
  activeKeys,
  bucketsOf,
  countBuckets,
  findActiveKey,
  forgetBucket,
  insertBucket,
  lockStorage,
  markKeyDeleted,
  requireBucket,
  setBucketAccess,
  type BucketRow,
  type KeyRow,
  type StorageRow,
} from './store';

/**
 * Changes to an account's buckets and keys (SPEC "Object storage"), each under the account's storage
 * row lock and applied on the server before the answer (synchronous writes). The rule that ties them:
 * every key's policy names exactly the account's recorded buckets (its scope bucket, or all of them),
 * re-rendered whenever the set changes, and a bucket leaves the policies before its name is free
 * for another account.
 */
export const MAX_BUCKETS = 100;
export const MAX_KEYS = 20;
/** Sealing purpose of S3 secrets at rest (they sign presigned URLs). */
export const S3_SECRET_PURPOSE = 'objectstorage-key-secret';

export interface ManageDeps {
  db: Knex;
  objectstorage: ObjectStorageProvider;
  keyring: Keyring;
}

const keyName = (id: number) => `s3k_${id}`;

/** What key `key` may reach given the account's buckets. */
export function accessOf(storage: StorageRow, key: Pick<KeyRow, 'scope'>, buckets: readonly string[]): KeyAccess {
  return { scope: key.scope, prefix: storage.bucket_prefix, buckets: [...buckets] };
}

/** Re-renders every active key's policy for the bucket set `buckets` (the lock is held by the caller). */
export async function renderKeys(
  trx: Knex | Knex.Transaction,
  deps: Pick<ManageDeps, 'objectstorage'>,
  storage: StorageRow,
  buckets: readonly string[],
): Promise<void> {
  for (const key of await activeKeys(trx, storage.service_id)) {
    await deps.objectstorage.setKeyAccess(storage.service_id, keyName(key.id), accessOf(storage, key, buckets));
  }
}

export async function createBucket(deps: ManageDeps, storage: StorageRow, name: string): Promise<BucketRow> {
  const problem = bucketNameProblem(name);
  if (problem) throw validationFailed([{ param: 'name', message: problem }]);
  const owner = prefixOwner(name);
  if (owner !== null && owner !== storage.account_id) {
    throw validationFailed([
      { param: 'name', message: `names beginning with cus${owner}- belong to another account; this account's prefix is ${storage.bucket_prefix}` },
    ]);
  }
  return deps.db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    if ((await countBuckets(trx, locked.service_id)) >= MAX_BUCKETS) throw quotaExceeded(`An account holds at most ${MAX_BUCKETS} buckets.`);
    if (!(await insertBucket(trx, { name, service_id: locked.service_id, created_at: new Date() }))) {
      throw conflict(`A bucket named ${name} exists already.`, 'already_exists');
    }
    let made = false;
    try {
      await deps.objectstorage.createBucket(locked.service_id, name);
      made = true;
    } catch (err) {
      // Made over S3 by one of this account's keys and not found by the reconcile pass yet: it is this bucket.
      const ours = err instanceof BackendRefusedError && err.code === 'already_exists' && name.startsWith(locked.bucket_prefix);
      if (!ours) {
        if (err instanceof BackendRefusedError && err.code === 'already_exists') throw conflict(`A bucket named ${name} exists already.`, 'already_exists');
        throw err;
      }
    }
    try {
      await renderKeys(
        trx,
        deps,
        locked,
        (await bucketsOf(trx, locked.service_id)).map((b) => b.name),
      );
    } catch (err) {
      // The record rolls back: the bucket made for it goes too (it is empty), so nothing is left applied.
      if (made) await deps.objectstorage.deleteBucket(locked.service_id, name, { purge: false }).catch(() => undefined);
      throw err;
    }
    return requireBucket(trx, locked.service_id, name);
  });
}

export async function deleteBucket(deps: ManageDeps, storage: StorageRow, name: string, purge: boolean): Promise<void> {
  await deps.db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    await requireBucket(trx, locked.service_id, name);
    const outcome = await deps.objectstorage.deleteBucket(locked.service_id, name, { purge });
    if (outcome === 'not_empty') {
      throw conflict(`The bucket ${name} holds objects; empty it first, or delete it with purge=true to delete them too.`, 'bucket_not_empty');
    }
    // Out of every policy before the name is free for another account.
    const rest = (await bucketsOf(trx, locked.service_id)).map((b) => b.name).filter((b) => b !== name);
    await renderKeys(trx, deps, locked, rest);
    await forgetBucket(trx, locked.service_id, name);
  });
}

export async function setAccess(deps: ManageDeps, storage: StorageRow, name: string, access: 'private' | 'public'): Promise<BucketRow> {
  return deps.db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    const bucket = await requireBucket(trx, locked.service_id, name);
    await deps.objectstorage.setPublic(locked.service_id, name, access === 'public');
    // Minted at the first publication and kept: republishing reuses it.
    const publicUrl = bucket.public_url ?? (access === 'public' ? `${locked.s3_endpoint}/${name}/` : null);
    return setBucketAccess(trx, locked.service_id, name, access, publicUrl);
  });
}

export async function createKey(
  deps: ManageDeps,
  storage: StorageRow,
  input: { name: string; scope: string | null },
): Promise<{ key: KeyRow; secret: string }> {
  return deps.db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    if ((await activeKeys(trx, locked.service_id)).length >= MAX_KEYS) throw quotaExceeded(`An account holds at most ${MAX_KEYS} S3 keys.`);
    const buckets = (await bucketsOf(trx, locked.service_id)).map((b) => b.name);
    if (input.scope !== null && !buckets.includes(input.scope)) {
      throw validationFailed([{ param: 'scope', message: `is not a bucket of this account: ${input.scope}` }]);
    }
    const [row] = await trx('objectstorage_keys').insert({ service_id: locked.service_id, name: input.name, scope: input.scope }).returning('id');
    const id = Number(row.id);
    const issued = await deps.objectstorage.createKey(locked.service_id, keyName(id), accessOf(locked, { scope: input.scope }, buckets));
    await trx('objectstorage_keys')
      .where({ id })
      .update({ access_key_id: issued.accessKeyId, secret_sealed: deps.keyring.encrypt(S3_SECRET_PURPOSE, issued.secretAccessKey) });
    const key = (await findActiveKey(trx, locked.service_id, id))!;
    return { key, secret: issued.secretAccessKey };
  });
}

export async function deleteKey(deps: ManageDeps, storage: StorageRow, id: number): Promise<void> {
  await deps.db.transaction(async (trx) => {
    const locked = await lockStorage(trx, storage.service_id);
    const key = await findActiveKey(trx, locked.service_id, id);
    if (!key) throw notFound('S3 key');
    await deps.objectstorage.deleteKey(locked.service_id, keyName(key.id));
    await markKeyDeleted(trx, key.id);
  });
}

/** Deletes every key of the storage on the server (termination); the records stay, marked deleted. */
export async function deleteAllKeys(deps: Pick<ManageDeps, 'db' | 'objectstorage'>, storage: StorageRow): Promise<void> {
  for (const key of await activeKeys(deps.db, storage.service_id)) {
    await deps.objectstorage.deleteKey(storage.service_id, keyName(key.id));
    await markKeyDeleted(deps.db, key.id);
  }
}

/**
 * A presigned URL for `key` in `bucket`, signed (AWS SigV4, query form) with the secret of the
 * account's S3 key `keyId`: it works with no other credential until it expires, and only as far as
 * that key's policy reaches; deleting the key refuses it at once (the server no longer knows the key).
 */
export async function presign(
  deps: Pick<ManageDeps, 'db' | 'keyring'>,
  storage: StorageRow,
  input: { bucket: string; key: string; method: 'GET' | 'PUT'; keyId: number | null; ttlSeconds: number },
): Promise<{ url: string; expiresAt: Date }> {
  const signer = input.keyId === null ? null : await findActiveKey(deps.db, storage.service_id, input.keyId);
  if (!signer?.secret_sealed || !signer.access_key_id) {
    throw validationFailed([{ param: 'key_id', message: 'must name an active S3 key of this account' }]);
  }
  await requireBucket(deps.db, storage.service_id, input.bucket);
  const client = new S3Client({
    endpoint: storage.s3_endpoint,
    region: storage.region,
    forcePathStyle: true,
    credentials: { accessKeyId: signer.access_key_id, secretAccessKey: deps.keyring.decrypt(S3_SECRET_PURPOSE, signer.secret_sealed) },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  const now = new Date();
  const command =
    input.method === 'GET' ? new GetObjectCommand({ Bucket: input.bucket, Key: input.key }) : new PutObjectCommand({ Bucket: input.bucket, Key: input.key });
  const url = await getSignedUrl(client, command, { expiresIn: input.ttlSeconds, signingDate: now });
  client.destroy();
  return { url, expiresAt: new Date(Math.floor(now.getTime() / 1000) * 1000 + input.ttlSeconds * 1000) };
}
