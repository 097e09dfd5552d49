import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { seedOrders } from '../db/seeds/orders.seed';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { instancePaths } from '../providers/dbinstances/engine';
import { BackendRefusedError } from '../providers/errors';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { connectClient, type RealSession } from './dbaas.instances.support';
import { expectRejects } from './dbaas.support';

/**
 * Tenant isolation on a real PostgreSQL instance (issue 22): the API never acts on the server's
 * roles (the bootstrap superuser, the predefined `pg_*` roles, `public`), and the engine refuses
 * any role with server rights again by what it is, whatever its name.
 */
const enc = encodeURIComponent;
let stack: Stack;
let token: string;
let svc: { id: string; serviceId: number };
let instance: string;
let provider: DbInstancesAdapter;

const base = () => `/v1/dbaas/${svc.id}`;

async function client(username: string, password: string): Promise<RealSession> {
  const conn = await stack.http.get(`${base()}/connection`, { token });
  return connectClient('postgresql', { host: conn.body.host, port: conn.body.port, ca: conn.body.ca_certificate }, username, password, 'postgres');
}

async function loginRefused(username: string, password: string): Promise<boolean> {
  const session = await client(username, password).catch(() => null);
  await session?.close();
  return session === null;
}

/** The control plane's own session: the bootstrap superuser over the instance's private socket. */
async function asSuperuser<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const { port } = await provider.status(instance);
  const c = new pg.Client({ host: instancePaths(stack.config.DBAAS_DATA_DIR!, instance).run, port, user: 'postgres', database: 'postgres' });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { DBAAS_BACKEND: 'instances' } });
  token = stack.owner.key;
  await seedOrders(stack.db);
  svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product: 'dbaas-postgres-s' });
  const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
  expect(attached.status, attached.text).toBe(200);
  instance = attached.body.instance;
  provider = new DbInstancesAdapter({ rootDir: stack.config.DBAAS_DATA_DIR! });
});
afterAll(() => stack?.close());

describe("PostgreSQL: the API never acts on the server's roles", () => {
  it("refuses to set the superuser password; the superuser stays the control plane's alone", async () => {
    const taken = 'superuser-taken-over-1';
    const res = await stack.http.post(`${base()}/users/postgres/password`, { token, body: { password: taken } });
    expect(res.status, res.text).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'username' });
    expect(await loginRefused('postgres', taken)).toBe(true);
    // The control plane still reaches the instance as its superuser.
    expect((await stack.http.get(`${base()}/users`, { token })).status).toBe(200);
    expect(await asSuperuser(async (c) => (await c.query('select current_setting($1) as s', ['is_superuser'])).rows)).toEqual([{ s: 'on' }]);
  });

  it('refuses to delete the superuser, predefined roles and public (400 validation_failed, never a 500)', async () => {
    for (const id of ['postgres', 'postgres@localhost', 'pg_monitor', 'pg_execute_server_program', 'public', 'admin@localhost']) {
      const res = await stack.http.delete(`${base()}/users/${enc(id)}`, { token });
      expect(res.status, `${id}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'username' });
    }
    for (const id of ['pg_monitor', 'public']) {
      const res = await stack.http.post(`${base()}/users/${id}/password`, { token, body: { password: 'a-password-for-it' } });
      expect(res.status, `${id}: ${res.text}`).toBe(400);
    }
    for (const name of ['postgres', 'template0', 'template1']) {
      const res = await stack.http.delete(`${base()}/databases/${name}`, { token });
      expect(res.status, `${name}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
    }
    for (const owner of ['postgres', 'pg_execute_server_program', 'public']) {
      const res = await stack.http.post(`${base()}/databases`, { token, body: { name: 'owned_by_server', owner } });
      expect(res.status, `${owner}: ${res.text}`).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'owner' });
    }
    // The superuser still logs the control plane in, with all its rights.
    expect(await asSuperuser(async (c) => (await c.query("select rolsuper, rolcanlogin from pg_roles where rolname = 'postgres'")).rows)).toEqual([
      { rolsuper: true, rolcanlogin: true },
    ]);
  });

  it('lists only the admin and the users made through the API', async () => {
    expect((await stack.http.post(`${base()}/users`, { token, body: { username: 'app', password: 'app-password-1234' } })).status).toBe(201);
    const list = await stack.http.get(`${base()}/users?limit=100`, { token });
    expect(list.body.data.map((u: any) => u.id)).toEqual(['admin', 'app']);
  });
});

describe('PostgreSQL: the engine refuses roles with server rights whatever their names', () => {
  it('never lists, changes, drops or hands a database to them; the API answers 400', async () => {
    // Roles only the control plane could make: rights over the whole server under customer-like names.
    await asSuperuser(async (c) => {
      await c.query("create role sneaky superuser login password 'sneaky-password-1'");
      await c.query("create role rls_reader bypassrls login password 'rls-password-1'");
      await c.query("create role replicator replication login password 'replicator-password-1'");
    });
    try {
      for (const username of ['sneaky', 'rls_reader', 'replicator']) {
        await expectRejects(provider.setPassword(instance, { username }, 'taken-over-password'), BackendRefusedError, { param: 'username' });
        await expectRejects(provider.deleteUser(instance, { username }), BackendRefusedError, { param: 'username' });
        await expectRejects(provider.createDatabase(instance, { name: `db_of_${username}`, owner: username }), BackendRefusedError, { param: 'owner' });
        const res = await stack.http.post(`${base()}/users/${username}/password`, { token, body: { password: 'taken-over-password' } });
        expect(res.status, res.text).toBe(400);
        expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'username' });
      }
      // The predefined roles, reached through the engine directly (the API stops them by name).
      for (const username of ['postgres', 'pg_monitor', 'pg_execute_server_program']) {
        await expectRejects(provider.setPassword(instance, { username }, 'taken-over-password'), BackendRefusedError, { param: 'username' });
        await expectRejects(provider.deleteUser(instance, { username }), BackendRefusedError, { param: 'username' });
      }
      expect((await provider.listUsers(instance)).map((u) => u.username)).toEqual(['admin', 'app']);
      // Untouched: they still log in with their own passwords and keep their rights.
      expect(await loginRefused('sneaky', 'sneaky-password-1')).toBe(false);
      expect(
        await asSuperuser(async (c) => (await c.query("select rolsuper, rolcanlogin from pg_roles where rolname in ('postgres', 'sneaky')")).rows),
      ).toEqual([
        { rolsuper: true, rolcanlogin: true },
        { rolsuper: true, rolcanlogin: true },
      ]);
    } finally {
      await asSuperuser((c) => c.query('drop role if exists sneaky, rls_reader, replicator'));
    }
  });
});
