import { z } from 'zod';
import { parseNumericId } from '../../../common/ids';
import { insufficientScope, validationFailed } from '../../../domain/errors';
import { createBucket, createKey, deleteBucket, deleteKey, presign, setAccess } from '../../../domain/objectstorage/manage';
import {
  activeKeysQuery,
  countBuckets,
  findVisibleStorage,
  requireBucket,
  requireStorage,
  type BucketRow,
  type StorageTarget,
} from '../../../domain/objectstorage/store';
import { bucketSeries, latestSnapshot, utcDay } from '../../../domain/objectstorage/usage';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import type { AppDeps } from '../../deps';
import { keysetFetch, keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf, OperationSchema } from '../../schemas';
import { startOperation } from '../../start-operation';
import {
  bucketParams,
  BucketMetricsSchema,
  BucketSchema,
  CreateBucketBody,
  CreatedS3KeySchema,
  CreateKeyBody,
  DeleteObjectsBody,
  keyParams,
  ObjectsDeleteSchema,
  ObjectStorageSchema,
  PatchBucketBody,
  PresignBody,
  PresignedUrlSchema,
  presentBucket,
  presentKey,
  presentObject,
  presentStorage,
  S3KeySchema,
  S3ObjectSchema,
} from './schemas';

/**
 * Object storage (SPEC "Object storage", DECISIONS "Object storage"): the account's one object
 * storage service, its buckets and its S3 keys. Buckets and keys are changed on the account's S3
 * server before the answer (domain/objectstorage/manage.ts); emptying a bucket is the
 * `objectstorage.empty` operation. Reads of buckets and keys come from PostgreSQL (they answer
 * while the server is down); the object listing and every change need the server (503 otherwise).
 */
const TAG = 'Object storage';
const SERVER_DOWN = { status: 503, description: 'The object storage server does not answer (`backend_unavailable`); nothing was applied' };
const NOT_SET_UP = { status: 409, description: 'The object storage is still being set up, or its service is suspended (`conflict`)' };

/** The account's object storage with `capability`; for a change (`action`), one whose service takes changes (409 otherwise). */
async function storageTarget(deps: AppDeps, principal: Principal, capability: string, action?: string): Promise<StorageTarget> {
  return requireStorage(await findTarget(() => findVisibleStorage(deps.db, principal), { capability, action }));
}

const manageDeps = (deps: AppDeps) => ({ db: deps.db, objectstorage: deps.providers.objectstorage, keyring: deps.keyring });

/**
 * Bucket list order: newest first by the time it was recorded, then by name (unique). The cursor
 * keeps that time in microseconds, PostgreSQL's precision: buckets recorded in one transaction (the
 * reconcile pass) share it, and a millisecond cursor would skip some of them.
 */
const RECORDED_US = '(extract(epoch from recorded_at) * 1000000)::bigint';
const bucketListKey = (row: { recorded_us: number | string; name: string }) => `${String(row.recorded_us).padStart(17, '0')}|${row.name}`;

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const validDay = (s: string) => DAY.test(s) && !Number.isNaN(Date.parse(`${s}T00:00:00Z`)) && new Date(`${s}T00:00:00Z`).toISOString().startsWith(s);
const addDays = (day: string, n: number) => new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10);

