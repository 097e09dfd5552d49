import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { existsSync, promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import { seedOrders } from '../db/seeds/orders.seed';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { instancePaths, type InstanceRecord } from '../providers/dbinstances/engine';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { connectClient, type RealSession } from './dbaas.instances.support';
import { waitForBackup } from './dbaas.support';

/**
 * Tenant isolation on a real MariaDB instance (issue 22): the customer's admin has rights on its
 * own databases only, the API never acts on the server's or the control plane's accounts, and
 * database names read from the engine never become mariadb-dump options.
 */
const enc = encodeURIComponent;
let stack: Stack;
let token: string;
let svc: { id: string; serviceId: number };
let instance: string;
let provider: DbInstancesAdapter;

const base = () => `/v1/dbaas/${svc.id}`;

async function adminPassword(): Promise<string> {
  const res = await stack.http.post(`${base()}/credentials`, { token });
  expect(res.status, res.text).toBe(200);
  return res.body.password;
}

/** A customer's session over TLS, as the connection endpoint describes it. */
async function client(username: string, password: string, database?: string): Promise<RealSession> {
  const conn = await stack.http.get(`${base()}/connection`, { token });
  return connectClient('mysql', { host: conn.body.host, port: conn.body.port, ca: conn.body.ca_certificate }, username, password, database);
}

/** The control plane's own session: root over the instance's private socket. */
async function asRoot<T>(name: string, fn: (c: mysql.Connection) => Promise<T>): Promise<T> {
  const c = await mysql.createConnection({ socketPath: path.join(instancePaths(stack.config.DBAAS_DATA_DIR!, name).run, 'mariadbd.sock'), user: 'root' });
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** What an escalation attempt must do: fail, on the server. */
async function refused(session: RealSession, sql: string): Promise<boolean> {
  return session.query(sql).then(
    () => false,
    () => true,
  );
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { DBAAS_BACKEND: 'instances' } });
  token = stack.owner.key;
  await seedOrders(stack.db);
  svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product: 'dbaas-mysql-s' });
  const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
  expect(attached.status, attached.text).toBe(200);
  instance = attached.body.instance;
  provider = new DbInstancesAdapter({ rootDir: stack.config.DBAAS_DATA_DIR! });
});
afterAll(() => stack?.close());

