import { expect, it } from 'vitest';
import { promises as fs, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import mysql from 'mysql2/promise';
import pg from 'pg';
import type { DbEngine } from '../providers/dbaas.provider';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { instancePaths } from '../providers/dbinstances/engine';
import { installedPostgresBinDir } from '../providers/dbinstances/postgresql.engine';
import { processAlive, readPidFile, run } from '../providers/dbinstances/system';
import { BackendUnavailableError } from '../providers/errors';
import { expectRejects, waitForBackup, type ClientSession, type ContractHarness } from './dbaas.support';

/**
 * Real instances for the DBaaS tests: one temporary root per test file, one instance shared by the
 * file's tests (plus a scratch instance to restore a backup into), destroyed afterwards.
 */

export type RealSession = ClientSession & { query(sql: string): Promise<unknown[]> };

export interface RealHarness extends ContractHarness {
  provider: DbInstancesAdapter;
  connect(username: string, password: string, database?: string): Promise<RealSession>;
  root: string;
  close(): Promise<void>;
}

const ADMIN_PASSWORD = 'Admin-Passw0rd-for-tests';

/**
 * Logs in over TCP as a customer would: TLS required and verified against the given CA. node-postgres
 * also checks the name (`host`); mysql2 cannot check an IP address (its `verifyIdentity` compares
 * it with `localhost`): test/dbaas.isolation.os.test.ts checks MariaDB's name with the mariadb client.
 */
export async function connectClient(
  engine: DbEngine,
  target: { host: string; port: number; ca: string | null; tls?: boolean },
  username: string,
  password: string,
  database?: string,
): Promise<RealSession> {
  const ssl = target.tls === false ? undefined : target.ca ? { ca: target.ca, rejectUnauthorized: true } : { rejectUnauthorized: true };
  if (engine === 'postgresql') {
    const client = new pg.Client({
      host: target.host,
      port: target.port,
      user: username,
      password,
      database: database ?? 'postgres',
      ssl: ssl ?? false,
      connectionTimeoutMillis: 5_000,
    });
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
    return {
      alive: () =>
        client.query('select 1').then(
          () => true,
          () => false,
        ),
      close: () => client.end().catch(() => undefined),
      query: async (sql) => (await client.query(sql)).rows,
    };
  }
  const connection = await mysql.createConnection({ host: target.host, port: target.port, user: username, password, database, ssl, connectTimeout: 5_000 });
  connection.on('error', () => undefined);
  return {
    alive: () =>
      connection.query('select 1').then(
        () => true,
        () => false,
      ),
    close: async () => connection.destroy(),
    query: async (sql) => (await connection.query(sql))[0] as unknown[],
  };
}

export async function realHarness(engine: DbEngine): Promise<RealHarness> {
  const root = mkdtempSync(path.join(os.tmpdir(), `dbaas-${engine}-`));
  const provider = new DbInstancesAdapter({ rootDir: root, pollIntervalMs: 100 });
  const instance = 'main';
  await provider.createInstance({ name: instance, serviceId: 1, engine, adminUsername: 'admin', adminPassword: ADMIN_PASSWORD });
  const harness: RealHarness = {
    provider,
    engine,
    root,
    instance,
    adminUsername: 'admin',
    adminPassword: ADMIN_PASSWORD,
    async connect(username, password, database) {
      const info = await provider.connectionInfo(instance);
      return connectClient(engine, { host: info.host, port: info.port, ca: info.caCertificate }, username, password, database);
    },
    async close() {
      for (const name of await provider.instanceNames()) await provider.destroyInstance(name).catch(() => undefined);
      await fs.rm(root, { recursive: true, force: true });
    },
  };
  return harness;
}

/** Replays a dump into an instance with the engine's own client, over the instance's private socket. */
async function restoreWithEngineTool(h: RealHarness, instance: string, dumpFile: string): Promise<void> {
  const paths = instancePaths(h.root, instance);
  const { port } = await h.provider.status(instance);
  if (h.engine === 'postgresql') {
    // As this process (root): the instance maps root to its superuser, and no other OS account but its own.
    await run(path.join(installedPostgresBinDir(), 'psql'), [
      '-X',
      '-q',
      '-h',
      paths.run,
      '-p',
      String(port),
      '-U',
      'postgres',
      '-d',
      'postgres',
      '-f',
      dumpFile,
    ]);
  } else {
    await run('mariadb', [`--socket=${path.join(paths.run, 'mariadbd.sock')}`, '-u', 'root', '-e', `source ${dumpFile}`]);
  }
}

/** Every process's command line and environment right now. */
async function processTexts(): Promise<string[]> {
  const texts: string[] = [];
  for (const pid of (await fs.readdir('/proc')).filter((p) => /^\d+$/.test(p))) {
    for (const file of ['cmdline', 'environ']) texts.push(await fs.readFile(`/proc/${pid}/${file}`, 'utf8').catch(() => ''));
  }
  return texts;
}

/** Every file under `dir` except the engine's data directory. */
async function filesOutsideData(dir: string): Promise<string[]> {
  const files: string[] = [];
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'data') files.push(...(await filesOutsideData(p)));
    } else if (entry.isFile()) files.push(p);
  }
  return files;
}