export const objectStorageRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/object-storage',
    operationId: 'getObjectStorage',
    summary: "Get the account's object storage",
    description:
      "The account's one object storage (`404` when it has none, or the credential cannot see its service): where its buckets are reached over S3, the prefix its keys create buckets under, `bucket_count` now, and `storage_bytes` and `object_count` from the latest daily snapshot (null before the first).",
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    responses: [{ status: 200, description: 'The object storage', schema: ObjectStorageSchema }, NOT_SET_UP],
    async handler({ principal, deps }) {
      const { service, storage } = requireStorage(await findVisibleStorage(deps.db, principal));
      const [count, snapshot] = await Promise.all([countBuckets(deps.db, storage.service_id), latestSnapshot(deps.db, storage.service_id)]);
      return { body: presentStorage(service, storage, count, snapshot) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/object-storage/buckets',
    operationId: 'listBuckets',
    summary: 'List buckets',
    description:
      'Every bucket of the account, newest first, those created directly over S3 too (`created_at` null, `private`; listed within 10 seconds of their creation). Read from the control plane: answers while the server is down.',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of buckets', schema: listOf(BucketSchema, 'BucketList') }, NOT_SET_UP],
    async handler({ query, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'buckets');
      const page = await keysetFetch(
        async (after, take): Promise<Array<BucketRow & { recorded_us: string }>> => {
          const qb = deps
            .db('objectstorage_buckets')
            .where({ service_id: storage.service_id })
            .select('*', deps.db.raw(`${RECORDED_US} as recorded_us`));
          if (typeof after === 'string') {
            const m = /^(\d{17})\|(.*)$/.exec(after);
            if (!m) throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
            const [us, name] = [m[1].replace(/^0+(?=\d)/, ''), m[2]];
            qb.where((w) =>
              w.whereRaw(`${RECORDED_US} < ?::bigint`, [us]).orWhere((x) => x.whereRaw(`${RECORDED_US} = ?::bigint`, [us]).andWhere('name', '>', name)),
            );
          }
          return qb.orderByRaw(`${RECORDED_US} desc, name asc`).limit(take);
        },
        {
          cursors: deps.cursors,
          list: listFingerprint('object-storage.buckets', { service: storage.service_id }),
          limit: query.limit,
          cursor: query.cursor,
          keyOf: bucketListKey,
        },
      );
      return { body: listEnvelope(page.rows.map(presentBucket), page) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/object-storage/buckets',
    operationId: 'createBucket',
    summary: 'Create a bucket',
    description:
      "Body `name` (S3's rules; `400 validation_failed` otherwise, and for a name under another account's key prefix `cus<n>-`). Created private, on the server, before the answer. `409 already_exists` when the name is taken in any account; `429 quota_exceeded` past 100 buckets.",
    tag: TAG,
    scope: 'objectstorage:write',
    marks: ['R', 'I'],
    body: CreateBucketBody,
    exampleBody: { name: 'cus1-photos' },
    responses: [
      { status: 201, description: 'The bucket', schema: BucketSchema },
      { status: 409, description: 'The name is taken (`already_exists`), or the storage is not set up or suspended (`conflict`)' },
      { status: 429, description: '100 buckets already (`quota_exceeded`)' },
      SERVER_DOWN,
    ],
    async handler({ body, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'buckets', 'creating a bucket');
      return { status: 201, body: presentBucket(await createBucket(manageDeps(deps), storage, body.name)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/object-storage/buckets/{bucket}',
    operationId: 'getBucket',
    summary: 'Get a bucket',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    params: bucketParams,
    responses: [{ status: 200, description: 'The bucket', schema: BucketSchema }, NOT_SET_UP],
    async handler({ params, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'buckets');
      return { body: presentBucket(await requireBucket(deps.db, storage.service_id, params.bucket)) };
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/v1/object-storage/buckets/{bucket}',
    operationId: 'updateBucket',
    summary: "Change a bucket's access",
    description:
      '`access: public` lets anyone GET its objects at `public_url` + key (listing stays private) and mints `public_url` the first time; `private` takes that back (anonymous GETs are refused within 5 seconds) and keeps `public_url` for the next publication.',
    tag: TAG,
    scope: 'objectstorage:write',
    marks: ['R', 'I'],
    params: bucketParams,
    body: PatchBucketBody,
    exampleBody: { access: 'private' },
    responses: [{ status: 200, description: 'The bucket', schema: BucketSchema }, NOT_SET_UP, SERVER_DOWN],
    async handler({ params, body, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'buckets', "changing a bucket's access");
      return { body: presentBucket(await setAccess(manageDeps(deps), storage, params.bucket, body.access)) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/object-storage/buckets/{bucket}',
    operationId: 'deleteBucket',
    summary: 'Delete a bucket',
    description:
      'A bucket that holds objects is not deleted and nothing is touched (`409 bucket_not_empty`), unless `purge=true`: then it is deleted with all its contents, irreversibly. For a large bucket, `POST .../empty` first (an operation), then delete it.',
    tag: TAG,
    scope: 'objectstorage:write',
    marks: ['D', 'I'],
    params: bucketParams,
    query: z.object({
      purge: z.string().optional().meta({ description: '`true` deletes the objects too; `false` (the default) refuses a bucket with objects' }),
    }),
    responses: [
      { status: 204, description: 'Deleted' },
      { status: 409, description: 'The bucket holds objects (`bucket_not_empty`), or the storage is suspended (`conflict`)' },
      SERVER_DOWN,
    ],
    async handler({ params, query, principal, deps }) {
      if (query.purge !== undefined && query.purge !== 'true' && query.purge !== 'false') {
        throw validationFailed([{ param: 'purge', message: 'must be true or false' }]);
      }
      const { storage } = await storageTarget(deps, principal, 'buckets', 'deleting a bucket');
      await deleteBucket(manageDeps(deps), storage, params.bucket, query.purge === 'true');
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/object-storage/buckets/{bucket}/empty',
    operationId: 'emptyBucket',
    summary: 'Empty a bucket',
    description:
      'Deletes every object and keeps the bucket: the `objectstorage.empty` operation (resource `{object: "bucket", id: <name>}`), which deletes a page of up to 1000 objects at a time and ends with `result.deleted`, the count.',
    tag: TAG,
    scope: 'objectstorage:write',
    marks: ['D', 'A', 'I'],
    params: bucketParams,
    responses: [{ status: 202, description: 'The `objectstorage.empty` operation', schema: OperationSchema }, NOT_SET_UP],
    async handler({ params, principal, deps }) {
      const { storage, service } = await storageTarget(deps, principal, 'buckets', 'emptying a bucket');
      await requireBucket(deps.db, storage.service_id, params.bucket);
      return startOperation(deps, principal, {
        type: 'objectstorage.empty',
        input: { serviceId: storage.service_id, bucket: params.bucket },
        resource: { object: 'bucket', id: params.bucket },
        serviceId: service.id,
        initialStatus: 'running',
      });
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/object-storage/buckets/{bucket}/metrics',
    operationId: 'getBucketMetrics',
    summary: "A bucket's daily metrics",
    description:
      'Query `from` and `to`: UTC dates (`YYYY-MM-DD`), inclusive; default the 30 days to today; at most 366 days. One point per UTC day with a snapshot, ascending: `storage` bytes stored, `egress` bytes sent, `requests` S3 requests (today: so far). Series are empty until a snapshot exists.',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    params: bucketParams,
    query: z.object({
      from: z.string().optional().meta({ description: 'First UTC date (default: 29 days before `to`)' }),
      to: z.string().optional().meta({ description: 'Last UTC date (default: today)' }),
    }),
    responses: [{ status: 200, description: 'The metrics', schema: BucketMetricsSchema }, NOT_SET_UP],
    async handler({ params, query, principal, deps }) {
      const errors = [];
      if (query.to !== undefined && !validDay(query.to)) errors.push({ param: 'to', message: 'must be a date YYYY-MM-DD' });
      if (query.from !== undefined && !validDay(query.from)) errors.push({ param: 'from', message: 'must be a date YYYY-MM-DD' });
      if (errors.length) throw validationFailed(errors);
      const to = query.to ?? utcDay();
      const from = query.from ?? addDays(to, -29);
      if (from > to) throw validationFailed([{ param: 'from', message: 'must not be after `to`' }]);
      if (from < addDays(to, -365)) throw validationFailed([{ param: 'from', message: 'the range is at most 366 days' }]);
      const { storage } = await storageTarget(deps, principal, 'metrics');
      await requireBucket(deps.db, storage.service_id, params.bucket);
      const series = await bucketSeries(deps.db, storage.service_id, params.bucket, from, to);
      return { body: { object: 'bucket_metrics' as const, bucket: params.bucket, from, to, ...series } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/object-storage/buckets/{bucket}/objects',
    operationId: 'listBucketObjects',
    summary: "List a bucket's objects, one level at a time",
    description:
      'Objects and folders directly under `prefix` (default: the top), sorted by key. A folder (`is_folder: true`, key ending in `/`) is listed while an object lies under it; list it with `prefix` set to its key. The server sets the page (up to 1000 entries): `limit` is refused. Read from the server: `503` when it does not answer.',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    params: bucketParams,
    query: z.object({
      prefix: z.string().max(1024).optional().meta({ description: 'The folder to list (a key ending in `/`); default the top' }),
      cursor: z.string().max(4096).optional().meta({ description: 'The `next_cursor` of the previous page. Opaque.' }),
      limit: z.string().optional().meta({ description: 'Not accepted: the server sets the page size' }),
    }),
    responses: [{ status: 200, description: 'A page of entries', schema: listOf(S3ObjectSchema, 'S3ObjectList') }, NOT_SET_UP, SERVER_DOWN],
    async handler({ params, query, principal, deps }) {
      if (query.limit !== undefined)
        throw validationFailed([{ param: 'limit', message: 'is not accepted here: the server sets the page (up to 1000 entries)' }]);
      const { storage } = await storageTarget(deps, principal, 'buckets');
      await requireBucket(deps.db, storage.service_id, params.bucket);
      const prefix = query.prefix ?? '';
      const list = listFingerprint('object-storage.objects', { service: storage.service_id, bucket: params.bucket, prefix });
      let next: string | null = null;
      if (query.cursor !== undefined) {
        const decoded = deps.cursors.decode(list, query.cursor);
        if (typeof decoded !== 'string') throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
        next = decoded;
      }
      const page = await deps.providers.objectstorage.listObjects(storage.service_id, params.bucket, { prefix, next });
      return {
        body: listEnvelope(page.entries.map(presentObject), {
          hasMore: page.next !== null,
          nextCursor: page.next === null ? null : deps.cursors.encode(list, page.next),
        }),
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/object-storage/buckets/{bucket}/objects/delete',
    operationId: 'deleteBucketObjects',
    summary: 'Delete objects',
    description: 'Body `keys` (1 to 1000). `deleted` counts the keys that existed: it can be lower than the number asked for.',
    tag: TAG,
    scope: 'objectstorage:write',
    marks: ['D', 'I'],
    params: bucketParams,
    body: DeleteObjectsBody,
    exampleBody: { keys: ['photos/2026/a.jpg'] },
    responses: [{ status: 200, description: 'How many were deleted', schema: ObjectsDeleteSchema }, NOT_SET_UP, SERVER_DOWN],
    async handler({ params, body, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'buckets', 'deleting objects');
      await requireBucket(deps.db, storage.service_id, params.bucket);
      const deleted = await deps.providers.objectstorage.deleteObjects(storage.service_id, params.bucket, body.keys);
      return { body: { object: 'objects_delete' as const, deleted } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/object-storage/buckets/{bucket}/presign',
    operationId: 'presignObjectUrl',
    summary: 'Presign a URL for one object',
    description:
      'Body `key`, `method` (`GET`, or `PUT`, which needs `objectstorage:write` too), `key_id` (the S3 key whose secret signs: required; `400` when it is not an active key of the account) and `ttl_seconds` (1 to 604800, default 3600). The URL (AWS SigV4, query form) works with no credential until `expires_at`, reaches only what the signing key reaches, and is refused as soon as that key is deleted.',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: ['R'],
    returnsSecret: true,
    params: bucketParams,
    body: PresignBody,
    exampleBody: { key: 'photos/2026/a.jpg', method: 'GET', key_id: 's3k_1', ttl_seconds: 3600 },
    responses: [{ status: 200, description: 'The presigned URL', schema: PresignedUrlSchema }, NOT_SET_UP],
    async handler({ params, body, principal, deps }) {
      if (body.method === 'PUT' && !principal.scopes.has('objectstorage:write')) throw insufficientScope('objectstorage:write');
      const { storage } = await storageTarget(deps, principal, 'presign', 'presigning a URL');
      const keyId = body.key_id === undefined ? null : parseNumericId('s3k', body.key_id);
      const signed = await presign(deps, storage, { bucket: params.bucket, key: body.key, method: body.method, keyId, ttlSeconds: body.ttl_seconds });
      return { body: { object: 'presigned_url' as const, url: signed.url, method: body.method, expires_at: signed.expiresAt.toISOString() } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/object-storage/keys',
    operationId: 'createS3Key',
    summary: 'Create an S3 key',
    description:
      "Body `name`, `scope` (a bucket of the account: the key reaches it alone; left out or null: every bucket of the account, those made later too, and it may create buckets over S3 under the account's `bucket_prefix`). Answers `secret_access_key` once. Keys coexist; at most 20 (`429 quota_exceeded`). Signs S3 requests within 5 seconds.",
    tag: TAG,
    scope: 'objectstorage:keys',
    marks: ['R', 'I'],
    returnsSecret: true,
    body: CreateKeyBody,
    exampleBody: { name: 'backup job' },
    responses: [
      { status: 201, description: 'The key, with its secret', schema: CreatedS3KeySchema },
      NOT_SET_UP,
      { status: 429, description: '20 keys already (`quota_exceeded`)' },
      SERVER_DOWN,
    ],
    async handler({ body, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'keys', 'creating an S3 key');
      const { key, secret } = await createKey(manageDeps(deps), storage, { name: body.name, scope: body.scope ?? null });
      return { status: 201, body: { ...presentKey(key), secret_access_key: secret } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/object-storage/keys',
    operationId: 'listS3Keys',
    summary: 'List S3 keys',
    description: 'Active keys, newest first; never the secret.',
    tag: TAG,
    scope: 'objectstorage:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of keys', schema: listOf(S3KeySchema, 'S3KeyList') }, NOT_SET_UP],
    async handler({ query, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'keys');
      const page = await keysetPage(activeKeysQuery(deps.db, storage.service_id), {
        cursors: deps.cursors,
        list: listFingerprint('object-storage.keys', { service: storage.service_id }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r) => presentKey({ ...r, id: Number(r.id), service_id: Number(r.service_id) })),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/object-storage/keys/{key_id}',
    operationId: 'deleteS3Key',
    summary: 'Delete an S3 key',
    description: 'Immediate: requests signed with it, and the URLs it presigned, are refused (403) within 2 seconds.',
    tag: TAG,
    scope: 'objectstorage:keys',
    marks: ['D', 'I'],
    params: keyParams,
    responses: [{ status: 204, description: 'Deleted' }, NOT_SET_UP, SERVER_DOWN],
    async handler({ params, principal, deps }) {
      const { storage } = await storageTarget(deps, principal, 'keys', 'deleting an S3 key');
      const id = parseNumericId('s3k', params.key_id);
      await deleteKey(manageDeps(deps), storage, id ?? 0);
      return { status: 204 };
    },
  }),
];