describe('MariaDB: the admin owns its databases, not the server', () => {
  const ESCALATIONS = [
    "UPDATE mysql.global_priv SET priv = json_set(priv, '$.access', 549755813887) WHERE User = 'admin'",
    "UPDATE mysql.user SET Super_priv = 'Y' WHERE User = 'admin'",
    "INSERT INTO mysql.global_priv VALUES ('%', 'intruder', '{}')",
    "GRANT ALL PRIVILEGES ON *.* TO 'admin'@'%' WITH GRANT OPTION",
    "GRANT ALL PRIVILEGES ON mysql.* TO 'admin'@'%'",
    "DROP USER 'root'@'localhost'",
    "CREATE USER 'intruder'@'%'",
    "SET PASSWORD FOR 'root'@'localhost' = PASSWORD('taken-over-root')",
    "GRANT PROXY ON 'root'@'localhost' TO 'admin'@'%'",
    "SELECT 1 INTO OUTFILE 'escape.txt'",
    'FLUSH PRIVILEGES',
    'CREATE DATABASE made_around_the_api',
  ];

  it('refuses every escalation path on the real server, and the control plane keeps root', async () => {
    const admin = await client('admin', await adminPassword());
    try {
      for (const sql of ESCALATIONS) expect(await refused(admin, sql), sql).toBe(true);
      expect(await refused(admin, 'SELECT count(*) FROM mysql.global_priv')).toBe(true);
    } finally {
      await admin.close();
    }
    // root is still there and still the control plane's: the API reads the instance through it.
    expect((await stack.http.get(`${base()}/users`, { token })).status).toBe(200);
    const grants = await asRoot(instance, async (c) => (await c.query<mysql.RowDataPacket[]>("SHOW GRANTS FOR 'root'@'localhost'"))[0]);
    expect(Object.values(grants[0]).join(' ')).toMatch(/GRANT ALL PRIVILEGES ON \*\.\*/);
  });

  it('still does its work: tables, views, routines in its databases, and grants its users rights on them', async () => {
    expect((await stack.http.post(`${base()}/databases`, { token, body: { name: 'app_data' } })).status).toBe(201);
    expect((await stack.http.post(`${base()}/users`, { token, body: { username: 'reader', password: 'reader-password-42' } })).status).toBe(201);
    const admin = await client('admin', await adminPassword(), 'app_data');
    try {
      await admin.query('CREATE TABLE items (id int primary key, name text)');
      await admin.query("INSERT INTO items VALUES (1, 'anvil')");
      await admin.query('CREATE VIEW item_names AS SELECT name FROM items');
      await admin.query('CREATE PROCEDURE count_items() SELECT count(*) AS n FROM items');
      await admin.query("GRANT SELECT ON app_data.* TO 'reader'@'%'");
    } finally {
      await admin.close();
    }
    const reader = await client('reader', 'reader-password-42', 'app_data');
    try {
      expect(await reader.query('SELECT name FROM item_names')).toEqual([{ name: 'anvil' }]);
      expect(await refused(reader, "INSERT INTO items VALUES (2, 'rope')")).toBe(true);
    } finally {
      await reader.close();
    }
    // `_` is a wildcard in a database grant: a database named `mysq_` must not give the admin `mysql`.
    expect((await stack.http.post(`${base()}/databases`, { token, body: { name: 'mysq_' } })).status).toBe(201);
    const again = await client('admin', await adminPassword());
    try {
      await again.query('CREATE TABLE mysq_.t (i int)');
      for (const sql of ESCALATIONS) expect(await refused(again, sql), sql).toBe(true);
    } finally {
      await again.close();
      await stack.http.delete(`${base()}/databases/mysq_`, { token });
    }
  });

  it('narrows an instance made with the old broad grants when it is ensured again', async () => {
    // What the admin had before, plus a role it could have made itself to keep its rights.
    await asRoot(instance, async (c) => {
      await c.query("GRANT ALL PRIVILEGES ON *.* TO 'admin'@'%' WITH GRANT OPTION");
      await c.query("REVOKE FILE, SUPER, SHUTDOWN ON *.* FROM 'admin'@'%'");
      await c.query('CREATE ROLE kept_rights');
      await c.query('GRANT ALL PRIVILEGES ON *.* TO kept_rights');
      await c.query("GRANT kept_rights TO 'admin'@'%'");
      await c.query("GRANT ALL PRIVILEGES ON mysql.* TO 'reader'@'%'");
    });
    const password = await adminPassword();
    await provider.createInstance({ name: instance, serviceId: svc.serviceId, engine: 'mysql', adminUsername: 'admin', adminPassword: password });
    const admin = await client('admin', password);
    try {
      // The role may be gone with the admin's grants; if it is not, it carries nothing any more.
      await admin.query('SET ROLE kept_rights').catch(() => undefined);
      for (const sql of ESCALATIONS) expect(await refused(admin, sql), sql).toBe(true);
      expect(await admin.query('SELECT count(*) AS n FROM app_data.items')).toEqual([{ n: 1 }]);
    } finally {
      await admin.close();
    }
    const reader = await client('reader', 'reader-password-42');
    try {
      expect(await refused(reader, 'SELECT count(*) FROM mysql.global_priv')).toBe(true);
    } finally {
      await reader.close();
    }
  });
});