/** Registers the tests only real instances can pass; run after the contract (the instance is shared). */
export function realInstanceTests(h: () => RealHarness) {
  it('accepts clients only over TLS, with a certificate that verifies against the returned CA', async () => {
    const { provider, instance, engine, adminUsername, adminPassword } = h();
    const info = await provider.connectionInfo(instance);
    const verified = await connectClient(engine, { host: info.host, port: info.port, ca: info.caCertificate }, adminUsername, adminPassword);
    expect(await verified.alive()).toBe(true);
    await verified.close();
    // Without TLS the server refuses; with TLS but without the CA the client refuses the server.
    await expect(connectClient(engine, { host: info.host, port: info.port, ca: null, tls: false }, adminUsername, adminPassword)).rejects.toThrow();
    await expect(connectClient(engine, { host: info.host, port: info.port, ca: null }, adminUsername, adminPassword)).rejects.toThrow(
      /self[- ]signed|unable to (get|verify)/i,
    );
  });

  it("restores a backup with the engine's own tool into a scratch instance, data and users included", async () => {
    const { provider, instance, engine, adminUsername, adminPassword } = h();
    await provider.createDatabase(instance, { name: 'inventory' });
    await provider.createUser(instance, { username: 'carol', password: 'carols-password-42' });
    const admin = await h().connect(adminUsername, adminPassword, 'inventory');
    await admin.close();
    const info = await provider.connectionInfo(instance);
    const session = await connectClient(engine, { host: info.host, port: info.port, ca: info.caCertificate }, adminUsername, adminPassword, 'inventory');
    if (engine === 'postgresql') {
      await session.query('create table items (id int primary key, name text)');
      await session.query("insert into items values (1, 'anvil'), (2, 'rope')");
      await session.query('grant select on items to carol');
    } else {
      await session.query('create table items (id int primary key, name text)');
      await session.query("insert into items values (1, 'anvil'), (2, 'rope')");
      await session.query("grant select on inventory.items to 'carol'@'%'");
    }
    await session.close();

    const backup = await provider.startBackup(instance, 'restore-test');
    expect((await waitForBackup(provider, instance, backup.id)).status).toBe('completed');

    await provider.createInstance({ name: 'scratch', serviceId: 2, engine, adminUsername: 'admin', adminPassword: 'scratch-admin-password' });
    await restoreWithEngineTool(h(), 'scratch', provider.backupFile(instance, backup.id));
    const scratch = await provider.connectionInfo('scratch');
    expect(`${scratch.host}:${scratch.port}`).not.toBe(`${info.host}:${info.port}`);
    const carol = await connectClient(
      engine,
      { host: scratch.host, port: scratch.port, ca: scratch.caCertificate },
      'carol',
      'carols-password-42',
      'inventory',
    );
    expect(await carol.query('select id, name from items order by id')).toEqual([
      { id: 1, name: 'anvil' },
      { id: 2, name: 'rope' },
    ]);
    await carol.close();
    await provider.destroyInstance('scratch');
    expect(await provider.instanceNames()).not.toContain('scratch');
  });

  it('keeps passwords out of command lines, environments, logs, backups and its own files', async () => {
    const { provider, instance, root } = h();
    const secrets = ['secret-one-password-1', 'secret-two-password-2', 'secret-three-password-3'];
    const seen: string[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        for (const text of await processTexts()) for (const s of secrets) if (text.includes(s)) seen.push(s);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    await provider.createInstance({ name: 'secretive', serviceId: 3, engine: h().engine, adminUsername: 'admin', adminPassword: secrets[0] });
    await provider.createUser('secretive', { username: 'dave', password: secrets[1] });
    await provider.setPassword('secretive', { username: 'admin' }, secrets[2]);
    await provider.createUser(instance, { username: 'erin', password: secrets[1] });
    const backup = await provider.startBackup('secretive', 'secrets');
    await waitForBackup(provider, 'secretive', backup.id);
    sampling = false;
    await sampler;
    expect(seen).toEqual([]);
    for (const file of await filesOutsideData(root)) {
      const text = await fs.readFile(file, 'utf8');
      for (const s of secrets) expect(text.includes(s), `${s} in ${file}`).toBe(false);
    }
    await provider.destroyInstance('secretive');
  });

  it('gives the admin its own instance, not the machine: no server programs or files, no global settings', async () => {
    const { engine, adminUsername, adminPassword } = h();
    const admin = await h().connect(adminUsername, adminPassword);
    try {
      if (engine === 'postgresql') {
        await expect(admin.query('grant pg_execute_server_program to admin')).rejects.toThrow(/permission denied|must have admin option/i);
        await expect(admin.query("copy (select 1) to program 'true'")).rejects.toThrow(/permission denied|must be superuser|pg_execute_server_program/i);
        await expect(admin.query("select pg_read_file('/etc/hostname')")).rejects.toThrow(/permission denied/i);
        await expect(admin.query('create role sneaky login')).rejects.toThrow(/permission denied/i);
        expect(await admin.query('create database admin_made')).toEqual([]);
        await admin.query('drop database admin_made');
      } else {
        expect(await admin.query("select load_file('/etc/hostname') as f")).toEqual([{ f: null }]);
        await expect(admin.query("select 1 into outfile '/tmp/escape.txt'")).rejects.toThrow(/denied|secure-file-priv/i);
        await expect(admin.query("set global general_log_file = '/tmp/escape.log'")).rejects.toThrow(/denied|SUPER/i);
        await expect(admin.query('shutdown')).rejects.toThrow(/denied|SHUTDOWN/i);
        // Databases are made through the API, which gives the admin its rights on them (issue 22).
        await expect(admin.query('create database admin_made')).rejects.toThrow(/denied/i);
      }
    } finally {
      await admin.close();
    }
  });

  it('outlives the process that started it: another process adopts it, and restarts it after a crash', async () => {
    const { instance, engine, root, adminUsername, adminPassword } = h();
    // A new adapter is what the API or worker has after a restart: it finds the server by its pidfile.
    const again = new DbInstancesAdapter({ rootDir: root, pollIntervalMs: 100 });
    expect(await again.status(instance)).toMatchObject({ state: 'running', port: (await h().provider.status(instance)).port });
    const paths = instancePaths(root, instance);
    const pid = await readPidFile(engine === 'postgresql' ? path.join(paths.data, 'postmaster.pid') : path.join(paths.run, 'mariadbd.pid'));
    expect(pid).not.toBeNull();
    // A crash: MariaDB killed outright; PostgreSQL's immediate shutdown (no checkpoint, recovery at next start).
    process.kill(pid as number, engine === 'postgresql' ? 'SIGQUIT' : 'SIGKILL');
    await expect.poll(() => processAlive(pid as number, ''), { timeout: 15_000 }).toBe(false);
    await expectRejects(again.status(instance), BackendUnavailableError);
    await expectRejects(again.listUsers(instance), BackendUnavailableError);
    expect((await again.resumeInstances()).started).toEqual([instance]);
    const session = await h().connect(adminUsername, adminPassword);
    expect(await session.alive()).toBe(true);
    await session.close();
    // Stopped on purpose is not resumed.
    await again.stopInstance(instance);
    expect((await again.resumeInstances()).started).toEqual([]);
    await again.startInstance(instance);
  });
}
