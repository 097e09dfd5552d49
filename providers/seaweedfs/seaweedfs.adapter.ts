import { promises as fs } from 'node:fs';
import path from 'node:path';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteBucketPolicyCommand,
  DeleteObjectsCommand,
  HeadObjectCommand,
  ListBucketsCommand,
  ListObjectsV2Command,
  PutBucketPolicyCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import {
  CreateAccessKeyCommand,
  CreateUserCommand,
  DeleteAccessKeyCommand,
  DeleteUserCommand,
  DeleteUserPolicyCommand,
  IAMClient,
  IAMServiceException,
  ListAccessKeysCommand,
  PutUserPolicyCommand,
} from '@aws-sdk/client-iam';
import { BackendRefusedError, BackendUnavailableError } from '../errors';
import type {
  BucketUsage,
  IssuedKey,
  KeyAccess,
  ObjectPage,
  ObjectStorageProvider,
  S3Endpoint,
  S3ObjectEntry,
  ServerBucket,
  UsageReading,
} from '../objectstorage.provider';
import { SeaweedServer } from './seaweedfs.server';

const BACKEND = 'objectstorage';

export interface SeaweedAdapterOptions {
  dataDir: string;
  bindAddress: string;
  s3Port: number;
  region: string;
  /** The S3 base URL customers use, when it is not the server's own address (a host behind a name). */
  publicEndpoint?: string;
  binary?: string;
}

/**
 * What a key may do on the buckets it reaches. SeaweedFS's IAM takes these four object-level actions
 * one by one; bucket creation has no action of its own (its validator refuses `s3:CreateBucket`),
 * only `s3:*`, which is therefore granted on the account's prefix alone (docs/objectstorage.md "Keys").
 */
const OBJECT_ACTIONS = ['s3:GetObject', 's3:PutObject', 's3:DeleteObject', 's3:ListBucket'];

/**
 * The IAM policy of a key: object access to the buckets it reaches and, for an unscoped key, the
 * right to create buckets named under the account's prefix. Null when it reaches nothing (its scope
 * bucket is gone): the key then has no policy at all.
 */
export function keyPolicy(access: KeyAccess): object | null {
  const arns = (bucket: string) => [`arn:aws:s3:::${bucket}`, `arn:aws:s3:::${bucket}/*`];
  if (access.scope !== null) {
    if (!access.buckets.includes(access.scope)) return null;
    return { Version: '2012-10-17', Statement: [{ Effect: 'Allow', Action: OBJECT_ACTIONS, Resource: arns(access.scope) }] };
  }
  const named = access.buckets.filter((b) => !b.startsWith(access.prefix));
  const statements: object[] = [{ Effect: 'Allow', Action: ['s3:*'], Resource: arns(`${access.prefix}*`) }];
  if (named.length > 0) statements.push({ Effect: 'Allow', Action: OBJECT_ACTIONS, Resource: named.flatMap(arns) });
  return { Version: '2012-10-17', Statement: statements };
}

/** Anyone may GET the bucket's objects; listing stays with the keys. */
const publicPolicy = (bucket: string) =>
  JSON.stringify({
    Version: '2012-10-17',
    Statement: [{ Sid: 'PublicRead', Effect: 'Allow', Principal: '*', Action: ['s3:GetObject'], Resource: [`arn:aws:s3:::${bucket}/*`] }],
  });

/** True for errors that mean the server did not answer (not that it said no). */
function unreachable(err: unknown): boolean {
  if (err instanceof S3ServiceException || err instanceof IAMServiceException) return (err.$metadata?.httpStatusCode ?? 0) >= 500;
  return true;
}

const codeOf = (err: unknown) => (err as { name?: string; Code?: string }).name ?? (err as { Code?: string }).Code ?? '';

/**
 * The object storage provider on a host's SeaweedFS (providers/seaweedfs/seaweedfs.server.ts),
 * through its S3 API and its embedded IAM API with the admin identity. The server is started on the
 * first call and found again through its pidfile after a restart of the worker.
 */
export class SeaweedObjectStorageProvider implements ObjectStorageProvider {
  private running: Promise<SeaweedServer> | null = null;
  private clients: { s3: S3Client; iam: IAMClient; server: SeaweedServer } | null = null;

  constructor(private readonly options: SeaweedAdapterOptions) {}

  private get servicesDir(): string {
    return path.join(this.options.dataDir, 'services');
  }