describe('MariaDB: the API never acts on the server or the control plane', () => {
  it('refuses their names on every path and body field (400 validation_failed), and lists none of them', async () => {
    for (const id of ['root', 'root@localhost', 'mysql', 'mysql@localhost', 'public']) {
      const del = await stack.http.delete(`${base()}/users/${enc(id)}`, { token });
      expect(del.status, `DELETE ${id}: ${del.text}`).toBe(400);
      expect(del.body.error).toMatchObject({ code: 'validation_failed', param: 'username' });
      const pw = await stack.http.post(`${base()}/users/${enc(id)}/password`, { token, body: { password: 'taken-over-password' } });
      expect(pw.status, `password ${id}: ${pw.text}`).toBe(400);
      expect(pw.body.error).toMatchObject({ code: 'validation_failed', param: 'username' });
    }
    for (const name of ['mysql', 'sys', 'performance_schema', 'information_schema']) {
      const del = await stack.http.delete(`${base()}/databases/${name}`, { token });
      expect(del.status, `DELETE databases/${name}: ${del.text}`).toBe(400);
      expect(del.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
    }
    const list = await stack.http.get(`${base()}/users?limit=100`, { token });
    expect(list.body.data.map((u: any) => u.id).sort()).toEqual(['admin@%', 'reader@%']);
    // The control plane still logs in as root.
    expect((await asRoot(instance, (c) => c.query('SELECT 1 AS one')))[0]).toEqual([{ one: 1 }]);
  });

  it("gives the dump's account read access and nothing else", async () => {
    const rec = JSON.parse(await fs.readFile(instancePaths(stack.config.DBAAS_DATA_DIR!, instance).record, 'utf8')) as InstanceRecord;
    const account = rec.account ?? 'mysql';
    const grants = await asRoot(instance, async (c) => (await c.query<mysql.RowDataPacket[]>('SHOW GRANTS FOR ?@?', [account, 'localhost']))[0]);
    const text = grants.map((g) => Object.values(g)[0]).join('\n');
    expect(text).toMatch(/^GRANT SELECT, LOCK TABLES, SHOW VIEW, EVENT, TRIGGER ON \*\.\* TO /m);
    expect(text).not.toMatch(/ALL PRIVILEGES|INSERT|UPDATE|DELETE|CREATE|DROP|GRANT OPTION|PROXY/);
  });
});

describe('MariaDB: database names never become mariadb-dump options', () => {
  it("dumps only the tenant's own databases, from its own server, to the backup file", async () => {
    const tag = randomBytes(3).toString('hex');
    // Another tenant's server with a database of the same name.
    await provider.createInstance({ name: `victim-${tag}`, serviceId: 9999, engine: 'mysql', adminUsername: 'admin', adminPassword: 'victim-admin-password' });
    await asRoot(`victim-${tag}`, async (c) => {
      await c.query('CREATE DATABASE app_data');
      await c.query('CREATE TABLE app_data.items (id int primary key, name text)');
      await c.query("INSERT INTO app_data.items VALUES (1, 'victim-secret')");
    });
    // Names no customer can make through the API (nor, now, by SQL): made here as the control plane.
    const victimSocket = path.join(os.tmpdir(), `dbaas-victim-${tag}.sock`);
    await fs.symlink(path.join(instancePaths(stack.config.DBAAS_DATA_DIR!, `victim-${tag}`).run, 'mariadbd.sock'), victimSocket);
    const escape = path.join(os.tmpdir(), `dbaas-escape-${tag}.sql`);
    const injected = ['--all-databases', `--socket=${victimSocket}`, `--result-file=${escape}`];
    try {
      await asRoot(instance, async (c) => {
        for (const name of injected) await c.query(`CREATE DATABASE ${mysql.escapeId(name, true)}`);
      });
      const backup = await provider.startBackup(instance, `injection-${tag}`);
      expect((await waitForBackup(provider, instance, backup.id)).status).toBe('completed');
      const dump = await fs.readFile(provider.backupFile(instance, backup.id), 'utf8');
      expect(dump).toContain("(1,'anvil')");
      expect(dump).not.toContain('victim-secret');
      expect(dump).not.toMatch(/^USE `mysql`/m);
      expect(existsSync(escape)).toBe(false);
      // They are the tenant's databases all the same: in the backup, as names.
      for (const name of injected) expect(dump).toContain(`CREATE DATABASE /*!32312 IF NOT EXISTS*/ \`${name}\``);
    } finally {
      await fs.rm(victimSocket, { force: true });
      await fs.rm(escape, { force: true });
      await asRoot(instance, async (c) => {
        for (const name of injected) await c.query(`DROP DATABASE IF EXISTS ${mysql.escapeId(name, true)}`);
      });
      await provider.destroyInstance(`victim-${tag}`);
    }
  });
});
