import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { existsSync, promises as fs, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { seedOrders } from '../db/seeds/orders.seed';
import { DEFAULT_CAPABILITIES } from '../domain/capabilities';
import type { DbEngine } from '../providers/dbaas.provider';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { instancePaths } from '../providers/dbinstances/engine';
import { DbaasBackupSchema, DbaasConnectionSchema, DbaasDatabaseSchema, DbaasSchema, DbaasStatsSchema, DbaasUserSchema } from '../api/routes/dbaas/schemas';
import { OperationSchema } from '../api/schemas';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { connectClient } from './dbaas.instances.support';
import { historyText, waitFor, waitForOperation } from './vps.support';

/**
 * The 16 DBaaS endpoints over HTTP against the real stack (PostgreSQL, Temporal dev server, worker)
 * and real instances of one engine under a temporary DBAAS_DATA_DIR: one file per engine
 * (test/dbaas.http.<engine>.test.ts), one instance shared by the file, one more made by an order.
 */
const PRODUCT: Record<DbEngine, string> = { postgresql: 'dbaas-postgres-s', mysql: 'dbaas-mysql-s' };
const enc = encodeURIComponent;
/** Where an instance listens: an address of its own in DBAAS_ADDRESS_RANGE (default 127.78.0.0/16). */
const INSTANCE_ADDRESS = expect.stringMatching(/^127\.78\.\d+\.\d+$/);

export function dbaasHttpSuite(engine: DbEngine) {
  const isMysql = engine === 'mysql';
  const userId = (name: string) => (isMysql ? `${name}@%` : name);
  let stack: Stack;
  let root: string;
  let token: string;
  let svc: { id: string; serviceId: number };
  const logLines: string[] = [];
  /** Every password the tests hand to the API, to look for them where they must not be. */
  const secrets: string[] = [];
  /** Workflow ids whose histories must hold no secret. */
  const workflows: string[] = [];

  const base = () => `/v1/dbaas/${svc.id}`;
  async function client(username: string, password: string, database?: string) {
    const conn = await stack.http.get(`${base()}/connection`, { token });
    expect(conn.status, conn.text).toBe(200);
    return connectClient(
      engine,
      { host: conn.body.host, port: conn.body.port, ca: conn.body.ca_certificate },
      username,
      password,
      database ?? conn.body.database ?? undefined,
    );
  }
  async function loginRefused(username: string, password: string, database?: string) {
    const session = await client(username, password, database).catch(() => null);
    await session?.close();
    return session === null;
  }
  async function adminPassword(): Promise<string> {
    const res = await stack.http.post(`${base()}/credentials`, { token });
    expect(res.status, res.text).toBe(200);
    secrets.push(res.body.password);
    return res.body.password;
  }

  beforeAll(async () => {
    root = mkdtempSync(path.join(os.tmpdir(), `dbaas-http-${engine}-`));
    stack = await startStack({ env: { DBAAS_BACKEND: 'instances', DBAAS_DATA_DIR: root, TEARDOWN_SWEEP_INTERVAL: '200ms', LOG_LEVEL: 'trace' }, logLines });
    token = stack.owner.key;
    await seedOrders(stack.db);
    svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product: PRODUCT[engine] });
    const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
    expect(attached.status, attached.text).toBe(200);
    // Its own address in DBAAS_ADDRESS_RANGE (the default 127.78.0.0/16), named by its certificate.
    expect(attached.body).toMatchObject({ engine, host: INSTANCE_ADDRESS });
  });
  afterAll(async () => {
    const adapter = new DbInstancesAdapter({ rootDir: root });
    for (const name of await adapter.instanceNames()) await adapter.destroyInstance(name).catch(() => undefined);
    await stack?.close();
    await fs.rm(root, { recursive: true, force: true });
  });

  describe(`GET /v1/dbaas and /v1/dbaas/{id} (${engine})`, () => {
    it('lists from the database: engine, state, host, plan null; capabilities without databases and users', async () => {
      const other = await createAccount(stack.db);
      const foreign = await createService(stack.db, other.accountId, { family: 'dbaas' });
      const res = await stack.http.get('/v1/dbaas?limit=100', { token });
      expect(res.status).toBe(200);
      const ids = res.body.data.map((d: any) => d.id);
      expect(ids).toContain(svc.id);
      expect(ids).not.toContain(foreign.id);
      const item = res.body.data.find((d: any) => d.id === svc.id);
      DbaasSchema.parse(item);
      expect(item).toMatchObject({ object: 'dbaas', engine: null, version: null, state: null, host: null, plan: null });
      const { databases: _d, users: _u, ...rest } = DEFAULT_CAPABILITIES.dbaas;
      expect(item.capabilities).toEqual(rest);
      expect('databases' in item.capabilities).toBe(false);
    });

    it('reads one live from its instance, with every capability', async () => {
      const res = await stack.http.get(base(), { token });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ object: 'dbaas', id: svc.id, engine, state: 'running', host: INSTANCE_ADDRESS, plan: PRODUCT[engine] });
      expect(res.body.version).toMatch(/^\d+\.\d+/);
      expect(res.body.capabilities).toEqual(DEFAULT_CAPABILITIES.dbaas);
    });

    it("404s another family's service and a service of another account", async () => {
      const vps = await createService(stack.db, stack.owner.accountId, { family: 'vps' });
      expect((await stack.http.get(`/v1/dbaas/${vps.id}`, { token })).status).toBe(404);
      const other = await createAccount(stack.db);
      const foreign = await createService(stack.db, other.accountId, { family: 'dbaas' });
      expect((await stack.http.get(`/v1/dbaas/${foreign.id}/connection`, { token })).status).toBe(404);
    });

    it("answers 409 for the instance's endpoints while a service has none yet; 400 for a capability the product lacks", async () => {
      const bare = await createService(stack.db, stack.owner.accountId, { family: 'dbaas' });
      const res = await stack.http.post(`/v1/dbaas/${bare.id}/databases`, { token, body: { name: 'x' } });
      expect(res.status).toBe(409);
      expect(res.body.error.code).toBe('conflict');
      const get = await stack.http.get(`/v1/dbaas/${bare.id}`, { token });
      expect(get.body).toMatchObject({ state: null, version: null, host: null });
      expect('users' in get.body.capabilities).toBe(false);
      await stack
        .db('services')
        .where({ id: svc.serviceId })
        .update({ capabilities: JSON.stringify({ ...DEFAULT_CAPABILITIES.dbaas, stats: false }) });
      const refused = await stack.http.get(`${base()}/stats`, { token });
      expect(refused.status).toBe(400);
      expect(refused.body.error.code).toBe('unsupported_for_product');
      await stack
        .db('services')
        .where({ id: svc.serviceId })
        .update({ capabilities: JSON.stringify(DEFAULT_CAPABILITIES.dbaas) });
    });
  });

  describe(`connection and credentials (${engine})`, () => {
    it('gives host, port, database, admin, TLS mode and CA, never a password; credentials give the admin password, unreplayed', async () => {
      const conn = await stack.http.get(`${base()}/connection`, { token });
      expect(conn.status).toBe(200);
      DbaasConnectionSchema.parse(conn.body);
      expect(conn.body).toMatchObject({
        object: 'dbaas_connection',
        host: INSTANCE_ADDRESS,
        database: isMysql ? null : 'postgres',
        username: 'admin',
        tls_mode: 'verify-full',
      });
      expect(conn.body.ca_certificate).toMatch(/^-----BEGIN CERTIFICATE-----/);
      const password = await adminPassword();
      expect(password.length).toBeGreaterThanOrEqual(12);
      expect(conn.text).not.toContain(password);

      const key = `cred-${randomUUID()}`;
      const first = await stack.http.post(`${base()}/credentials`, { token, headers: { 'idempotency-key': key } });
      const second = await stack.http.post(`${base()}/credentials`, { token, headers: { 'idempotency-key': key } });
      expect(second.status).toBe(200);
      expect(second.headers.get('idempotent-replayed')).toBeNull();
      expect(first.body.password).toBe(password);
      expect(await stack.db('idempotency_keys').where({ key })).toHaveLength(0);

      // TLS verified against the returned CA, with the revealed password.
      const session = await client('admin', password);
      expect(await session.alive()).toBe(true);
      await session.close();
    });

    it('credentials need dbaas:credentials', async () => {
      const key = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['dbaas:read', 'dbaas:write'] });
      const res = await stack.http.post(`${base()}/credentials`, { token: key.token });
      expect(res.status).toBe(403);
      expect(res.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'dbaas:credentials' });
    });
  });

  describe(`databases (${engine})`, () => {
    it('creates, lists, refuses duplicates and bad names, drops; a dropped database is gone', async () => {
      const created = await stack.http.post(`${base()}/databases`, { token, body: { name: 'shop' } });
      expect(created.status, created.text).toBe(201);
      DbaasDatabaseSchema.parse(created.body);
      expect(created.body).toEqual(
        isMysql
          ? { object: 'dbaas_database', name: 'shop', owner: null, charset: 'utf8mb4', collation: expect.stringMatching(/^utf8mb4_/) }
          : { object: 'dbaas_database', name: 'shop', owner: 'admin', charset: null, collation: null },
      );
      expect(Object.keys(created.body)).not.toContain('size_bytes');
      const list = await stack.http.get(`${base()}/databases`, { token });
      expect(list.body.data).toContainEqual(created.body);
      const dup = await stack.http.post(`${base()}/databases`, { token, body: { name: 'shop' } });
      expect(dup.status).toBe(409);
      expect(dup.body.error.code).toBe('conflict');
      for (const name of ['Shop', '1shop', 'a-b', 'x'.repeat(64), isMysql ? 'mysql' : 'postgres']) {
        const bad = await stack.http.post(`${base()}/databases`, { token, body: { name } });
        expect(bad.status, name).toBe(400);
        expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
      }
      const password = await adminPassword();
      await (await client('admin', password, 'shop')).close();

      const dropped = await stack.http.delete(`${base()}/databases/shop`, { token });
      expect(dropped.status).toBe(204);
      expect((await stack.http.get(`${base()}/databases`, { token })).body.data.map((d: any) => d.name)).not.toContain('shop');
      expect(await loginRefused('admin', password, 'shop')).toBe(true);
      const again = await stack.http.delete(`${base()}/databases/shop`, { token });
      expect(again.status).toBe(404);
    });

    it(isMysql ? 'applies charset and collation, ignores owner' : 'applies owner, ignores charset and collation', async () => {
      if (isMysql) {
        const res = await stack.http.post(`${base()}/databases`, {
          token,
          body: { name: 'legacy', charset: 'latin1', collation: 'latin1_general_ci', owner: 'nobody' },
        });
        expect(res.status, res.text).toBe(201);
        expect(res.body).toMatchObject({ owner: null, charset: 'latin1', collation: 'latin1_general_ci' });
        const bad = await stack.http.post(`${base()}/databases`, { token, body: { name: 'bad', charset: 'klingon' } });
        expect(bad.status).toBe(400);
        expect(bad.body.error.param).toBe('charset');
        await stack.http.delete(`${base()}/databases/legacy`, { token });
      } else {
        await stack.http.post(`${base()}/users`, { token, body: { username: 'owner_one', password: 'owner-one-password' } });
        secrets.push('owner-one-password');
        const res = await stack.http.post(`${base()}/databases`, { token, body: { name: 'owned', owner: 'owner_one', charset: 'latin1' } });
        expect(res.status, res.text).toBe(201);
        expect(res.body).toMatchObject({ owner: 'owner_one', charset: null, collation: null });
        const bad = await stack.http.post(`${base()}/databases`, { token, body: { name: 'orphan', owner: 'nobody_here' } });
        expect(bad.status).toBe(400);
        expect(bad.body.error.param).toBe('owner');
        await stack.http.delete(`${base()}/users/owner_one`, { token });
        await stack.http.delete(`${base()}/databases/owned`, { token });
      }
    });
  });

  describe(`users and passwords (${engine})`, () => {
    it('creates a user that logs in over TLS, lists it with the admin, refuses bad input', async () => {
      secrets.push('carol-password-1234');
      const created = await stack.http.post(`${base()}/users`, {
        token,
        body: { username: 'carol', password: 'carol-password-1234' },
        headers: { 'idempotency-key': `user-${randomUUID()}` },
      });
      expect(created.status, created.text).toBe(201);
      DbaasUserSchema.parse(created.body);
      expect(created.body).toEqual({ object: 'dbaas_user', id: userId('carol'), username: 'carol', host: isMysql ? '%' : null, is_admin: false });
      expect(created.text).not.toContain('carol-password-1234');
      const list = await stack.http.get(`${base()}/users`, { token });
      expect(list.body.data).toContainEqual(created.body);
      expect(list.body.data).toContainEqual({ object: 'dbaas_user', id: userId('admin'), username: 'admin', host: isMysql ? '%' : null, is_admin: true });
      const session = await client('carol', 'carol-password-1234');
      expect(await session.alive()).toBe(true);
      await session.close();

      const dup = await stack.http.post(`${base()}/users`, { token, body: { username: 'carol', password: 'another-password-1' } });
      expect(dup.status).toBe(409);
      const short = await stack.http.post(`${base()}/users`, { token, body: { username: 'dave', password: 'short' } });
      expect(short.status).toBe(400);
      expect(short.body.error).toMatchObject({ code: 'validation_failed', param: 'password' });
      const long = await stack.http.post(`${base()}/users`, { token, body: { username: 'dave', password: 'x'.repeat(129) } });
      expect(long.body.error.param).toBe('password');
      const reserved = await stack.http.post(`${base()}/users`, { token, body: { username: isMysql ? 'root' : 'postgres', password: 'long-enough-password' } });
      expect(reserved.body.error.param).toBe('username');
    });

    it("changes passwords with effect at once, the admin's too (credentials follow)", async () => {
      secrets.push('carol-second-password');
      const res = await stack.http.post(`${base()}/users/${enc(userId('carol'))}/password`, { token, body: { password: 'carol-second-password' } });
      expect(res.status, res.text).toBe(204);
      expect(await loginRefused('carol', 'carol-password-1234')).toBe(true);
      await (await client('carol', 'carol-second-password')).close();

      const before = await adminPassword();
      secrets.push('admin-second-password-1');
      const admin = await stack.http.post(`${base()}/users/admin/password`, { token, body: { password: 'admin-second-password-1' } });
      expect(admin.status).toBe(204);
      expect(await loginRefused('admin', before)).toBe(true);
      expect(await adminPassword()).toBe('admin-second-password-1');
      await (await client('admin', 'admin-second-password-1')).close();

      const missing = await stack.http.post(`${base()}/users/nobody_here/password`, { token, body: { password: 'whatever-password' } });
      expect(missing.status).toBe(404);
    });

    it('deletes a user, ending its sessions; the admin cannot be deleted; a missing user is 404', async () => {
      const session = await client('carol', 'carol-second-password');
      expect(await session.alive()).toBe(true);
      const res = await stack.http.delete(`${base()}/users/${enc(userId('carol'))}`, { token });
      expect(res.status, res.text).toBe(204);
      expect(await session.alive()).toBe(false);
      await session.close();
      expect((await stack.http.get(`${base()}/users`, { token })).body.data.map((u: any) => u.username)).not.toContain('carol');
      expect(await loginRefused('carol', 'carol-second-password')).toBe(true);
      expect((await stack.http.delete(`${base()}/users/carol`, { token })).status).toBe(404);
      const admin = await stack.http.delete(`${base()}/users/admin`, { token });
      expect(admin.status).toBe(409);
      const bad = await stack.http.delete(`${base()}/users/${enc('Bad Name')}`, { token });
      expect(bad.status).toBe(400);
    });
  });

  describe(`restart, logs, stats (${engine})`, () => {
    it('restarts for real: 202 with an operation already complete, open sessions end', async () => {
      const password = await adminPassword();
      const session = await client('admin', password);
      expect(await session.alive()).toBe(true);
      const res = await stack.http.post(`${base()}/restart`, { token, headers: { 'idempotency-key': `restart-${randomUUID()}` } });
      expect(res.status, res.text).toBe(202);
      OperationSchema.parse(res.body);
      expect(res.body).toMatchObject({
        object: 'operation',
        type: 'dbaas.restart',
        status: 'succeeded',
        progress: 100,
        resource: { object: 'dbaas', id: svc.id },
      });
      expect(res.body.completed_at).not.toBeNull();
      expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
      expect(await session.alive()).toBe(false);
      await session.close();
      const op = await stack.http.get(`/v1/operations/${res.body.id}`, { token });
      expect(op.body).toMatchObject({ id: res.body.id, status: 'succeeded' });
      expect((await stack.http.get(base(), { token })).body.state).toBe('running');
      await (await client('admin', password)).close();
    });

    it('tails the engine log: ?lines= default 100, at most 1000, oldest to newest', async () => {
      const res = await stack.http.get(`${base()}/logs?lines=5`, { token });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
      expect(res.body.data.length).toBeGreaterThan(0);
      expect(res.body.data.length).toBeLessThanOrEqual(5);
      const all = await stack.http.get(`${base()}/logs`, { token });
      expect(all.body.data.length).toBeLessThanOrEqual(100);
      expect(all.body.data.slice(-res.body.data.length)).toEqual(res.body.data);
      const times = all.body.data.map((e: any) => Date.parse(e.timestamp));
      expect([...times].sort((a, b) => a - b)).toEqual(times);
      // The restart of the test before is in it.
      expect(all.body.data.some((e: any) => /ready (to accept|for) connections/.test(e.message))).toBe(true);
      for (const lines of ['0', '1001', 'ten']) {
        const bad = await stack.http.get(`${base()}/logs?lines=${lines}`, { token });
        expect(bad.status, lines).toBe(400);
        expect(bad.body.error.param).toBe('lines');
      }
    });

    it('reads statistics from the engine', async () => {
      const session = await client('admin', await adminPassword());
      const res = await stack.http.get(`${base()}/stats`, { token });
      await session.close();
      expect(res.status).toBe(200);
      DbaasStatsSchema.parse(res.body);
      expect(res.body.connections.current).toBeGreaterThanOrEqual(1);
      expect(res.body.connections.max).toBeGreaterThan(res.body.connections.current);
      expect(res.body.databases).toBe((await stack.http.get(`${base()}/databases`, { token })).body.data.length);
      if (isMysql) expect(res.body.queries).toBeGreaterThan(0);
      else expect(res.body.cache_hit_ratio).toBeGreaterThan(0);
    });
  });

  describe(`backups (${engine})`, () => {
    it('runs the dump through the dbaas.backup workflow, which resolves when the backup is on the list', async () => {
      await stack.http.post(`${base()}/databases`, { token, body: { name: 'kept' } });
      const res = await stack.http.post(`${base()}/backups`, { token, headers: { 'idempotency-key': `backup-${randomUUID()}` } });
      expect(res.status, res.text).toBe(202);
      expect(res.body).toMatchObject({ type: 'dbaas.backup', resource: { object: 'dbaas', id: svc.id } });
      expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
      workflows.push(res.body.id);
      const op = await waitForOperation(stack, res.body.id, 60_000);
      expect(op.status, JSON.stringify(op)).toBe('succeeded');
      expect(op.result.size_bytes).toBeGreaterThan(0);
      const list = await stack.http.get(`${base()}/backups`, { token });
      expect(list.status).toBe(200);
      for (const b of list.body.data) DbaasBackupSchema.parse(b);
      expect(list.body.data[0]).toMatchObject({ object: 'dbaas_backup', id: op.result.backup_id, status: 'completed', size_bytes: op.result.size_bytes });

      const second = await stack.http.post(`${base()}/backups`, { token });
      const done = await waitForOperation(stack, second.body.id, 60_000);
      const newest = await stack.http.get(`${base()}/backups?limit=1`, { token });
      expect(newest.body.data[0].id).toBe(done.result.backup_id);
      expect(newest.body.has_more).toBe(true);
      const page2 = await stack.http.get(`${base()}/backups?limit=1&cursor=${enc(newest.body.next_cursor)}`, { token });
      expect(page2.body.data[0].id).toBe(op.result.backup_id);
    });
  });

  describe(`an instance that does not answer (${engine})`, () => {
    it('stopped: live fields null and capabilities without databases/users; 503 on writes and instance reads; connection and logs answer; restart brings it back', async () => {
      expect((await stack.http.post(`/_dev/dbaas/${svc.id}/power`, { body: { action: 'stop' } })).status).toBe(200);
      try {
        const get = await stack.http.get(base(), { token });
        expect(get.status).toBe(200);
        expect(get.body).toMatchObject({ state: null, version: null, host: null, engine, plan: PRODUCT[engine] });
        expect('databases' in get.body.capabilities).toBe(false);
        expect('users' in get.body.capabilities).toBe(false);
        for (const [method, p, body] of [
          ['POST', '/databases', { name: 'late' }],
          ['POST', '/users', { username: 'late', password: 'late-password-123' }],
          ['GET', '/databases', undefined],
          ['GET', '/stats', undefined],
          ['POST', '/backups', undefined],
        ] as const) {
          const res = await stack.http.request(method, `${base()}${p}`, { token, body });
          expect(res.status, `${method} ${p}: ${res.text}`).toBe(503);
          expect(res.body.error.code).toBe('backend_unavailable');
        }
        expect((await stack.http.get(`${base()}/connection`, { token })).status).toBe(200);
        const logs = await stack.http.get(`${base()}/logs?lines=3`, { token });
        expect(logs.status).toBe(200);
        expect(logs.body.data.map((e: any) => e.message).join('\n')).toMatch(/shut ?down|Shutdown complete/i);
        // A restart is the way back for an instance that went down.
        const restart = await stack.http.post(`${base()}/restart`, { token });
        expect(restart.status, restart.text).toBe(202);
        expect(restart.body.status).toBe('succeeded');
        expect((await stack.http.get(base(), { token })).body.state).toBe('running');
      } finally {
        expect((await stack.http.post(`/_dev/dbaas/${svc.id}/power`, { body: { action: 'start' } })).status).toBe(200);
      }
      expect((await stack.http.get(base(), { token })).body.state).toBe('running');
    });

    it('behind the outage switch: the same, whatever the instance does', async () => {
      await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: true } });
      await new Promise((r) => setTimeout(r, 300));
      try {
        const get = await stack.http.get(base(), { token });
        expect(get.body).toMatchObject({ state: null, version: null, host: null });
        const res = await stack.http.post(`${base()}/users`, { token, body: { username: 'late', password: 'late-password-123' } });
        expect(res.status).toBe(503);
      } finally {
        await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: false } });
        await new Promise((r) => setTimeout(r, 300));
      }
      expect((await stack.http.get(base(), { token })).body.state).toBe('running');
    });
  });

  describe(`ordering and termination (${engine})`, () => {
    it('an order provisions its own instance (admin password sealed at rest); termination destroys it', async () => {
      const { accountId } = await createAccount(stack.db, { credit: 0 });
      const { userId: ownerId } = await createUser(stack.db, accountId, { isOwner: true });
      const key = await createApiKey(stack.db, accountId, ownerId, {
        scopes: ['orders:write', 'orders:read', 'operations:read', 'dbaas:read', 'dbaas:credentials', 'dbaas:write'],
      });
      const order = await stack.http.post('/v1/orders', {
        token: key.token,
        body: { product: PRODUCT[engine], billing_cycle: 'monthly', promo_code: 'WELCOME100' },
        headers: { 'idempotency-key': `order-${randomUUID()}` },
      });
      expect(order.status, order.text).toBe(202);
      workflows.push(order.body.id);
      const until = Date.now() + 90_000;
      let op: any;
      for (;;) {
        op = (await stack.http.get(`/v1/operations/${order.body.id}`, { token: key.token })).body;
        if (op.status === 'succeeded' || op.status === 'failed' || Date.now() > until) break;
        await new Promise((r) => setTimeout(r, 200));
      }
      expect(op.status, JSON.stringify(op)).toBe('succeeded');
      const serviceId: string = op.result.service.id;
      const svcNum = Number(serviceId.slice(4));
      const get = await stack.http.get(`/v1/dbaas/${serviceId}`, { token: key.token });
      expect(get.body).toMatchObject({ engine, state: 'running', plan: PRODUCT[engine] });

      const row = await stack.db('dbaas_instances').where({ service_id: svcNum }).first();
      const creds = await stack.http.post(`/v1/dbaas/${serviceId}/credentials`, { token: key.token });
      secrets.push(creds.body.password);
      expect(row.sealed_admin_password).toMatch(/^v1\./);
      expect(row.sealed_admin_password).not.toContain(creds.body.password);
      const conn = await stack.http.get(`/v1/dbaas/${serviceId}/connection`, { token: key.token });
      const session = await connectClient(
        engine,
        { host: conn.body.host, port: conn.body.port, ca: conn.body.ca_certificate },
        'admin',
        creds.body.password,
        conn.body.database ?? undefined,
      );
      await session.close();

      const dir = instancePaths(root, row.instance).dir;
      expect(existsSync(dir)).toBe(true);
      expect((await stack.http.post(`/_dev/services/${serviceId}/terminate`)).status).toBe(200);
      await waitFor(
        async () => ({ dir: existsSync(dir), row: await stack.db('dbaas_instances').where({ service_id: svcNum }).first() }),
        (s) => !s.dir && !s.row,
        60_000,
      );
    });
  });

  describe(`secrets (${engine})`, () => {
    it('no password reaches the logs, the audit log, idempotency records, operations or workflow histories', async () => {
      expect(secrets.length).toBeGreaterThan(4);
      await new Promise((r) => setTimeout(r, 500)); // the audit log is written in batches
      const places: Record<string, string> = {
        logs: logLines.join('\n'),
        audit: JSON.stringify(await stack.db('audit_logs').select()),
        idempotency: JSON.stringify(await stack.db('idempotency_keys').select()),
        operations: JSON.stringify(await stack.db('operations').select()),
        events: JSON.stringify(await stack.db('events').select()),
      };
      for (const id of workflows) places[`history ${id}`] = await historyText(stack, id);
      // The API's calls to the instance's host, passwords among their arguments (sealed there).
      const hostCalls: string[] = [];
      for await (const run of stack.temporal!.client.workflow.list({ query: 'WorkflowId STARTS_WITH "host-call-"' })) hostCalls.push(run.workflowId);
      expect(hostCalls.some((id) => /\.(createUser|setPassword)-/.test(id))).toBe(true);
      for (const id of hostCalls) places[`history ${id}`] = await historyText(stack, id);
      expect(places.logs.length).toBeGreaterThan(1000);
      for (const [where, text] of Object.entries(places)) {
        for (const secret of secrets) expect(text.includes(secret), `a password in ${where}`).toBe(false);
      }
    });
  });
}
