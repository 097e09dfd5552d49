import { CreateBucketCommand, GetObjectCommand, HeadBucketCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { MockActivityEnvironment } from '@temporalio/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createObjectStorageActivities } from '../activities/objectstorage/activities';
import { seedObjectStorage, demoBucketOf } from '../db/seeds/objectstorage.seed';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { SeaweedServer, stopSeaweedServer } from '../providers/seaweedfs/seaweedfs.server';
import { eventually, provisionStorage, s3Client, s3Outcome } from './objectstorage.support';
import { waitForOperation } from './vps.support';

/**
 * Object storage on a real SeaweedFS, with the official AWS SDK for JavaScript v3 as the customer's
 * client: keys are real S3 credentials whose policies reach what SPEC says, presigned URLs work with
 * no credential until the key goes, public buckets answer anonymous GETs, buckets made over S3 are
 * listed, and emptying survives a worker restart.
 */
let stack: Stack;
let token: string;
let storage: { s3_endpoint: string; region: string; bucket_prefix: string; service_id: string };
let prefix: string;
let storageServiceId: number;

const api = {
  post: (path: string, body?: unknown, t = token) => stack.http.post(path, { token: t, body }),
  get: (path: string, t = token) => stack.http.get(path, { token: t }),
  patch: (path: string, body: unknown, t = token) => stack.http.request('PATCH', path, { token: t, body }),
  del: (path: string, t = token) => stack.http.request('DELETE', path, { token: t }),
};

async function newKey(name: string, scope?: string, t = token): Promise<{ id: string; access_key_id: string; secret_access_key: string }> {
  const res = await api.post('/v1/object-storage/keys', { name, ...(scope ? { scope } : {}) }, t);
  expect(res.status, res.text).toBe(201);
  expect(res.headers.get('cache-control')).toBe('no-store');
  return res.body;
}

async function newBucket(name: string, t = token): Promise<void> {
  const res = await api.post('/v1/object-storage/buckets', { name }, t);
  expect(res.status, res.text).toBe(201);
}

/** Keys sign requests within 5 s of their creation (DECISIONS); the first request waits for that. */
async function ready(client: S3Client, bucket: string): Promise<void> {
  const outcome = await eventually(
    () => s3Outcome(client.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1 }))),
    (o) => o === 'ok',
    5_000,
  );
  expect(outcome).toBe('ok');
}

beforeAll(async () => {
  stack = await startStack({
    temporal: 'dev',
    env: {
      OBJECTSTORAGE_BACKEND: 'seaweedfs',
      OBJECTSTORAGE_RECONCILE_INTERVAL: '300ms',
      OBJECTSTORAGE_SNAPSHOT_INTERVAL: '1h',
      // Only the termination test ends a storage: its buckets go a few seconds later.
      OBJECTSTORAGE_RETENTION: '3s',
      // The worker replaced in the empty test leaves its workflows on its sticky queue this long.
      TEMPORAL_STICKY_TIMEOUT: '1s',
      CLOUD_DEV_ENDPOINTS: '1',
    },
  });
  token = stack.owner.key;
  storageServiceId = (await provisionStorage(stack, stack.owner.accountId)).serviceId;
  const res = await api.get('/v1/object-storage');
  expect(res.status, res.text).toBe(200);
  storage = res.body;
  prefix = storage.bucket_prefix;
}, 120_000);
afterAll(() => stack?.close());

