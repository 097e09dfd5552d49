import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { objectStorageRoutes } from '../api/routes/objectstorage/routes';
import { seedOrders } from '../db/seeds/orders.seed';
import { reconcileBuckets } from '../domain/objectstorage/reconcile';
import { findStorage } from '../domain/objectstorage/store';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import type { HttpResponse } from './helpers/http';
import { startStack, type Stack } from './helpers/stack';
import { provisionStorage } from './objectstorage.support';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/**
 * The object storage API contract on the PostgreSQL simulator (OBJECTSTORAGE_BACKEND=simulator):
 * SPEC "Object storage" and DECISIONS "Object storage", "Data planes and outbound fetches",
 * "Orders" and "Pagination". What a real S3 server does with keys, presigned and public URLs is
 * test/objectstorage.real.test.ts; here every refusal is checked for its status, `error.code` and
 * `error.param`. Two stacks: one without Temporal for the API, one with it for the orders.
 */
const OS_SCOPES = ['objectstorage:read', 'objectstorage:write', 'objectstorage:keys'];

interface Account {
  accountId: number;
  token: string;
  /** The objectstorage service (numeric id), when the account has one. */
  serviceId: number | null;
  prefix: string;
}

/** Every /v1/object-storage route, with inputs the request validation accepts (so that only the storage lookup can refuse). */
const ROUTES: Array<{ method: string; path: string; body?: unknown }> = [
  { method: 'GET', path: '/v1/object-storage' },
  { method: 'GET', path: '/v1/object-storage/buckets' },
  { method: 'POST', path: '/v1/object-storage/buckets', body: { name: 'some-valid-bucket' } },
  { method: 'GET', path: '/v1/object-storage/buckets/{bucket}' },
  { method: 'PATCH', path: '/v1/object-storage/buckets/{bucket}', body: { access: 'public' } },
  { method: 'DELETE', path: '/v1/object-storage/buckets/{bucket}' },
  { method: 'POST', path: '/v1/object-storage/buckets/{bucket}/empty' },
  { method: 'GET', path: '/v1/object-storage/buckets/{bucket}/metrics' },
  { method: 'GET', path: '/v1/object-storage/buckets/{bucket}/objects' },
  { method: 'POST', path: '/v1/object-storage/buckets/{bucket}/objects/delete', body: { keys: ['a.txt'] } },
  { method: 'POST', path: '/v1/object-storage/buckets/{bucket}/presign', body: { key: 'a.txt', method: 'GET', key_id: 's3k_1' } },
  { method: 'POST', path: '/v1/object-storage/keys', body: { name: 'a key' } },
  { method: 'GET', path: '/v1/object-storage/keys' },
  { method: 'DELETE', path: '/v1/object-storage/keys/{key_id}' },
];

const concrete = (path: string) => path.replace('{bucket}', 'some-valid-bucket').replace('{key_id}', 's3k_1');

const today = () => new Date().toISOString().slice(0, 10);
const addDays = (day: string, n: number) => new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000).toISOString().slice(0, 10);

function expectError(res: HttpResponse, status: number, code: string, param: string | null = null): void {
  expect(res.status, res.text).toBe(status);
  expect(res.body.error, res.text).toMatchObject({ code, param });
  expect(res.body.error.request_id).toBe(res.headers.get('x-request-id'));
}