  /** The host's server, started when it does not run. */
  async server(): Promise<SeaweedServer> {
    this.running ??= SeaweedServer.start({
      dataDir: this.options.dataDir,
      bindAddress: this.options.bindAddress,
      s3Port: this.options.s3Port,
      region: this.options.region,
      binary: this.options.binary,
    }).catch((err: unknown) => {
      this.running = null;
      throw new BackendUnavailableError(BACKEND, (err as Error).message);
    });
    return this.running;
  }

  /** The ports the host's server listens on (load-balancer backends may not point at them). */
  async listeningPorts(): Promise<number[]> {
    const settings = SeaweedServer.settingsOf(this.options.dataDir);
    return settings ? Object.values(settings.ports) : [];
  }

  /** The services whose place is on this host's server (a host agent adopts them). */
  async serviceIds(): Promise<number[]> {
    const names = await fs.readdir(this.servicesDir).catch(() => [] as string[]);
    return names.filter((n) => /^\d+$/.test(n)).map(Number);
  }

  private async connect(): Promise<{ s3: S3Client; iam: IAMClient; server: SeaweedServer }> {
    const server = await this.server();
    if (this.clients?.server === server) return this.clients;
    const credentials = server.settings.admin;
    const common = { endpoint: server.s3Url, region: server.settings.region, credentials, maxAttempts: 2 };
    this.clients = {
      server,
      s3: new S3Client({ ...common, forcePathStyle: true, requestChecksumCalculation: 'WHEN_REQUIRED', responseChecksumValidation: 'WHEN_REQUIRED' }),
      iam: new IAMClient(common),
    };
    return this.clients;
  }

  /** Runs `fn` on the clients; a server that does not answer is an outage, and is looked for again next time. */
  private async call<T>(fn: (c: { s3: S3Client; iam: IAMClient; server: SeaweedServer }) => Promise<T>): Promise<T> {
    const clients = await this.connect();
    try {
      return await fn(clients);
    } catch (err) {
      if (err instanceof BackendRefusedError || err instanceof BackendUnavailableError) throw err;
      if (unreachable(err)) {
        this.running = null;
        this.clients = null;
        throw new BackendUnavailableError(BACKEND, (err as Error).message);
      }
      throw err;
    }
  }

  async open(serviceId: number): Promise<S3Endpoint> {
    const server = await this.server();
    await fs.mkdir(this.servicesDir, { recursive: true, mode: 0o700 });
    await fs.writeFile(path.join(this.servicesDir, String(serviceId)), '', { mode: 0o600 });
    return { s3Endpoint: this.options.publicEndpoint ?? server.s3Url, region: server.settings.region };
  }

  async close(serviceId: number): Promise<void> {
    await fs.rm(path.join(this.servicesDir, String(serviceId)), { force: true });
  }

  async createBucket(_serviceId: number, name: string): Promise<void> {
    await this.call(async ({ s3 }) => {
      try {
        await s3.send(new CreateBucketCommand({ Bucket: name }));
      } catch (err) {
        const code = codeOf(err);
        if (code === 'BucketAlreadyExists' || code === 'BucketAlreadyOwnedByYou') {
          throw new BackendRefusedError(BACKEND, `A bucket named ${name} exists already.`, 'already_exists', 'name');
        }
        if (code === 'InvalidBucketName') throw new BackendRefusedError(BACKEND, `${name} is not a valid bucket name.`, 'validation_failed', 'name');
        throw err;
      }
    });
  }

  async deleteBucket(serviceId: number, name: string, { purge }: { purge: boolean }): Promise<'deleted' | 'not_empty' | 'missing'> {
    return this.call(async ({ s3 }) => {
      if (purge) {
        for (;;) {
          const keys = await this.listKeys(serviceId, name, 1000).catch((err: unknown) => {
            if (codeOf(err) === 'NoSuchBucket') return null;
            throw err;
          });
          if (keys === null) return 'missing';
          if (keys.length === 0) break;
          await this.removeKeys(serviceId, name, keys);
        }
      }
      try {
        await s3.send(new DeleteBucketCommand({ Bucket: name }));
        return 'deleted';
      } catch (err) {
        const code = codeOf(err);
        if (code === 'NoSuchBucket') return 'missing';
        if (code === 'BucketNotEmpty') return 'not_empty';
        throw err;
      }
    });
  }