describe('object storage on SeaweedFS', () => {
  it('describes the account’s storage: a loopback path-style endpoint, the key prefix, no snapshot yet', async () => {
    expect(storage).toMatchObject({
      object: 'object_storage',
      status: 'active',
      region: 'us-east-1',
      bucket_prefix: `cus${stack.owner.accountId}-`,
      bucket_count: 0,
      storage_bytes: null,
      object_count: null,
      snapshot_date: null,
    });
    expect(storage.s3_endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('an issued key puts and gets objects; a scoped key reaches its bucket and nothing else', async () => {
    await newBucket(`${prefix}alpha`);
    await newBucket(`${prefix}beta`);
    const all = s3Client(storage, await newKey('all buckets'));
    await ready(all, `${prefix}alpha`);
    await all.send(new PutObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt', Body: 'hello' }));
    const got = await all.send(new GetObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt' }));
    expect(await got.Body!.transformToString()).toBe('hello');

    const scopedKey = await newKey('beta only', `${prefix}beta`);
    expect(scopedKey).toMatchObject({ object: 's3_key', scope: `${prefix}beta`, name: 'beta only' });
    const scoped = s3Client(storage, scopedKey);
    await ready(scoped, `${prefix}beta`);
    await scoped.send(new PutObjectCommand({ Bucket: `${prefix}beta`, Key: 'b.txt', Body: 'b' }));
    expect(await s3Outcome(scoped.send(new GetObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt' })))).toBe('AccessDenied');
    expect(await s3Outcome(scoped.send(new PutObjectCommand({ Bucket: `${prefix}alpha`, Key: 'x', Body: 'x' })))).toBe('AccessDenied');
    // A scoped key creates no buckets, not even under the prefix.
    expect(await s3Outcome(scoped.send(new CreateBucketCommand({ Bucket: `${prefix}by-scoped` })))).toBe('AccessDenied');

    // The key list shows both, never a secret.
    const keys = await api.get('/v1/object-storage/keys');
    expect(keys.status).toBe(200);
    expect(keys.body.data.map((k: any) => k.name)).toEqual(['beta only', 'all buckets']);
    expect(JSON.stringify(keys.body)).not.toContain(scopedKey.secret_access_key);
  });

  it('another account’s key reaches none of this account’s buckets, and may not claim its prefix', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const otherToken = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['objectstorage:read', 'objectstorage:write', 'objectstorage:keys'] }))
      .token;
    await provisionStorage(stack, accountId);
    const otherStorage = (await api.get('/v1/object-storage', otherToken)).body;
    expect(otherStorage.bucket_prefix).toBe(`cus${accountId}-`);
    const theirs = s3Client(otherStorage, await newKey('theirs', undefined, otherToken));
    await newBucket(`cus${accountId}-own`, otherToken);
    await ready(theirs, `cus${accountId}-own`);
    expect(await s3Outcome(theirs.send(new GetObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt' })))).toBe('AccessDenied');
    expect(await s3Outcome(theirs.send(new ListObjectsV2Command({ Bucket: `${prefix}alpha` })))).toBe('AccessDenied');
    expect(await s3Outcome(theirs.send(new CreateBucketCommand({ Bucket: `${prefix}stolen` })))).toBe('AccessDenied');
    // Through the API: a name under this account's prefix, and a name this account holds.
    const under = await api.post('/v1/object-storage/buckets', { name: `${prefix}stolen` }, otherToken);
    expect(under.status).toBe(400);
    expect(under.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
    const taken = await api.post('/v1/object-storage/buckets', { name: `${prefix}alpha` }, otherToken);
    expect(taken.status).toBe(400);
    await newBucket('shared-name-xyz');
    const same = await api.post('/v1/object-storage/buckets', { name: 'shared-name-xyz' }, otherToken);
    expect(same.status).toBe(409);
    expect(same.body.error.code).toBe('already_exists');
    // A bucket outside the prefix, made through the API, is in the unscoped keys' policies at once.
    const mine = s3Client(storage, await newKey('for named'));
    await ready(mine, 'shared-name-xyz');
    expect(await s3Outcome(theirs.send(new ListObjectsV2Command({ Bucket: 'shared-name-xyz' })))).toBe('AccessDenied');
  });

  it('a presigned PUT then GET work with no credential, and stop the moment their key is deleted', async () => {
    const key = await newKey('signer', `${prefix}alpha`);
    await ready(s3Client(storage, key), `${prefix}alpha`);
    const put = await api.post(`/v1/object-storage/buckets/${prefix}alpha/presign`, { key: 'up/loaded.txt', method: 'PUT', key_id: key.id, ttl_seconds: 600 });
    expect(put.status, put.text).toBe(200);
    expect(put.headers.get('cache-control')).toBe('no-store');
    expect(put.body).toMatchObject({ object: 'presigned_url', method: 'PUT' });
    expect(Date.parse(put.body.expires_at) - Date.now()).toBeGreaterThan(590_000);
    expect((await fetch(put.body.url, { method: 'PUT', body: 'uploaded with a presigned URL' })).status).toBe(200);
    const get = await api.post(`/v1/object-storage/buckets/${prefix}alpha/presign`, { key: 'up/loaded.txt', method: 'GET', key_id: key.id });
    expect(get.status).toBe(200);
    const fetched = await fetch(get.body.url);
    expect(fetched.status).toBe(200);
    expect(await fetched.text()).toBe('uploaded with a presigned URL');
    // The URL inherits the key's scope: signed by a key scoped to alpha, a URL for beta is refused.
    const elsewhere = await api.post(`/v1/object-storage/buckets/${prefix}beta/presign`, { key: 'b.txt', method: 'GET', key_id: key.id });
    expect((await fetch(elsewhere.body.url)).status).toBe(403);

    const deleted = await api.del(`/v1/object-storage/keys/${key.id}`);
    expect(deleted.status).toBe(204);
    const started = Date.now();
    const status = await eventually(
      async () => (await fetch(get.body.url)).status,
      (s) => s === 403,
      2_000,
      50,
    );
    expect(status).toBe(403);
    expect(Date.now() - started).toBeLessThan(2_000);
    // Gone from the list; presigning with it is refused.
    expect((await api.get('/v1/object-storage/keys')).body.data.map((k: any) => k.id)).not.toContain(key.id);
    const again = await api.post(`/v1/object-storage/buckets/${prefix}alpha/presign`, { key: 'x', method: 'GET', key_id: key.id });
    expect(again.status).toBe(400);
    expect(again.body.error.param).toBe('key_id');
  });

  it('a public bucket answers anonymous GETs at public_url (not listings); private again refuses them; republishing keeps the URL', async () => {
    const bucket = `${prefix}alpha`;
    const objectUrl = `${storage.s3_endpoint}/${bucket}/hello.txt`;
    expect((await fetch(objectUrl)).status).toBe(403);
    const pub = await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'public' });
    expect(pub.status, pub.text).toBe(200);
    expect(pub.body).toMatchObject({ access: 'public', public_url: `${storage.s3_endpoint}/${bucket}/` });
    const open = await eventually(
      async () => (await fetch(`${pub.body.public_url}hello.txt`)).status,
      (s) => s === 200,
      5_000,
    );
    expect(open).toBe(200);
    expect((await fetch(`${storage.s3_endpoint}/${bucket}/`)).status).toBe(403);
    expect((await fetch(`${storage.s3_endpoint}/${bucket}?list-type=2`)).status).toBe(403);

    const priv = await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'private' });
    expect(priv.body).toMatchObject({ access: 'private', public_url: pub.body.public_url });
    expect(
      await eventually(
        async () => (await fetch(objectUrl)).status,
        (s) => s === 403,
        5_000,
      ),
    ).toBe(403);
    const again = await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'public' });
    expect(again.body.public_url).toBe(pub.body.public_url);
    await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'private' });
  });

  it('a bucket created over S3 under the prefix is listed within 10 s with created_at null; outside the prefix S3 refuses', async () => {
    const key = await newKey('creator');
    const client = s3Client(storage, key);
    await ready(client, `${prefix}alpha`);
    await client.send(new CreateBucketCommand({ Bucket: `${prefix}made-over-s3` }));
    expect(await s3Outcome(client.send(new CreateBucketCommand({ Bucket: 'no-prefix-bucket-xyz' })))).toBe('AccessDenied');
    const listed = await eventually(
      async () => (await api.get('/v1/object-storage/buckets?limit=100')).body.data as any[],
      (data) => data.some((b) => b.name === `${prefix}made-over-s3`),
      10_000,
    );
    expect(listed.find((b) => b.name === `${prefix}made-over-s3`)).toEqual({
      object: 'bucket',
      name: `${prefix}made-over-s3`,
      access: 'private',
      public_url: null,
      created_at: null,
    });
    const one = await api.get(`/v1/object-storage/buckets/${prefix}made-over-s3`);
    expect(one.body.created_at).toBeNull();
  });

  it('lists one level at a time with folders, refuses limit, and counts only the keys that existed when deleting', async () => {
    const bucket = `${prefix}beta`;
    const client = s3Client(storage, await newKey('lister'));
    await ready(client, bucket);
    for (const k of ['docs/a.txt', 'docs/b.txt', 'docs/deep/c.txt', 'top.txt', 'empty/gone.txt']) {
      await client.send(new PutObjectCommand({ Bucket: bucket, Key: k, Body: k }));
    }
    const del = await api.post(`/v1/object-storage/buckets/${bucket}/objects/delete`, { keys: ['empty/gone.txt', 'never/was.txt', 'top.txt'] });
    expect(del.status, del.text).toBe(200);
    expect(del.body).toEqual({ object: 'objects_delete', deleted: 2 });

    const top = await api.get(`/v1/object-storage/buckets/${bucket}/objects`);
    expect(top.status, top.text).toBe(200);
    // `empty/` lost its last object: SeaweedFS keeps the directory, the listing does not show it.
    expect(top.body.data.map((e: any) => [e.key, e.is_folder])).toEqual([
      ['b.txt', false],
      ['docs/', true],
    ]);
    expect(top.body.data[1]).toMatchObject({ size_bytes: null, last_modified: null, etag: null });
    expect(top.body.data[0]).toMatchObject({ object: 's3_object', size_bytes: 1 });
    const docs = await api.get(`/v1/object-storage/buckets/${bucket}/objects?prefix=docs/`);
    expect(docs.body.data.map((e: any) => e.key)).toEqual(['docs/a.txt', 'docs/b.txt', 'docs/deep/']);
    expect(docs.body.has_more).toBe(false);
    const limited = await api.get(`/v1/object-storage/buckets/${bucket}/objects?limit=5`);
    expect(limited.status).toBe(400);
    expect(limited.body.error.param).toBe('limit');
  });

  it('pages a listing of more than 1000 entries with an opaque cursor', async () => {
    const bucket = `${prefix}many`;
    await newBucket(bucket);
    const client = s3Client(storage, await newKey('many'));
    await ready(client, bucket);
    const names = Array.from({ length: 1005 }, (_, i) => `o${String(i).padStart(4, '0')}`);
    for (let i = 0; i < names.length; i += 50)
      await Promise.all(names.slice(i, i + 50).map((Key) => client.send(new PutObjectCommand({ Bucket: bucket, Key, Body: 'x' }))));
    const first = await api.get(`/v1/object-storage/buckets/${bucket}/objects`);
    expect(first.body.data).toHaveLength(1000);
    expect(first.body.has_more).toBe(true);
    const second = await api.get(`/v1/object-storage/buckets/${bucket}/objects?cursor=${encodeURIComponent(first.body.next_cursor)}`);
    expect(second.body.data.map((e: any) => e.key)).toEqual(names.slice(1000));
    expect(second.body.has_more).toBe(false);
    const forged = await api.get(`/v1/object-storage/buckets/${bucket}/objects?cursor=${encodeURIComponent(first.body.next_cursor)}x`);
    expect(forged.status).toBe(400);
  });

  it('emptying deletes every object in pages and counts each once, also when the worker is replaced midway', async () => {
    const bucket = `${prefix}many`;
    const res = await api.post(`/v1/object-storage/buckets/${bucket}/empty`);
    expect(res.status, res.text).toBe(202);
    expect(res.body).toMatchObject({ type: 'objectstorage.empty', resource: { object: 'bucket', id: bucket } });
    // The first page (1000 objects) is counted: the worker goes and another comes.
    await eventually(
      () => stack.db('operations').where({ id: res.body.id }).first(),
      (row) => row.status === 'succeeded' || (row.result?.deleted ?? 0) >= 1000,
      30_000,
      20,
    );
    await stack.stopWorker();
    await stack.startWorker();
    const op = await waitForOperation(stack, res.body.id, 60_000);
    expect(op).toMatchObject({ status: 'succeeded', result: { deleted: 1005 } });
    const listing = await api.get(`/v1/object-storage/buckets/${bucket}/objects`);
    expect(listing.body.data).toEqual([]);
    expect((await api.get(`/v1/object-storage/buckets/${bucket}`)).status).toBe(200);
    expect(await stack.db('objectstorage_empty_pages').where({ operation_id: res.body.id })).toEqual([]);
  });

  it('a page retried after its worker died deletes the same keys and reports the same count (the page journal)', async () => {
    const bucket = `${prefix}journal`;
    await newBucket(bucket);
    const client = s3Client(storage, await newKey('journal'));
    await ready(client, bucket);
    const names = Array.from({ length: 1050 }, (_, i) => `j${String(i).padStart(4, '0')}`);
    for (let i = 0; i < names.length; i += 50)
      await Promise.all(names.slice(i, i + 50).map((Key) => client.send(new PutObjectCommand({ Bucket: bucket, Key, Body: 'x' }))));
    const activities = createObjectStorageActivities({ db: stack.db, providers: stack.api.deps.providers });
    const env = new MockActivityEnvironment();
    const page = (n: number) => env.run(activities.objectStorageEmptyPage, { operationId: 'op_journal_test', page: n, serviceId: storageServiceId, bucket });
    expect(await page(0)).toEqual({ deleted: 1000, done: false });
    // The same page again, as after a worker that deleted but died before reporting: same keys, same count, nothing else touched.
    expect(await page(0)).toEqual({ deleted: 1000, done: false });
    expect((await client.send(new ListObjectsV2Command({ Bucket: bucket }))).KeyCount).toBe(50);
    expect(await page(1)).toEqual({ deleted: 50, done: false });
    expect(await page(2)).toEqual({ deleted: 0, done: true });
    await env.run(activities.objectStorageEmptyForget, { operationId: 'op_journal_test' });
    expect(await stack.db('objectstorage_empty_pages').where({ operation_id: 'op_journal_test' })).toEqual([]);
  });

  it('refuses to delete a bucket with objects and touches nothing; purge=true deletes it with everything', async () => {
    const bucket = `${prefix}beta`;
    const refused = await api.del(`/v1/object-storage/buckets/${bucket}`);
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('bucket_not_empty');
    const still = await api.get(`/v1/object-storage/buckets/${bucket}/objects?prefix=docs/`);
    expect(still.body.data).toHaveLength(3);
    const bad = await api.del(`/v1/object-storage/buckets/${bucket}?purge=yes`);
    expect(bad.status).toBe(400);
    expect(bad.body.error.param).toBe('purge');
    const purged = await api.del(`/v1/object-storage/buckets/${bucket}?purge=true`);
    expect(purged.status, purged.text).toBe(204);
    expect((await api.get(`/v1/object-storage/buckets/${bucket}`)).status).toBe(404);
    const admin = s3Client(storage, await newKey('checker'));
    await ready(admin, `${prefix}alpha`);
    expect(await s3Outcome(admin.send(new HeadBucketCommand({ Bucket: bucket })))).not.toBe('ok');
    // The key scoped to it reaches nothing now.
    const keys = (await api.get('/v1/object-storage/keys?limit=100')).body.data as any[];
    expect(keys.find((k) => k.name === 'beta only')).toBeDefined();
  });

  it('takes a usage snapshot: a point per bucket for today, and the totals of the singleton', async () => {
    const client = s3Client(storage, await newKey('traffic'));
    await ready(client, `${prefix}alpha`);
    for (let i = 0; i < 3; i++) await (await client.send(new GetObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt' }))).Body!.transformToString();
    const snap = await stack.http.post('/_dev/objectstorage/snapshot', {});
    expect(snap.status, snap.text).toBe(200);
    const today = new Date().toISOString().slice(0, 10);
    const metrics = await api.get(`/v1/object-storage/buckets/${prefix}alpha/metrics`);
    expect(metrics.status, metrics.text).toBe(200);
    expect(metrics.body).toMatchObject({ object: 'bucket_metrics', bucket: `${prefix}alpha`, to: today });
    const storagePoint = metrics.body.storage.find((p: any) => p.date === today);
    expect(storagePoint.value).toBe('hello'.length + 'uploaded with a presigned URL'.length);
    const egress = metrics.body.egress.find((p: any) => p.date === today).value;
    const requests = metrics.body.requests.find((p: any) => p.date === today).value;
    expect(egress).toBeGreaterThanOrEqual(3 * 'hello'.length);
    expect(requests).toBeGreaterThanOrEqual(3);
    // Retaken: today's point is replaced, and the counters add only what they grew since.
    await client.send(new GetObjectCommand({ Bucket: `${prefix}alpha`, Key: 'hello.txt' }));
    await stack.http.post('/_dev/objectstorage/snapshot', {});
    const after = await api.get(`/v1/object-storage/buckets/${prefix}alpha/metrics?from=${today}&to=${today}`);
    expect(after.body.requests).toHaveLength(1);
    expect(after.body.requests[0].value).toBeGreaterThan(requests);
    expect(after.body.requests[0].value).toBeLessThan(requests + 10);
    const single = await api.get('/v1/object-storage');
    expect(single.body).toMatchObject({ snapshot_date: today, object_count: 2 });
    expect(single.body.storage_bytes).toBeGreaterThanOrEqual(storagePoint.value);
  });

  it('while the server is switched off: reads answer from PostgreSQL, changes answer 503 and apply nothing', async () => {
    await stack.api.deps.providers.switchboard.setDown('objectstorage', true);
    try {
      await new Promise((r) => setTimeout(r, 300));
      expect((await api.get('/v1/object-storage')).status).toBe(200);
      expect((await api.get('/v1/object-storage/buckets')).status).toBe(200);
      expect((await api.get('/v1/object-storage/keys')).status).toBe(200);
      const made = await api.post('/v1/object-storage/buckets', { name: `${prefix}during-outage` });
      expect(made.status).toBe(503);
      expect(made.body.error.code).toBe('backend_unavailable');
      expect((await api.get(`/v1/object-storage/buckets/${prefix}during-outage`)).status).toBe(404);
      expect((await api.post('/v1/object-storage/keys', { name: 'during outage' })).status).toBe(503);
      expect((await api.get(`/v1/object-storage/buckets/${prefix}alpha/objects`)).status).toBe(503);
    } finally {
      await stack.api.deps.providers.switchboard.setDown('objectstorage', false);
      await new Promise((r) => setTimeout(r, 300));
    }
  });

  it('exploits: the filer and volume ports refuse requests that go round S3, and a presigned key cannot climb out of its bucket', async () => {
    const settings = SeaweedServer.settingsOf(stack.config.OBJECTSTORAGE_DATA_DIR)!;
    const filer = `http://${settings.bindAddress}:${settings.ports.filer}`;
    // The filer's HTTP API would hand out every bucket's objects, and take writes, to any process on the host.
    expect((await fetch(`${filer}/buckets/${prefix}alpha/hello.txt`)).status).toBe(401);
    expect((await fetch(`${filer}/buckets/`, { headers: { accept: 'application/json' } })).status).toBe(401);
    expect((await fetch(`${filer}/buckets/${prefix}alpha/planted.txt`, { method: 'PUT', body: 'x' })).status).toBe(401);

    // Another account's bucket, and a URL presigned by this account's key whose object key walks up into it.
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const t = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['objectstorage:read', 'objectstorage:write', 'objectstorage:keys'] })).token;
    await provisionStorage(stack, accountId);
    const victim = `cus${accountId}-victim`;
    await newBucket(victim, t);
    const theirs = s3Client((await api.get('/v1/object-storage', t)).body, await newKey('victim', undefined, t));
    await ready(theirs, victim);
    await theirs.send(new PutObjectCommand({ Bucket: victim, Key: 'secret.txt', Body: 'not yours' }));
    const signer = await newKey('climber');
    await ready(s3Client(storage, signer), `${prefix}alpha`);
    for (const key of [`../${victim}/secret.txt`, `..%2F${victim}%2Fsecret.txt`, `/../${victim}/secret.txt`]) {
      const url = await api.post(`/v1/object-storage/buckets/${prefix}alpha/presign`, { key, method: 'GET', key_id: signer.id });
      expect(url.status, url.text).toBe(200);
      const res = await fetch(url.body.url);
      expect(res.status, `${key}: ${url.body.url}`).not.toBe(200);
      expect(await res.text()).not.toContain('not yours');
    }
    // Bucket names in paths are the API's to check: a traversal is no bucket of the account.
    expect((await api.get(`/v1/object-storage/buckets/..%2F${victim}`)).status).toBe(404);
    expect((await api.post(`/v1/object-storage/buckets/${victim}/presign`, { key: 'secret.txt', method: 'GET', key_id: signer.id })).status).toBe(404);
  });

  it('keeps secrets out of the audit log and the logs of requests', async () => {
    const key = await newKey('audited');
    const rows = await stack.db('audit_logs').select('*');
    expect(JSON.stringify(rows)).not.toContain(key.secret_access_key);
  });

  it('a restarted server keeps the keys, their policies, public access and the objects', async () => {
    const bucket = `${prefix}restart`;
    await newBucket(bucket);
    const scoped = await newKey('survivor', bucket);
    const client = s3Client(storage, scoped);
    await ready(client, bucket);
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: 'hello.txt', Body: 'still here' }));
    await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'public' });
    await eventually(
      async () => (await fetch(`${storage.s3_endpoint}/${bucket}/hello.txt`)).status,
      (s) => s === 200,
      5_000,
    );

    await stopSeaweedServer(stack.config.OBJECTSTORAGE_DATA_DIR);
    expect(await s3Outcome(client.send(new GetObjectCommand({ Bucket: bucket, Key: 'hello.txt' })))).not.toBe('ok');
    // The host's keeper starts it again, on the same port.
    const back = await eventually(
      () => s3Outcome(client.send(new GetObjectCommand({ Bucket: bucket, Key: 'hello.txt' }))),
      (o) => o === 'ok',
      30_000,
      200,
    );
    expect(back).toBe('ok');
    // Still scoped: the bucket beside it stays out of reach.
    await newBucket(`${prefix}restart-other`);
    expect(await s3Outcome(client.send(new ListObjectsV2Command({ Bucket: `${prefix}restart-other` })))).toBe('AccessDenied');
    expect((await fetch(`${storage.s3_endpoint}/${bucket}/hello.txt`)).status).toBe(200);
    await api.patch(`/v1/object-storage/buckets/${bucket}`, { access: 'private' });
    // And the API's calls reach it again.
    expect((await api.get(`/v1/object-storage/buckets/${bucket}/objects`)).status).toBe(200);
  });

  it('termination deletes the keys at once and keeps the buckets for the retention, then deletes them', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const t = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['objectstorage:read', 'objectstorage:write', 'objectstorage:keys'] })).token;
    const service = await provisionStorage(stack, accountId);
    const theirs = (await api.get('/v1/object-storage', t)).body;
    const bucket = `cus${accountId}-kept`;
    await newBucket(bucket, t);
    const client = s3Client(theirs, await newKey('to be terminated', undefined, t));
    await ready(client, bucket);
    await client.send(new PutObjectCommand({ Bucket: bucket, Key: 'data.txt', Body: 'kept for a while' }));
    const settings = SeaweedServer.settingsOf(stack.config.OBJECTSTORAGE_DATA_DIR)!;
    const admin = s3Client(theirs, { access_key_id: settings.admin.accessKeyId, secret_access_key: settings.admin.secretAccessKey });

    const terminated = await stack.http.post(`/_dev/services/${service.id}/terminate`, {});
    expect(terminated.status, terminated.text).toBe(200);
    // The teardown workflow deletes the keys: requests signed with them are refused.
    expect(
      await eventually(
        () => s3Outcome(client.send(new GetObjectCommand({ Bucket: bucket, Key: 'data.txt' }))),
        (o) => o !== 'ok',
        15_000,
      ),
    ).not.toBe('ok');
    // The record follows the server's deletion (key by key: the server first, then the record).
    expect(
      (
        await eventually(
          () => api.get('/v1/object-storage/keys', t),
          (r) => r.body.data.length === 0,
          5_000,
        )
      ).body.data,
    ).toEqual([]);
    // The bucket is still there, and readable as the account's storage (terminated), but not changeable.
    expect(await s3Outcome(admin.send(new HeadBucketCommand({ Bucket: bucket })))).toBe('ok');
    const single = await api.get('/v1/object-storage', t);
    expect(single.body.status).toBe('terminated');
    const refused = await api.post('/v1/object-storage/buckets', { name: `cus${accountId}-new` }, t);
    expect(refused.status).toBe(409);
    // After the retention the host's keeper deletes the buckets with their contents and forgets the storage.
    expect(
      await eventually(
        () => s3Outcome(admin.send(new HeadBucketCommand({ Bucket: bucket }))),
        (o) => o !== 'ok',
        20_000,
      ),
    ).not.toBe('ok');
    expect(
      (
        await eventually(
          () => api.get('/v1/object-storage', t),
          (r) => r.status === 404,
          5_000,
        )
      ).status,
    ).toBe(404);
    expect(await stack.db('objectstorage_buckets').where({ service_id: service.serviceId })).toEqual([]);
  });

  it('the demo seed gives a storage a real bucket with an object and a key that presigns a working URL, and is idempotent', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const t = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['objectstorage:read', 'objectstorage:write', 'objectstorage:keys'] })).token;
    await createService(stack.db, accountId, { family: 'objectstorage', product: 'objectstorage-250' });
    for (let run = 0; run < 2; run++) await seedObjectStorage(stack.db, stack.api.deps.providers, stack.api.deps.keyring);
    const buckets = (await api.get('/v1/object-storage/buckets', t)).body.data;
    expect(buckets.map((b: any) => b.name)).toEqual([demoBucketOf(accountId)]);
    const keys = (await api.get('/v1/object-storage/keys', t)).body.data;
    expect(keys.map((k: any) => k.name)).toEqual(['demo']);
    const url = await api.post(`/v1/object-storage/buckets/${demoBucketOf(accountId)}/presign`, { key: 'hello.txt', method: 'GET', key_id: keys[0].id }, t);
    const body = await eventually(
      async () => {
        const res = await fetch(url.body.url);
        return res.status === 200 ? res.text() : '';
      },
      (text) => text !== '',
      5_000,
    );
    expect(body).toContain('Hello');
  });
});
