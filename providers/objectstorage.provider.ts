/**
 * The object storage backend (SPEC "Object storage"): an S3 server holding the accounts' buckets,
 * with one S3 identity per customer key. Every call names the object storage service it is about
 * first: the service's server is the one of the host it is placed on (docs/hosts.md).
 *
 * Errors: only those of providers/errors.ts.
 */

/** Where a service's buckets are reached over S3. */
export interface S3Endpoint {
  /** Path-style S3 base URL (SigV4 with `region`). */
  s3Endpoint: string;
  region: string;
}

/** A bucket as the server has it. */
export interface ServerBucket {
  name: string;
  createdAt: Date | null;
}

export interface S3ObjectEntry {
  key: string;
  isFolder: boolean;
  sizeBytes: number | null;
  lastModified: Date | null;
  etag: string | null;
}

export interface ObjectPage {
  entries: S3ObjectEntry[];
  /** The server's continuation token for the next page; null on the last page. */
  next: string | null;
}

/**
 * What one key may reach: its `scope` bucket alone, or (scope null) every bucket of the account:
 * those named under `prefix` (also those created later, and the key may create them over S3) and
 * the account's other buckets listed in `buckets`.
 */
export interface KeyAccess {
  scope: string | null;
  prefix: string;
  buckets: string[];
}

export interface IssuedKey {
  accessKeyId: string;
  secretAccessKey: string;
}

/** A bucket's figures at one moment: stored bytes and objects from a listing, the server's counters since its start. */
export interface BucketUsage {
  storageBytes: number;
  objectCount: number;
  bytesSent: number;
  requests: number;
}

export interface UsageReading {
  /** The run of the server the counters belong to: they start again from zero when it changes. */
  epoch: string;
  buckets: Record<string, BucketUsage>;
}

export interface ObjectStorageProvider {
  /** Makes the service's place on the server (idempotent) and says where its buckets are reached. */
  open(serviceId: number): Promise<S3Endpoint>;
  /** Creates an empty private bucket. A name the server already holds: BackendRefusedError with code `already_exists`. */
  createBucket(serviceId: number, name: string): Promise<void>;
  /**
   * Deletes a bucket: only when it is empty unless `purge`, then with everything in it. `not_empty`
   * when it holds objects and `purge` is false (nothing is touched); `missing` when there is none.
   */
  deleteBucket(serviceId: number, name: string, opts: { purge: boolean }): Promise<'deleted' | 'not_empty' | 'missing'>;
  /** Anyone may GET the bucket's objects (not list them) when `isPublic`; only keys otherwise. */
  setPublic(serviceId: number, name: string, isPublic: boolean): Promise<void>;
  /** The server's buckets whose names start with `prefix` (buckets created directly over S3 are among them). */
  listBuckets(serviceId: number, prefix: string): Promise<ServerBucket[]>;
  /** One level of a bucket under `prefix`: objects and folders, sorted by key, up to 1000 per page. */
  listObjects(serviceId: number, bucket: string, opts: { prefix: string; next: string | null }): Promise<ObjectPage>;
  /** Deletes the keys given; the count is of those that existed. */
  deleteObjects(serviceId: number, bucket: string, keys: string[]): Promise<number>;
  /** Up to `max` keys of the bucket, from its start (a page to delete: `empty`). */
  listKeys(serviceId: number, bucket: string, max: number): Promise<string[]>;
  /** Deletes `keys` without checking which exist (idempotent). */
  removeKeys(serviceId: number, bucket: string, keys: string[]): Promise<void>;
  /** A new identity `name` with one access key, allowed `access`. The secret is returned here only. */
  createKey(serviceId: number, name: string, access: KeyAccess): Promise<IssuedKey>;
  /** Replaces what identity `name` may reach (buckets came or went). */
  setKeyAccess(serviceId: number, name: string, access: KeyAccess): Promise<void>;
  /** Removes identity `name` and its access keys: requests and presigned URLs signed with them are refused. Missing is fine. */
  deleteKey(serviceId: number, name: string): Promise<void>;
  /** The figures of `buckets` now. */
  usage(serviceId: number, buckets: string[]): Promise<UsageReading>;
  /** Puts a small object with the admin identity (the demo seed's; customers put objects over S3). */
  putObject(serviceId: number, bucket: string, key: string, body: string): Promise<void>;
  /** Forgets the service's place on the server (its identities and buckets must be gone already). */
  close(serviceId: number): Promise<void>;
}
