import { createHash, randomBytes } from 'node:crypto';
import type { Knex } from 'knex';
import { BackendRefusedError } from '../errors';
import type { IssuedKey, KeyAccess, ObjectPage, ObjectStorageProvider, S3Endpoint, S3ObjectEntry, ServerBucket, UsageReading } from '../objectstorage.provider';
import { simulatedDelay } from '../switchboard';

const BACKEND = 'objectstorage';
const CALL_MS = 10;

/**
 * Object storage without an S3 server (OBJECTSTORAGE_BACKEND=simulator): buckets, objects and key
 * identities in PostgreSQL, with the real adapter's refusals. It answers no S3 protocol: presigned
 * URLs and public URLs are issued but lead nowhere, and usage counters stay zero. Objects get in only
 * through `putObject` (tests, the seed).
 */
export class ObjectStorageSimulator implements ObjectStorageProvider {
  constructor(
    private readonly db: Knex,
    private readonly options: { delayScale: number; region: string },
  ) {}

  async open(_serviceId: number): Promise<S3Endpoint> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    return { s3Endpoint: 'http://127.0.0.1:8333', region: this.options.region };
  }

  async close(): Promise<void> {}

  async createBucket(_serviceId: number, name: string): Promise<void> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const inserted = await this.db('sim_objectstorage_buckets').insert({ name }).onConflict('name').ignore().returning('name');
    if (inserted.length === 0) throw new BackendRefusedError(BACKEND, `A bucket named ${name} exists already.`, 'already_exists', 'name');
  }

  async deleteBucket(_serviceId: number, name: string, { purge }: { purge: boolean }): Promise<'deleted' | 'not_empty' | 'missing'> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    return this.db.transaction(async (trx) => {
      const bucket = await trx('sim_objectstorage_buckets').where({ name }).forUpdate().first();
      if (!bucket) return 'missing';
      const any = await trx('sim_objectstorage_objects').where({ bucket: name }).first();
      if (any && !purge) return 'not_empty';
      await trx('sim_objectstorage_buckets').where({ name }).delete();
      return 'deleted';
    });
  }

  async setPublic(_serviceId: number, name: string, isPublic: boolean): Promise<void> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const n = await this.db('sim_objectstorage_buckets').where({ name }).update({ public: isPublic });
    if (n === 0) throw new BackendRefusedError(BACKEND, `The bucket ${name} is not on the server any more.`, 'gone');
  }

  async listBuckets(_serviceId: number, prefix: string): Promise<ServerBucket[]> {
    const rows: Array<{ name: string; created_at: Date }> = await this.db('sim_objectstorage_buckets')
      .whereRaw('starts_with(name, ?)', [prefix])
      .orderBy('name');
    return rows.map((r) => ({ name: r.name, createdAt: r.created_at }));
  }

  async listObjects(_serviceId: number, bucket: string, opts: { prefix: string; next: string | null }): Promise<ObjectPage> {
    await this.requireBucket(bucket);
    const rows: Array<{ key: string; size_bytes: string; etag: string; last_modified: Date }> = await this.db('sim_objectstorage_objects')
      .where({ bucket })
      .whereRaw('starts_with(key, ?)', [opts.prefix])
      .orderBy('key');
    const entries = new Map<string, S3ObjectEntry>();
    for (const r of rows) {
      const rest = r.key.slice(opts.prefix.length);
      const slash = rest.indexOf('/');
      if (slash >= 0) {
        const folder = opts.prefix + rest.slice(0, slash + 1);
        entries.set(folder, { key: folder, isFolder: true, sizeBytes: null, lastModified: null, etag: null });
      } else {
        entries.set(r.key, { key: r.key, isFolder: false, sizeBytes: Number(r.size_bytes), lastModified: r.last_modified, etag: r.etag });
      }
    }
    const sorted = [...entries.values()].sort((a, b) => (a.key < b.key ? -1 : 1));
    const start = opts.next ? sorted.findIndex((e) => e.key > opts.next!) : 0;
    const page = start < 0 ? [] : sorted.slice(start, start + 1000);
    const more = start >= 0 && start + 1000 < sorted.length;
    return { entries: page, next: more ? page[page.length - 1].key : null };
  }

  async deleteObjects(_serviceId: number, bucket: string, keys: string[]): Promise<number> {
    await this.requireBucket(bucket);
    return this.db('sim_objectstorage_objects').where({ bucket }).whereIn('key', keys).delete();
  }

  async listKeys(_serviceId: number, bucket: string, max: number): Promise<string[]> {
    await this.requireBucket(bucket);
    const rows: Array<{ key: string }> = await this.db('sim_objectstorage_objects').where({ bucket }).orderBy('key').limit(max).select('key');
    return rows.map((r) => r.key);
  }

  async removeKeys(_serviceId: number, bucket: string, keys: string[]): Promise<void> {
    await this.db('sim_objectstorage_objects').where({ bucket }).whereIn('key', keys).delete();
  }

  async createKey(_serviceId: number, name: string, access: KeyAccess): Promise<IssuedKey> {
    await simulatedDelay(CALL_MS, this.options.delayScale);
    const accessKeyId = `AKIA${randomBytes(8).toString('hex').toUpperCase()}`.slice(0, 20);
    await this.db('sim_objectstorage_keys')
      .insert({ name, access_key_id: accessKeyId, access: JSON.stringify(access) })
      .onConflict('name')
      .merge();
    return { accessKeyId, secretAccessKey: randomBytes(30).toString('base64url') };
  }

  async setKeyAccess(_serviceId: number, name: string, access: KeyAccess): Promise<void> {
    await this.db('sim_objectstorage_keys')
      .where({ name })
      .update({ access: JSON.stringify(access) });
  }

  async deleteKey(_serviceId: number, name: string): Promise<void> {
    await this.db('sim_objectstorage_keys').where({ name }).delete();
  }

  async usage(_serviceId: number, buckets: string[]): Promise<UsageReading> {
    const rows: Array<{ bucket: string; bytes: string; count: string }> = await this.db('sim_objectstorage_objects')
      .whereIn('bucket', buckets)
      .groupBy('bucket')
      .select('bucket', this.db.raw('sum(size_bytes) as bytes'), this.db.raw('count(*) as count'));
    const existing: Array<{ name: string }> = await this.db('sim_objectstorage_buckets').whereIn('name', buckets).select('name');
    const out: UsageReading = { epoch: 'simulator', buckets: {} };
    for (const { name } of existing) {
      const r = rows.find((x) => x.bucket === name);
      out.buckets[name] = { storageBytes: Number(r?.bytes ?? 0), objectCount: Number(r?.count ?? 0), bytesSent: 0, requests: 0 };
    }
    return out;
  }

  /** Puts an object (the simulator has no S3 protocol: only the seed and tests put objects, this way). */
  async putObject(_serviceId: number, bucket: string, key: string, body: string): Promise<void> {
    await this.requireBucket(bucket);
    const etag = `"${createHash('md5').update(body).digest('hex')}"`;
    await this.db('sim_objectstorage_objects')
      .insert({ bucket, key, size_bytes: Buffer.byteLength(body), etag, last_modified: this.db.fn.now() })
      .onConflict(['bucket', 'key'])
      .merge();
  }

  private async requireBucket(name: string): Promise<void> {
    if (!(await this.db('sim_objectstorage_buckets').where({ name }).first())) {
      throw new BackendRefusedError(BACKEND, `The bucket ${name} is not on the server any more.`, 'gone');
    }
  }
}
