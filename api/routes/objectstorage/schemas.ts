import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import type { BucketRow, KeyRow, StorageRow } from '../../../domain/objectstorage/store';
import type { ServiceRow } from '../../../domain/services';
import type { S3ObjectEntry } from '../../../providers/objectstorage.provider';
import { idParam } from '../../schemas';

/**
 * The object storage family's request and response schemas (DECISIONS "Object storage") and the
 * presenters that build the responses from records and the server's answers.
 */
export const ObjectStorageSchema = z
  .object({
    object: z.literal('object_storage'),
    service_id: z.string(),
    status: z.string().meta({ description: "The service's billing status" }),
    s3_endpoint: z.string().meta({ description: 'Path-style S3 base URL; sign requests with AWS SigV4 and `region`' }),
    region: z.string(),
    bucket_prefix: z.string().nullable().meta({ description: "The prefix this account's keys may create buckets under directly over S3 (null: any name)" }),
    bucket_count: z.number().int().meta({ description: 'Live: the buckets recorded now, those created over S3 included' }),
    storage_bytes: z.number().int().nullable().meta({ description: 'From the latest daily snapshot; null before the first' }),
    object_count: z.number().int().nullable().meta({ description: 'From the latest daily snapshot; null before the first' }),
    snapshot_date: z.string().nullable().meta({ description: 'UTC date (`YYYY-MM-DD`) of that snapshot' }),
  })
  .meta({ id: 'ObjectStorage' });

export const BucketSchema = z
  .object({
    object: z.literal('bucket'),
    name: z.string(),
    access: z.enum(['private', 'public']),
    public_url: z
      .string()
      .nullable()
      .meta({ description: 'Minted the first time the bucket goes public (`{s3_endpoint}/{name}/`; an object is at this URL + its key); kept and reused' }),
    created_at: z.string().nullable().meta({ description: 'Null for a bucket created directly over S3' }),
  })
  .meta({ id: 'Bucket' });

export const S3KeySchema = z
  .object({
    object: z.literal('s3_key'),
    id: z.string().meta({ description: '`s3k_<n>`' }),
    name: z.string(),
    access_key_id: z.string(),
    scope: z.string().nullable().meta({ description: 'The one bucket it reaches; null: every bucket of the account, later ones too' }),
    created_at: z.string(),
  })
  .meta({ id: 'S3Key' });

export const CreatedS3KeySchema = S3KeySchema.extend({
  secret_access_key: z.string().meta({ description: 'Shown once, here; keep it' }),
}).meta({ id: 'CreatedS3Key' });

export const S3ObjectSchema = z
  .object({
    object: z.literal('s3_object'),
    key: z.string().meta({ description: "A folder's key ends in `/`; list it with `prefix` set to it" }),
    is_folder: z.boolean(),
    size_bytes: z.number().int().nullable(),
    last_modified: z.string().nullable(),
    etag: z.string().nullable(),
  })
  .meta({ id: 'S3Object' });

export const ObjectsDeleteSchema = z
  .object({ object: z.literal('objects_delete'), deleted: z.number().int().meta({ description: 'Keys that existed and were deleted' }) })
  .meta({ id: 'ObjectsDelete' });

export const PresignedUrlSchema = z
  .object({
    object: z.literal('presigned_url'),
    url: z.string(),
    method: z.enum(['GET', 'PUT']),
    expires_at: z.string(),
  })
  .meta({ id: 'PresignedUrl' });

const Point = z.object({ date: z.string(), value: z.number().int() });
export const BucketMetricsSchema = z
  .object({
    object: z.literal('bucket_metrics'),
    bucket: z.string(),
    from: z.string(),
    to: z.string(),
    storage: z.array(Point).meta({ description: 'Bytes stored, per UTC day with a snapshot' }),
    egress: z.array(Point).meta({ description: 'Bytes sent to clients that day (today: so far)' }),
    requests: z.array(Point).meta({ description: 'S3 requests that day (today: so far)' }),
  })
  .meta({ id: 'BucketMetrics' });

export const bucketParams = z.object({ bucket: z.string().min(1).max(255).meta({ description: 'The bucket name', example: 'cus1-photos' }) });
export const keyParams = z.object({ key_id: idParam('s3k_1').meta({ description: 'The S3 key id (`s3k_<n>`)' }) });

export const CreateBucketBody = z.object({
  name: z.string().min(1).max(255).meta({ description: "The bucket's name: S3's rules (3 to 63 of a-z, 0-9, `.`, `-`)" }),
});
export const PatchBucketBody = z.object({
  access: z.enum(['private', 'public']).meta({ description: '`public`: anyone may GET objects at `public_url` (listing stays private)' }),
});
export const CreateKeyBody = z.object({
  name: z.string().min(1).max(255).meta({ description: 'A name for the key (1 to 255 characters)' }),
  scope: z
    .string()
    .min(1)
    .max(255)
    .nullable()
    .optional()
    .meta({ description: 'A bucket of the account: the key reaches only it. Left out or null: every bucket' }),
});
export const DeleteObjectsBody = z.object({
  keys: z.array(z.string().min(1).max(1024)).min(1).max(1000).meta({ description: 'The object keys to delete (1 to 1000)' }),
});
export const PresignBody = z.object({
  key: z.string().min(1).max(1024).meta({ description: "The object's key" }),
  method: z.enum(['GET', 'PUT']).meta({ description: '`GET` needs `objectstorage:read`, `PUT` `objectstorage:write`' }),
  key_id: z.string().min(1).max(200).optional().meta({ description: 'The S3 key (`s3k_<n>`) whose secret signs: the URL reaches what that key reaches' }),
  ttl_seconds: z.number().int().min(1).max(604_800).default(3600).meta({ description: 'Seconds the URL works, 1 to 604800 (default 3600)' }),
});

export function presentStorage(
  service: ServiceRow,
  storage: StorageRow,
  bucketCount: number,
  snapshot: { day: string; storage_bytes: number; object_count: number } | null,
): z.input<typeof ObjectStorageSchema> {
  return {
    object: 'object_storage',
    service_id: formatId('svc', service.id),
    status: service.status,
    s3_endpoint: storage.s3_endpoint,
    region: storage.region,
    bucket_prefix: storage.bucket_prefix,
    bucket_count: bucketCount,
    storage_bytes: snapshot?.storage_bytes ?? null,
    object_count: snapshot?.object_count ?? null,
    snapshot_date: snapshot?.day ?? null,
  };
}

export function presentBucket(row: BucketRow): z.input<typeof BucketSchema> {
  return { object: 'bucket', name: row.name, access: row.access, public_url: row.public_url, created_at: row.created_at ? iso(row.created_at) : null };
}

export function presentKey(row: KeyRow): z.input<typeof S3KeySchema> {
  return {
    object: 's3_key',
    id: formatId('s3k', row.id),
    name: row.name,
    access_key_id: row.access_key_id ?? '',
    scope: row.scope,
    created_at: iso(row.created_at)!,
  };
}

export function presentObject(entry: S3ObjectEntry): z.input<typeof S3ObjectSchema> {
  return {
    object: 's3_object',
    key: entry.key,
    is_folder: entry.isFolder,
    size_bytes: entry.sizeBytes,
    last_modified: entry.lastModified ? iso(entry.lastModified) : null,
    etag: entry.etag,
  };
}