describe('object storage API on the simulator', () => {
  let stack: Stack;
  let main: Account;
  let other: Account;
  let s3Endpoint: string;

  const call = (token: string, method: string, path: string, body?: unknown) => stack.http.request(method, path, { token, body });
  const api = {
    get: (path: string, t = main.token) => call(t, 'GET', path),
    post: (path: string, body?: unknown, t = main.token) => call(t, 'POST', path, body),
    patch: (path: string, body: unknown, t = main.token) => call(t, 'PATCH', path, body),
    del: (path: string, t = main.token) => call(t, 'DELETE', path),
  };

  /** A fresh account with an owner, a key holding the object storage scopes and, unless `storage: false`, a provisioned storage. */
  async function account(opts: { storage?: boolean; scopes?: string[] } = {}): Promise<Account> {
    const { accountId } = await createAccount(stack.db);
    const { userId } = await createUser(stack.db, accountId, { isOwner: true });
    const key = await createApiKey(stack.db, accountId, userId, { scopes: opts.scopes ?? OS_SCOPES });
    const storage = opts.storage === false ? null : await provisionStorage(stack, accountId);
    return { accountId, token: key.token, serviceId: storage?.serviceId ?? null, prefix: `cus${accountId}-` };
  }

  async function newBucket(name: string, t = main.token): Promise<any> {
    const res = await api.post('/v1/object-storage/buckets', { name }, t);
    expect(res.status, res.text).toBe(201);
    return res.body;
  }

  async function newKey(name: string, scope?: string, t = main.token): Promise<any> {
    const res = await api.post('/v1/object-storage/keys', { name, ...(scope ? { scope } : {}) }, t);
    expect(res.status, res.text).toBe(201);
    return res.body;
  }

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none' });
    const storage = await provisionStorage(stack, stack.owner.accountId);
    main = { accountId: stack.owner.accountId, token: stack.owner.key, serviceId: storage.serviceId, prefix: `cus${stack.owner.accountId}-` };
    other = await account();
    const single = await api.get('/v1/object-storage');
    expect(single.status, single.text).toBe(200);
    s3Endpoint = single.body.s3_endpoint;
  }, 120_000);
  afterAll(() => stack?.close());

  describe('who has an object storage', () => {
    it('the route list checked here is every object storage route', () => {
      const declared = objectStorageRoutes.map((r) => `${r.method.toUpperCase()} ${r.path}`).sort();
      expect(ROUTES.map((r) => `${r.method} ${r.path}`).sort()).toEqual(declared);
    });

    it('answers 404 not_found on every path to an account without object storage', async () => {
      const bare = await account({ storage: false });
      // A service of another family does not make one.
      await createService(stack.db, bare.accountId, { family: 'vps' });
      for (const route of ROUTES) {
        const res = await call(bare.token, route.method, concrete(route.path), route.body);
        expect(res.status, `${route.method} ${route.path}: ${res.text}`).toBe(404);
        expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'not_found', param: null });
      }
    });

    it('answers 404 on every path to a key whose service_allowlist hides the storage service', async () => {
      const vps = await createService(stack.db, main.accountId, { family: 'vps' });
      const { userId } = await createUser(stack.db, main.accountId, { isOwner: true });
      const hidden = await createApiKey(stack.db, main.accountId, userId, { scopes: OS_SCOPES, allowlist: [vps.serviceId] });
      for (const route of ROUTES) {
        const res = await call(hidden.token, route.method, concrete(route.path), route.body);
        expect(res.status, `${route.method} ${route.path}: ${res.text}`).toBe(404);
        expect(res.body.error).toMatchObject({ code: 'not_found', param: null });
      }
      // The same user with the storage service on the allowlist sees it.
      const shown = await createApiKey(stack.db, main.accountId, userId, { scopes: OS_SCOPES, allowlist: [main.serviceId!] });
      expect((await api.get('/v1/object-storage', shown.token)).status).toBe(200);
    });

    it('answers 409 conflict on every path while the service exists but its storage is not provisioned yet', async () => {
      const building = await account({ storage: false });
      await createService(stack.db, building.accountId, { family: 'objectstorage', product: 'objectstorage-250' });
      for (const route of ROUTES) {
        const res = await call(building.token, route.method, concrete(route.path), route.body);
        expect(res.status, `${route.method} ${route.path}: ${res.text}`).toBe(409);
        expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'conflict', param: null });
      }
    });

    it('describes the provisioned storage: singleton fields, prefix of the account, no snapshot yet', async () => {
      const res = await api.get('/v1/object-storage');
      expect(res.body).toEqual({
        object: 'object_storage',
        service_id: `svc_${main.serviceId}`,
        status: 'active',
        s3_endpoint: expect.stringMatching(/^http:\/\/(127\.0\.0\.1|localhost):\d+$/),
        region: expect.any(String),
        bucket_prefix: main.prefix,
        bucket_count: 0,
        storage_bytes: null,
        object_count: null,
        snapshot_date: null,
      });
    });
  });

  describe('buckets', () => {
    it.each([
      ['too short', 'ab'],
      ['too long', 'a'.repeat(64)],
      ['uppercase', 'My-Bucket'],
      ['two dots in a row', 'my..bucket'],
      ['like an IP address', '192.168.10.20'],
      ['xn-- start', 'xn--bucket'],
      ['underscore', 'my_bucket'],
      ['ends with a hyphen', 'my-bucket-'],
    ])('refuses a name %s: 400 validation_failed, param name', async (_why, name) => {
      const res = await api.post('/v1/object-storage/buckets', { name });
      expectError(res, 400, 'validation_failed', 'name');
      expect((await api.get(`/v1/object-storage/buckets/${encodeURIComponent(name)}`)).status).toBe(404);
    });

    it('refuses a name under another account’s prefix (400 name), and a name taken in any account (409 already_exists)', async () => {
      const underOther = await api.post('/v1/object-storage/buckets', { name: `${other.prefix}x` });
      expectError(underOther, 400, 'validation_failed', 'name');
      // Even when that account has no such bucket, and for an account number with no account at all.
      expectError(await api.post('/v1/object-storage/buckets', { name: 'cus999999-x' }), 400, 'validation_failed', 'name');

      const created = await newBucket(`${main.prefix}taken`);
      expect(created).toEqual({ object: 'bucket', name: `${main.prefix}taken`, access: 'private', public_url: null, created_at: expect.any(String) });
      const shared = await newBucket('osh-shared-name-1');
      expect(shared.name).toBe('osh-shared-name-1');
      expectError(await api.post('/v1/object-storage/buckets', { name: 'osh-shared-name-1' }, other.token), 409, 'already_exists');
      expectError(await api.post('/v1/object-storage/buckets', { name: 'osh-shared-name-1' }), 409, 'already_exists');
      // Not listed in the other account, and another account's bucket is a 404 there.
      expect((await api.get('/v1/object-storage/buckets/osh-shared-name-1', other.token)).status).toBe(404);
      const theirs = (await api.get('/v1/object-storage/buckets?limit=100', other.token)).body.data.map((b: any) => b.name);
      expect(theirs).not.toContain('osh-shared-name-1');
      expectError(await api.del('/v1/object-storage/buckets/osh-shared-name-1', other.token), 404, 'not_found');
      expectError(await api.patch('/v1/object-storage/buckets/osh-shared-name-1', { access: 'public' }, other.token), 404, 'not_found');
    });

    it('holds at most 100 buckets: the 101st is 429 quota_exceeded and is not created', async () => {
      const full = await account();
      await stack
        .db('objectstorage_buckets')
        .insert(
          Array.from({ length: 100 }, (_, i) => ({ name: `${full.prefix}q${String(i).padStart(3, '0')}`, service_id: full.serviceId, created_at: new Date() })),
        );
      expect((await api.get('/v1/object-storage', full.token)).body.bucket_count).toBe(100);
      const res = await api.post('/v1/object-storage/buckets', { name: `${full.prefix}one-more` }, full.token);
      expectError(res, 429, 'quota_exceeded');
      expect(res.body.error.type).toBe('rate_limit_error');
      expect((await api.get(`/v1/object-storage/buckets/${full.prefix}one-more`, full.token)).status).toBe(404);
      expect(await stack.db('sim_objectstorage_buckets').where({ name: `${full.prefix}one-more` })).toEqual([]);
      // One fewer, and there is room again.
      await stack
        .db('objectstorage_buckets')
        .where({ name: `${full.prefix}q000` })
        .delete();
      expect((await api.post('/v1/object-storage/buckets', { name: `${full.prefix}one-more` }, full.token)).status).toBe(201);
    });

    it('lists newest first, pages with limit and an opaque cursor, and refuses a bad limit or cursor', async () => {
      const lister = await account();
      const names = ['a', 'b', 'c', 'd', 'e'].map((s) => `${lister.prefix}list-${s}`);
      for (const name of names) await newBucket(name, lister.token);
      const first = await api.get('/v1/object-storage/buckets?limit=2', lister.token);
      expect(first.status, first.text).toBe(200);
      expect(first.body).toMatchObject({ object: 'list', has_more: true, next_cursor: expect.any(String) });
      expect(first.body.data.map((b: any) => b.name)).toEqual([names[4], names[3]]);
      const second = await api.get(`/v1/object-storage/buckets?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`, lister.token);
      expect(second.body.data.map((b: any) => b.name)).toEqual([names[2], names[1]]);
      expect(second.body.has_more).toBe(true);
      const third = await api.get(`/v1/object-storage/buckets?limit=2&cursor=${encodeURIComponent(second.body.next_cursor)}`, lister.token);
      expect(third.body).toMatchObject({ has_more: false, next_cursor: null });
      expect(third.body.data.map((b: any) => b.name)).toEqual([names[0]]);
      // Default page size 20: all five, newest first.
      const all = await api.get('/v1/object-storage/buckets', lister.token);
      expect(all.body.data.map((b: any) => b.name)).toEqual([...names].reverse());
      expect(all.body.has_more).toBe(false);

      expectError(await api.get('/v1/object-storage/buckets?limit=0', lister.token), 400, 'validation_failed', 'limit');
      expectError(await api.get('/v1/object-storage/buckets?limit=101', lister.token), 400, 'validation_failed', 'limit');
      expectError(await api.get('/v1/object-storage/buckets?cursor=forged', lister.token), 400, 'validation_failed', 'cursor');
      // A cursor of another account's list is not one of this list.
      expectError(
        await api.get(`/v1/object-storage/buckets?limit=2&cursor=${encodeURIComponent(first.body.next_cursor)}`, main.token),
        400,
        'validation_failed',
        'cursor',
      );
    });

    // SPEC conventions 2 (cursor pagination; `has_more` the only signal) and the bucket list's "includes buckets
    // created directly over the S3 protocol": walking the pages reaches every bucket exactly once, also those one
    // reconcile pass records in one transaction (same `recorded_at`, to the microsecond).
    it('pages through every bucket when several were recorded at the same instant (buckets found over S3 by one reconcile pass)', async () => {
      const lister = await account();
      await newBucket(`${lister.prefix}api-made`, lister.token);
      const overS3 = ['s3-a', 's3-b', 's3-c', 's3-d'].map((s) => `${lister.prefix}${s}`);
      await stack.db('sim_objectstorage_buckets').insert(overS3.map((name) => ({ name })));
      const storage = (await findStorage(stack.db, lister.serviceId!))!;
      const { added } = await reconcileBuckets(stack.db, stack.api.deps.providers.objectstorage, storage);
      expect(added.sort()).toEqual(overS3);

      const seen: string[] = [];
      let cursor: string | null = null;
      for (let page = 0; page < 10; page++) {
        const res: HttpResponse = await api.get(`/v1/object-storage/buckets?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, lister.token);
        expect(res.status, res.text).toBe(200);
        seen.push(...res.body.data.map((b: any) => b.name));
        cursor = res.body.has_more ? res.body.next_cursor : null;
        if (!cursor) break;
      }
      expect(seen.sort()).toEqual([`${lister.prefix}api-made`, ...overS3].sort());
      const listed = (await api.get('/v1/object-storage/buckets', lister.token)).body.data;
      expect(listed.find((b: any) => b.name === overS3[0])).toEqual({
        object: 'bucket',
        name: overS3[0],
        access: 'private',
        public_url: null,
        created_at: null,
      });
    });

    it('PATCH access: public mints public_url {s3_endpoint}/{name}/, private keeps it, republishing reuses it', async () => {
      const name = `${main.prefix}published`;
      await newBucket(name);
      const pub = await api.patch(`/v1/object-storage/buckets/${name}`, { access: 'public' });
      expect(pub.status, pub.text).toBe(200);
      expect(pub.body).toEqual({ object: 'bucket', name, access: 'public', public_url: `${s3Endpoint}/${name}/`, created_at: expect.any(String) });
      const priv = await api.patch(`/v1/object-storage/buckets/${name}`, { access: 'private' });
      expect(priv.body).toMatchObject({ access: 'private', public_url: `${s3Endpoint}/${name}/` });
      expect((await api.get(`/v1/object-storage/buckets/${name}`)).body).toMatchObject({ access: 'private', public_url: `${s3Endpoint}/${name}/` });
      const again = await api.patch(`/v1/object-storage/buckets/${name}`, { access: 'public' });
      expect(again.body).toMatchObject({ access: 'public', public_url: pub.body.public_url });
      // A bucket never published has none; an invalid access is refused.
      const never = await newBucket(`${main.prefix}never-published`);
      expect(never.public_url).toBeNull();
      expect((await api.patch(`/v1/object-storage/buckets/${main.prefix}never-published`, { access: 'private' })).body.public_url).toBeNull();
      expectError(await api.patch(`/v1/object-storage/buckets/${name}`, { access: 'world' }), 400, 'validation_failed', 'access');
      expectError(await api.patch(`/v1/object-storage/buckets/${main.prefix}no-such`, { access: 'public' }), 404, 'not_found');
    });

    it('DELETE: a bad purge is 400 purge; a bucket with objects is 409 bucket_not_empty and untouched; purge=true deletes it', async () => {
      const name = `${main.prefix}full`;
      await newBucket(name);
      await stack.api.deps.providers.objectstorage.putObject(main.serviceId!, name, 'keep/me.txt', 'hello');
      expectError(await api.del(`/v1/object-storage/buckets/${name}?purge=maybe`), 400, 'validation_failed', 'purge');
      expectError(await api.del(`/v1/object-storage/buckets/${name}?purge=TRUE`), 400, 'validation_failed', 'purge');
      expectError(await api.del(`/v1/object-storage/buckets/${name}`), 409, 'bucket_not_empty');
      expectError(await api.del(`/v1/object-storage/buckets/${name}?purge=false`), 409, 'bucket_not_empty');
      expect((await api.get(`/v1/object-storage/buckets/${name}`)).status).toBe(200);
      const still = await api.get(`/v1/object-storage/buckets/${name}/objects?prefix=keep/`);
      expect(still.body.data.map((e: any) => e.key)).toEqual(['keep/me.txt']);

      const purged = await api.del(`/v1/object-storage/buckets/${name}?purge=true`);
      expect(purged.status, purged.text).toBe(204);
      expectError(await api.get(`/v1/object-storage/buckets/${name}`), 404, 'not_found');
      expect(await stack.db('sim_objectstorage_buckets').where({ name })).toEqual([]);
      expect(await stack.db('sim_objectstorage_objects').where({ bucket: name })).toEqual([]);
      // An empty bucket goes without purge; a deleted one is a 404.
      const empty = `${main.prefix}empty-one`;
      await newBucket(empty);
      expect((await api.del(`/v1/object-storage/buckets/${empty}`)).status).toBe(204);
      expectError(await api.del(`/v1/object-storage/buckets/${empty}`), 404, 'not_found');
      // The name is free again.
      await newBucket(name);
    });
  });

  describe('objects', () => {
    const bucket = () => `${main.prefix}objects`;

    beforeAll(async () => {
      await newBucket(bucket());
      for (const key of ['docs/a.txt', 'docs/b.txt', 'docs/deep/c.txt', 'top.txt', 'zz/only.txt']) {
        await stack.api.deps.providers.objectstorage.putObject(main.serviceId!, bucket(), key, `body of ${key}`);
      }
    });

    it('lists one level at a time: folders (key ending in /, other fields null) and objects, sorted by key', async () => {
      const top = await api.get(`/v1/object-storage/buckets/${bucket()}/objects`);
      expect(top.status, top.text).toBe(200);
      expect(top.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
      expect(top.body.data).toEqual([
        { object: 's3_object', key: 'docs/', is_folder: true, size_bytes: null, last_modified: null, etag: null },
        {
          object: 's3_object',
          key: 'top.txt',
          is_folder: false,
          size_bytes: 'body of top.txt'.length,
          last_modified: expect.any(String),
          etag: expect.any(String),
        },
        { object: 's3_object', key: 'zz/', is_folder: true, size_bytes: null, last_modified: null, etag: null },
      ]);
      const docs = await api.get(`/v1/object-storage/buckets/${bucket()}/objects?prefix=docs/`);
      expect(docs.body.data.map((e: any) => [e.key, e.is_folder])).toEqual([
        ['docs/a.txt', false],
        ['docs/b.txt', false],
        ['docs/deep/', true],
      ]);
      const deep = await api.get(`/v1/object-storage/buckets/${bucket()}/objects?prefix=${encodeURIComponent('docs/deep/')}`);
      expect(deep.body.data.map((e: any) => e.key)).toEqual(['docs/deep/c.txt']);
      const nothing = await api.get(`/v1/object-storage/buckets/${bucket()}/objects?prefix=nowhere/`);
      expect(nothing.body.data).toEqual([]);
    });

    it('refuses limit (400 limit), a forged cursor (400 cursor), and another account’s bucket (404)', async () => {
      expectError(await api.get(`/v1/object-storage/buckets/${bucket()}/objects?limit=10`), 400, 'validation_failed', 'limit');
      expectError(await api.get(`/v1/object-storage/buckets/${bucket()}/objects?cursor=forged`), 400, 'validation_failed', 'cursor');
      expectError(await api.get(`/v1/object-storage/buckets/${bucket()}/objects`, other.token), 404, 'not_found');
      expectError(await api.get(`/v1/object-storage/buckets/${main.prefix}no-such/objects`), 404, 'not_found');
    });

    it('objects/delete takes 1 to 1000 keys and counts only those that existed', async () => {
      const path = `/v1/object-storage/buckets/${bucket()}/objects/delete`;
      expectError(await api.post(path, { keys: [] }), 400, 'validation_failed', 'keys');
      const tooMany = Array.from({ length: 1001 }, (_, i) => `k${i}`);
      expectError(await api.post(path, { keys: tooMany }), 400, 'validation_failed', 'keys');
      expectError(await api.post(path, {}), 400, 'validation_failed', 'keys');
      expectError(await api.post(path, { keys: ['zz/only.txt'] }, other.token), 404, 'not_found');

      const res = await api.post(path, { keys: ['zz/only.txt', 'never/was.txt', 'top.txt', 'top.txt'] });
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ object: 'objects_delete', deleted: 2 });
      // 1000 keys is allowed; none of them exist.
      expect((await api.post(path, { keys: tooMany.slice(0, 1000) })).body).toEqual({ object: 'objects_delete', deleted: 0 });
      const top = await api.get(`/v1/object-storage/buckets/${bucket()}/objects`);
      // A folder is listed only while an object lies under it.
      expect(top.body.data.map((e: any) => e.key)).toEqual(['docs/']);
    });
  });

  describe('metrics', () => {
    const bucket = () => `${main.prefix}metered`;
    const path = () => `/v1/object-storage/buckets/${bucket()}/metrics`;

    beforeAll(async () => {
      await newBucket(bucket());
    });

    it.each([
      ['from', 'from=yesterday'],
      ['from', 'from=2026-13-01'],
      ['to', 'to=2025-02-30'],
      ['to', 'to=20250101'],
    ])('a bad date is 400 validation_failed, param %s (%s)', async (param, query) => {
      expectError(await api.get(`${path()}?${query}`), 400, 'validation_failed', param);
    });

    it('from after to, or a range over 366 days, is 400 param from; 366 days is accepted', async () => {
      expectError(await api.get(`${path()}?from=2025-03-02&to=2025-03-01`), 400, 'validation_failed', 'from');
      // 2023-12-31..2024-12-31 is 367 days.
      expectError(await api.get(`${path()}?from=2023-12-31&to=2024-12-31`), 400, 'validation_failed', 'from');
      // 2024 is a leap year: 2024-01-01..2024-12-31 is 366 days.
      const longest = await api.get(`${path()}?from=2024-01-01&to=2024-12-31`);
      expect(longest.status, longest.text).toBe(200);
      expect(longest.body).toMatchObject({ from: '2024-01-01', to: '2024-12-31' });
      const oneDay = await api.get(`${path()}?from=2025-03-01&to=2025-03-01`);
      expect(oneDay.status).toBe(200);
      // Only `to`: the range is the 30 days to it.
      expect((await api.get(`${path()}?to=2025-03-31`)).body).toMatchObject({ from: '2025-03-02', to: '2025-03-31' });
      // Only a `from` more than 366 days back from today.
      expectError(await api.get(`${path()}?from=${addDays(today(), -366)}`), 400, 'validation_failed', 'from');
    });

    it('defaults to the 30 days to today, with empty series before any snapshot; a snapshot adds today’s point', async () => {
      const res = await api.get(path());
      expect(res.status, res.text).toBe(200);
      expect(res.body).toEqual({ object: 'bucket_metrics', bucket: bucket(), from: addDays(today(), -29), to: today(), storage: [], egress: [], requests: [] });
      expectError(await api.get(`/v1/object-storage/buckets/${main.prefix}no-such/metrics`), 404, 'not_found');
      expectError(await api.get(path(), other.token), 404, 'not_found');

      await stack.api.deps.providers.objectstorage.putObject(main.serviceId!, bucket(), 'one.bin', '12345');
      const snap = await stack.http.post('/_dev/objectstorage/snapshot', {});
      expect(snap.status, snap.text).toBe(200);
      const after = await api.get(path());
      expect(after.body.storage).toEqual([{ date: today(), value: 5 }]);
      expect(after.body.egress).toEqual([{ date: today(), value: 0 }]);
      expect(after.body.requests).toEqual([{ date: today(), value: 0 }]);
      const single = await api.get('/v1/object-storage');
      expect(single.body).toMatchObject({ snapshot_date: today(), storage_bytes: expect.any(Number), object_count: expect.any(Number) });
    });
  });

  describe('S3 keys', () => {
    it('creates a key with its secret once (Cache-Control: no-store); a scope must be a bucket of the account (400 scope)', async () => {
      const res = await api.post('/v1/object-storage/keys', { name: 'deploy job' });
      expect(res.status, res.text).toBe(201);
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(res.body).toEqual({
        object: 's3_key',
        id: expect.stringMatching(/^s3k_\d+$/),
        name: 'deploy job',
        access_key_id: expect.stringMatching(/^[A-Z0-9]{20}$/),
        scope: null,
        created_at: expect.any(String),
        secret_access_key: expect.any(String),
      });
      expect(res.body.secret_access_key.length).toBeGreaterThanOrEqual(20);

      await newBucket(`${main.prefix}scoped`);
      const scoped = await newKey('scoped', `${main.prefix}scoped`);
      expect(scoped.scope).toBe(`${main.prefix}scoped`);
      const nullScope = await api.post('/v1/object-storage/keys', { name: 'explicit null', scope: null });
      expect(nullScope.status).toBe(201);
      expect(nullScope.body.scope).toBeNull();

      expectError(await api.post('/v1/object-storage/keys', { name: 'nowhere', scope: `${main.prefix}no-such` }), 400, 'validation_failed', 'scope');
      expectError(await api.post('/v1/object-storage/keys', { name: 'theirs', scope: 'osh-shared-name-1' }, other.token), 400, 'validation_failed', 'scope');
      expectError(await api.post('/v1/object-storage/keys', { name: '' }), 400, 'validation_failed', 'name');
      expectError(await api.post('/v1/object-storage/keys', { name: 'x'.repeat(256) }), 400, 'validation_failed', 'name');
    });

    it('lists active keys only, newest first, never a secret; deletes immediately; an unknown or foreign key is 404', async () => {
      const lister = await account();
      const made = [];
      for (const name of ['first', 'second', 'third']) made.push(await newKey(name, undefined, lister.token));
      const list = await api.get('/v1/object-storage/keys', lister.token);
      expect(list.status).toBe(200);
      expect(list.body.data.map((k: any) => k.name)).toEqual(['third', 'second', 'first']);
      for (const k of list.body.data) expect(k).not.toHaveProperty('secret_access_key');
      for (const k of made) expect(list.text).not.toContain(k.secret_access_key);
      expect(list.body.data[2]).toEqual({ ...made[0], secret_access_key: undefined });

      const page = await api.get('/v1/object-storage/keys?limit=2', lister.token);
      expect(page.body).toMatchObject({ has_more: true });
      expect(page.body.data.map((k: any) => k.name)).toEqual(['third', 'second']);
      const rest = await api.get(`/v1/object-storage/keys?limit=2&cursor=${encodeURIComponent(page.body.next_cursor)}`, lister.token);
      expect(rest.body).toMatchObject({ has_more: false, next_cursor: null });
      expect(rest.body.data.map((k: any) => k.name)).toEqual(['first']);

      const deleted = await api.del(`/v1/object-storage/keys/${made[1].id}`, lister.token);
      expect(deleted.status, deleted.text).toBe(204);
      expect((await api.get('/v1/object-storage/keys', lister.token)).body.data.map((k: any) => k.name)).toEqual(['third', 'first']);
      expect(await stack.db('sim_objectstorage_keys').where({ name: made[1].id })).toEqual([]);
      expectError(await api.del(`/v1/object-storage/keys/${made[1].id}`, lister.token), 404, 'not_found');
      expectError(await api.del('/v1/object-storage/keys/s3k_999999', lister.token), 404, 'not_found');
      // Ids are accepted without the prefix; another account's key is a 404 and stays.
      expectError(await api.del(`/v1/object-storage/keys/${made[0].id}`, other.token), 404, 'not_found');
      expect((await api.del(`/v1/object-storage/keys/${made[0].id.slice('s3k_'.length)}`, lister.token)).status).toBe(204);
    });

    it('holds at most 20 active keys: the 21st is 429 quota_exceeded; deleting one makes room', async () => {
      const holder = await account();
      const keys = [];
      for (let i = 0; i < 20; i++) keys.push(await newKey(`key ${i}`, undefined, holder.token));
      const refused = await api.post('/v1/object-storage/keys', { name: 'key 20' }, holder.token);
      expectError(refused, 429, 'quota_exceeded');
      expect(refused.body.error.type).toBe('rate_limit_error');
      expect((await api.get('/v1/object-storage/keys?limit=100', holder.token)).body.data).toHaveLength(20);
      expect((await api.del(`/v1/object-storage/keys/${keys[5].id}`, holder.token)).status).toBe(204);
      await newKey('key 20', undefined, holder.token);
    });

    it('an S3 access key id is no /v1 credential: 401 wrong_credential_type', async () => {
      const key = await newKey('not a bearer');
      for (const path of ['/v1/object-storage', '/v1/account']) {
        const res = await stack.http.get(path, { token: key.access_key_id });
        expectError(res, 401, 'wrong_credential_type');
        expect(res.body.error.type).toBe('authentication_error');
      }
      // Nor is the secret (it is not an API key either).
      expect((await stack.http.get('/v1/object-storage', { token: key.secret_access_key })).status).toBe(401);
    });
  });

  describe('presign', () => {
    const bucket = () => `${main.prefix}signed`;
    let signer: any;

    beforeAll(async () => {
      await newBucket(bucket());
      signer = await newKey('signer');
    });

    it('answers {object, url, method, expires_at} with Cache-Control: no-store, signed by the key, on the s3_endpoint', async () => {
      const before = Date.now();
      const res = await api.post(`/v1/object-storage/buckets/${bucket()}/presign`, { key: 'dir/file.txt', method: 'GET', key_id: signer.id, ttl_seconds: 900 });
      expect(res.status, res.text).toBe(200);
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(Object.keys(res.body).sort()).toEqual(['expires_at', 'method', 'object', 'url']);
      expect(res.body).toMatchObject({ object: 'presigned_url', method: 'GET' });
      expect(res.body.url.startsWith(`${s3Endpoint}/${bucket()}/dir/file.txt?`)).toBe(true);
      const url = new URL(res.body.url);
      expect(url.searchParams.get('X-Amz-Expires')).toBe('900');
      expect(url.searchParams.get('X-Amz-Algorithm')).toBe('AWS4-HMAC-SHA256');
      expect(url.searchParams.get('X-Amz-Credential')!.startsWith(`${signer.access_key_id}/`)).toBe(true);
      const expires = Date.parse(res.body.expires_at);
      expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 900_000);
      expect(expires).toBeLessThanOrEqual(Date.now() + 900_000);

      // PUT, and the default TTL of 3600 s; the id without its prefix.
      const put = await api.post(`/v1/object-storage/buckets/${bucket()}/presign`, { key: 'up.bin', method: 'PUT', key_id: signer.id.slice('s3k_'.length) });
      expect(put.status, put.text).toBe(200);
      expect(put.body.method).toBe('PUT');
      expect(new URL(put.body.url).searchParams.get('X-Amz-Expires')).toBe('3600');
      const longest = await api.post(`/v1/object-storage/buckets/${bucket()}/presign`, { key: 'a', method: 'GET', key_id: signer.id, ttl_seconds: 604800 });
      expect(new URL(longest.body.url).searchParams.get('X-Amz-Expires')).toBe('604800');
    });

    it('key_id is required and must be an active key of the account: 400 key_id', async () => {
      const path = `/v1/object-storage/buckets/${bucket()}/presign`;
      expectError(await api.post(path, { key: 'a', method: 'GET' }), 400, 'validation_failed', 'key_id');
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: 's3k_999999' }), 400, 'validation_failed', 'key_id');
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: 'not-an-id' }), 400, 'validation_failed', 'key_id');
      const theirs = await newKey('theirs', undefined, other.token);
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: theirs.id }), 400, 'validation_failed', 'key_id');
      const gone = await newKey('gone');
      expect((await api.del(`/v1/object-storage/keys/${gone.id}`)).status).toBe(204);
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: gone.id }), 400, 'validation_failed', 'key_id');
    });

    it('ttl_seconds outside 1..604800 and an unknown method are 400; a bucket not of the account is 404', async () => {
      const path = `/v1/object-storage/buckets/${bucket()}/presign`;
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: signer.id, ttl_seconds: 0 }), 400, 'validation_failed', 'ttl_seconds');
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: signer.id, ttl_seconds: 604801 }), 400, 'validation_failed', 'ttl_seconds');
      expectError(await api.post(path, { key: 'a', method: 'GET', key_id: signer.id, ttl_seconds: 1.5 }), 400, 'validation_failed', 'ttl_seconds');
      expectError(await api.post(path, { key: 'a', method: 'DELETE', key_id: signer.id }), 400, 'validation_failed', 'method');
      expectError(await api.post(path, { method: 'GET', key_id: signer.id }), 400, 'validation_failed', 'key');
      await newBucket(`${other.prefix}private`, other.token);
      expectError(
        await api.post(`/v1/object-storage/buckets/${other.prefix}private/presign`, { key: 'a', method: 'GET', key_id: signer.id }),
        404,
        'not_found',
      );
      expectError(await api.post(`/v1/object-storage/buckets/${main.prefix}no-such/presign`, { key: 'a', method: 'GET', key_id: signer.id }), 404, 'not_found');
    });

    it('PUT needs objectstorage:write: a read-only credential gets 403 insufficient_scope; GET works for it', async () => {
      const { userId } = await createUser(stack.db, main.accountId, { isOwner: true });
      const reader = await createApiKey(stack.db, main.accountId, userId, { scopes: ['objectstorage:read'] });
      const path = `/v1/object-storage/buckets/${bucket()}/presign`;
      const put = await api.post(path, { key: 'a', method: 'PUT', key_id: signer.id }, reader.token);
      expectError(put, 403, 'insufficient_scope');
      expect(put.body.error).toMatchObject({ type: 'authorization_error', required_scope: 'objectstorage:write' });
      const get = await api.post(path, { key: 'a', method: 'GET', key_id: signer.id }, reader.token);
      expect(get.status, get.text).toBe(200);
      // Without objectstorage:read nothing is presigned.
      const writer = await createApiKey(stack.db, main.accountId, userId, { scopes: ['objectstorage:write'] });
      const noRead = await api.post(path, { key: 'a', method: 'GET', key_id: signer.id }, writer.token);
      expectError(noRead, 403, 'insufficient_scope');
      expect(noRead.body.error.required_scope).toBe('objectstorage:read');
    });
  });

  describe('a suspended service', () => {
    it('refuses changes with 409 conflict and still answers reads', async () => {
      const held = await account();
      await newBucket(`${held.prefix}kept`, held.token);
      const key = await newKey('kept', undefined, held.token);
      const moved = await stack.http.post(`/_dev/services/svc_${held.serviceId}/suspend`);
      expect(moved.status, moved.text).toBe(200);

      expectError(await api.post('/v1/object-storage/buckets', { name: `${held.prefix}new` }, held.token), 409, 'conflict');
      expectError(await api.patch(`/v1/object-storage/buckets/${held.prefix}kept`, { access: 'public' }, held.token), 409, 'conflict');
      expectError(await api.del(`/v1/object-storage/buckets/${held.prefix}kept`, held.token), 409, 'conflict');
      expectError(await api.post('/v1/object-storage/keys', { name: 'more' }, held.token), 409, 'conflict');
      expectError(await api.del(`/v1/object-storage/keys/${key.id}`, held.token), 409, 'conflict');
      expectError(await api.post(`/v1/object-storage/buckets/${held.prefix}kept/objects/delete`, { keys: ['a'] }, held.token), 409, 'conflict');
      expect(await stack.db('objectstorage_buckets').where({ name: `${held.prefix}new` })).toEqual([]);

      const single = await api.get('/v1/object-storage', held.token);
      expect(single.status).toBe(200);
      expect(single.body).toMatchObject({ status: 'suspended', bucket_count: 1 });
      const buckets = await api.get('/v1/object-storage/buckets', held.token);
      expect(buckets.status).toBe(200);
      expect(buckets.body.data.map((b: any) => b.name)).toEqual([`${held.prefix}kept`]);
      expect((await api.get(`/v1/object-storage/buckets/${held.prefix}kept`, held.token)).status).toBe(200);
      expect((await api.get('/v1/object-storage/keys', held.token)).body.data.map((k: any) => k.id)).toEqual([key.id]);
      expect((await api.get(`/v1/object-storage/buckets/${held.prefix}kept/objects`, held.token)).status).toBe(200);
      expect((await api.get(`/v1/object-storage/buckets/${held.prefix}kept/metrics`, held.token)).status).toBe(200);

      // Unsuspended, changes are taken again.
      expect((await stack.http.post(`/_dev/services/svc_${held.serviceId}/unsuspend`)).status).toBe(200);
      await newBucket(`${held.prefix}new`, held.token);
    });
  });
});

describe('ordering object storage', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms' } });
    await seedOrders(stack.db);
  }, 120_000);
  afterAll(() => stack?.close());

  const orderCount = async (accountId: number) => Number((await stack.db('orders').where({ account_id: accountId }).count({ n: '*' }).first())!.n);
  const finished = (id: string) =>
    waitFor(
      () => storedOperation(stack, id),
      (op) => op.status === 'succeeded' || op.status === 'failed',
      30_000,
    );

  it('an order of objectstorage-250 (WELCOME100) creates the account’s storage; a second order while it is live is 409 already_exists, before billing', async () => {
    const c = await newCustomer(stack);
    const before = await stack.http.get('/v1/object-storage', { token: c.token });
    expectError(before, 404, 'not_found');

    const order = await placeOrder(stack, c, { product: 'objectstorage-250', promo_code: 'WELCOME100' });
    expect(order.status, order.text).toBe(202);
    const op = await finished(order.body.id);
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    expect(op.result.service).toMatchObject({ family: 'objectstorage', status: 'active' });

    const single = await stack.http.get('/v1/object-storage', { token: c.token });
    expect(single.status, single.text).toBe(200);
    expect(single.body).toMatchObject({
      object: 'object_storage',
      service_id: op.result.service.id,
      status: 'active',
      bucket_prefix: `cus${c.accountId}-`,
      bucket_count: 0,
      storage_bytes: null,
    });
    const made = await stack.http.post('/v1/object-storage/buckets', { token: c.token, body: { name: `cus${c.accountId}-first` } });
    expect(made.status, made.text).toBe(201);

    const orders = await orderCount(c.accountId);
    for (const body of [
      { product: 'objectstorage-250', promo_code: 'WELCOME100' },
      { product: 'objectstorage-250', billing_cycle: 'annually' },
    ]) {
      const again = await placeOrder(stack, c, body);
      expectError(again, 409, 'already_exists', 'product');
    }
    expect(await orderCount(c.accountId)).toBe(orders);
    expect(await stack.db('services').where({ account_id: c.accountId, family: 'objectstorage' })).toHaveLength(1);
  });

  it('an unpaid order holds the place: a second order is refused until the first is paid, which creates the storage', async () => {
    const c = await newCustomer(stack, { credit: 0 });
    const order = await placeOrder(stack, c, { product: 'objectstorage-250' });
    expect(order.status, order.text).toBe(202);
    const pending = await waitFor(
      () => storedOperation(stack, order.body.id),
      (op) => !!op.result?.invoice,
    );
    expect(pending.status).toBe('pending');
    expect(pending.result.invoice).toMatchObject({ status: 'unpaid', total: 3 });

    const orders = await orderCount(c.accountId);
    expectError(await placeOrder(stack, c, { product: 'objectstorage-250', promo_code: 'WELCOME100' }), 409, 'already_exists', 'product');
    expect(await orderCount(c.accountId)).toBe(orders);

    const paid = await stack.http.post(`/_dev/invoices/${pending.result.invoice.id}/pay`);
    expect(paid.status, paid.text).toBe(200);
    const op = await finished(order.body.id);
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    const single = await stack.http.get('/v1/object-storage', { token: c.token });
    expect(single.status, single.text).toBe(200);
    expect(single.body).toMatchObject({ service_id: op.result.service.id, bucket_prefix: `cus${c.accountId}-` });
  });
});