  async setPublic(_serviceId: number, name: string, isPublic: boolean): Promise<void> {
    await this.call(async ({ s3 }) => {
      try {
        if (isPublic) await s3.send(new PutBucketPolicyCommand({ Bucket: name, Policy: publicPolicy(name) }));
        else await s3.send(new DeleteBucketPolicyCommand({ Bucket: name }));
      } catch (err) {
        if (codeOf(err) === 'NoSuchBucket') throw new BackendRefusedError(BACKEND, `The bucket ${name} is not on the server any more.`, 'gone');
        if (!isPublic && codeOf(err) === 'NoSuchBucketPolicy') return;
        throw err;
      }
    });
  }

  async listBuckets(_serviceId: number, prefix: string): Promise<ServerBucket[]> {
    return this.call(async ({ s3 }) => {
      const out = await s3.send(new ListBucketsCommand({}));
      return (out.Buckets ?? []).filter((b) => b.Name && b.Name.startsWith(prefix)).map((b) => ({ name: b.Name!, createdAt: b.CreationDate ?? null }));
    });
  }

  async listObjects(_serviceId: number, bucket: string, opts: { prefix: string; next: string | null }): Promise<ObjectPage> {
    return this.call(async ({ s3 }) => {
      const out = await s3.send(
        new ListObjectsV2Command({
          Bucket: bucket,
          Prefix: opts.prefix || undefined,
          Delimiter: '/',
          MaxKeys: 1000,
          ContinuationToken: opts.next ?? undefined,
        }),
      );
      const entries: S3ObjectEntry[] = [];
      for (const o of out.Contents ?? []) {
        if (!o.Key || o.Key === opts.prefix) continue;
        entries.push({ key: o.Key, isFolder: false, sizeBytes: o.Size ?? 0, lastModified: o.LastModified ?? null, etag: o.ETag ?? null });
      }
      // SeaweedFS keeps a directory after its last object is gone: a folder is listed while an object lies under it.
      const folders = await Promise.all(
        (out.CommonPrefixes ?? []).map(async (p) => {
          if (!p.Prefix) return null;
          const probe = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: p.Prefix, MaxKeys: 1 }));
          return (probe.KeyCount ?? probe.Contents?.length ?? 0) > 0 ? p.Prefix : null;
        }),
      );
      for (const f of folders) if (f) entries.push({ key: f, isFolder: true, sizeBytes: null, lastModified: null, etag: null });
      entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      return { entries, next: out.IsTruncated ? (out.NextContinuationToken ?? null) : null };
    });
  }

  async deleteObjects(serviceId: number, bucket: string, keys: string[]): Promise<number> {
    return this.call(async ({ s3 }) => {
      // S3 reports a missing key as deleted: which ones exist is asked first, a few at a time.
      const unique = [...new Set(keys)];
      const existing: string[] = [];
      for (let i = 0; i < unique.length; i += 16) {
        const batch = unique.slice(i, i + 16);
        const found = await Promise.all(
          batch.map((Key) =>
            s3.send(new HeadObjectCommand({ Bucket: bucket, Key })).then(
              () => true,
              (err: unknown) => {
                if ((err as S3ServiceException).$metadata?.httpStatusCode === 404) return false;
                throw err;
              },
            ),
          ),
        );
        batch.forEach((k, j) => found[j] && existing.push(k));
      }
      await this.removeKeys(serviceId, bucket, existing);
      return existing.length;
    });
  }

  async listKeys(_serviceId: number, bucket: string, max: number): Promise<string[]> {
    return this.call(async ({ s3 }) => {
      const out = await s3.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: max }));
      return (out.Contents ?? []).flatMap((o) => (o.Key ? [o.Key] : []));
    });
  }

  async removeKeys(_serviceId: number, bucket: string, keys: string[]): Promise<void> {
    await this.call(async ({ s3 }) => {
      for (let i = 0; i < keys.length; i += 1000) {
        const out = await s3.send(
          new DeleteObjectsCommand({ Bucket: bucket, Delete: { Quiet: true, Objects: keys.slice(i, i + 1000).map((Key) => ({ Key })) } }),
        );
        const failed = (out.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
        if (failed.length > 0) throw new BackendUnavailableError(BACKEND, `deleting ${failed.length} objects failed: ${failed[0].Code} ${failed[0].Message}`);
      }
    });
  }

  async createKey(serviceId: number, name: string, access: KeyAccess): Promise<IssuedKey> {
    return this.call(async ({ iam }) => {
      try {
        await iam.send(new CreateUserCommand({ UserName: name }));
      } catch (err) {
        if (codeOf(err) !== 'EntityAlreadyExists' && codeOf(err) !== 'EntityAlreadyExistsException') throw err;
        // A retried creation: the identity's earlier keys (whose secret nobody kept) go.
        await this.dropAccessKeys(iam, name);
      }
      await this.setKeyAccess(serviceId, name, access);
      const out = await iam.send(new CreateAccessKeyCommand({ UserName: name }));
      const key = out.AccessKey;
      if (!key?.AccessKeyId || !key.SecretAccessKey) throw new BackendUnavailableError(BACKEND, 'CreateAccessKey returned no key');
      return { accessKeyId: key.AccessKeyId, secretAccessKey: key.SecretAccessKey };
    });
  }

  async setKeyAccess(_serviceId: number, name: string, access: KeyAccess): Promise<void> {
    await this.call(async ({ iam }) => {
      const policy = keyPolicy(access);
      if (policy) {
        await iam.send(new PutUserPolicyCommand({ UserName: name, PolicyName: 'access', PolicyDocument: JSON.stringify(policy) }));
        return;
      }
      await iam.send(new DeleteUserPolicyCommand({ UserName: name, PolicyName: 'access' })).catch((err: unknown) => {
        if (!/NoSuchEntity/.test(codeOf(err))) throw err;
      });
    });
  }

  async deleteKey(_serviceId: number, name: string): Promise<void> {
    await this.call(async ({ iam }) => {
      try {
        await this.dropAccessKeys(iam, name);
        await iam.send(new DeleteUserCommand({ UserName: name }));
      } catch (err) {
        if (/NoSuchEntity/.test(codeOf(err))) return;
        throw err;
      }
    });
  }

  private async dropAccessKeys(iam: IAMClient, name: string): Promise<void> {
    const keys = await iam.send(new ListAccessKeysCommand({ UserName: name }));
    for (const k of keys.AccessKeyMetadata ?? []) {
      if (k.AccessKeyId) await iam.send(new DeleteAccessKeyCommand({ UserName: name, AccessKeyId: k.AccessKeyId }));
    }
  }

  async putObject(_serviceId: number, bucket: string, key: string, body: string): Promise<void> {
    await this.call(({ s3 }) => s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body })));
  }

  async usage(_serviceId: number, buckets: string[]): Promise<UsageReading> {
    return this.call(async ({ s3, server }) => {
      const response = await fetch(server.metricsUrl, { signal: AbortSignal.timeout(5_000) });
      const counters = parseCounters(await response.text());
      const out: Record<string, BucketUsage> = {};
      for (const bucket of buckets) {
        let storageBytes = 0;
        let objectCount = 0;
        let token: string | undefined;
        try {
          do {
            const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1000, ContinuationToken: token }));
            for (const o of page.Contents ?? []) {
              storageBytes += o.Size ?? 0;
              objectCount += 1;
            }
            token = page.IsTruncated ? page.NextContinuationToken : undefined;
          } while (token);
        } catch (err) {
          if (codeOf(err) === 'NoSuchBucket') continue;
          throw err;
        }
        out[bucket] = { storageBytes, objectCount, bytesSent: counters.sent.get(bucket) ?? 0, requests: counters.requests.get(bucket) ?? 0 };
      }
      return { epoch: server.epoch, buckets: out };
    });
  }
}

/**
 * The per-bucket counters of SeaweedFS's Prometheus text: bytes sent to clients
 * (`SeaweedFS_s3_bucket_traffic_sent_bytes_total`) and requests of every type and status
 * (`SeaweedFS_s3_request_total`). Both count from the process's start.
 */
export function parseCounters(text: string): { sent: Map<string, number>; requests: Map<string, number> } {
  const sent = new Map<string, number>();
  const requests = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^(SeaweedFS_s3_bucket_traffic_sent_bytes_total|SeaweedFS_s3_request_total)\{([^}]*)\}\s+(\S+)/.exec(line);
    if (!m) continue;
    const bucket = /(?:^|,)bucket="([^"]*)"/.exec(m[2])?.[1];
    if (!bucket) continue;
    const value = Number(m[3]);
    if (!Number.isFinite(value)) continue;
    const into = m[1] === 'SeaweedFS_s3_request_total' ? requests : sent;
    into.set(bucket, (into.get(bucket) ?? 0) + value);
  }
  return { sent, requests };
}
