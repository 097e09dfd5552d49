import { expect, it } from 'vitest';
import type { DbEngine, DbaasProvider } from '../providers/dbaas.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';

/**
 * The DBaaS provider contract, run against the real instances (one file per engine) and against
 * the simulator: whatever implements DbaasProvider must pass it.
 */

/** A client logged in to an instance (over TLS verified against the returned CA, on real engines). */
export interface ClientSession {
  /** Runs a trivial statement: false once the server has ended the session. */
  alive(): Promise<boolean>;
  close(): Promise<void>;
}

export interface ContractHarness {
  provider: DbaasProvider;
  engine: DbEngine;
  /** An instance created for the test file. */
  instance: string;
  adminUsername: string;
  adminPassword: string;
  /** Logs in as a client would; rejects when the server refuses (wrong password, no such database). */
  connect(username: string, password: string, database?: string): Promise<ClientSession>;
}

export async function expectRejects(promise: Promise<unknown>, type: new (...args: never[]) => Error, match: Partial<Record<string, unknown>> = {}) {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, `expected ${type.name}`).toBeInstanceOf(type);
  expect(err).toMatchObject(match);
  return err as Error;
}

export async function expectLoginRefused(h: ContractHarness, username: string, password: string, database?: string) {
  const session = await h.connect(username, password, database).then(
    (s) => s,
    () => null,
  );
  if (session) await session.close();
  expect(session, `${username} should not be able to log in${database ? ` to ${database}` : ''}`).toBeNull();
}

export async function waitForBackup(provider: DbaasProvider, instance: string, backupId: string, timeoutMs = 30_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const found = (await provider.listBackups(instance)).find((b) => b.id === backupId);
    if (found && found.status !== 'running') return found;
    if (Date.now() > until) throw new Error(`backup ${backupId} still running after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, provider.pollIntervalMs));
  }
}

const USER_PASSWORD = 'user-password-0123';

/** Registers the contract's tests in the calling describe block; `h()` is ready in beforeAll. */
export function dbaasContract(h: () => ContractHarness) {
  const isMysql = () => h().engine === 'mysql';
  const userId = (name: string) => (isMysql() ? `${name}@%` : name);

  it('reports the running instance and where to reach it, without a password', async () => {
    const { provider, instance, engine, adminUsername } = h();
    const status = await provider.status(instance);
    expect(status).toMatchObject({ id: instance, engine, state: 'running' });
    expect(status.version).toMatch(/^\d+\.\d+/);
    expect(status.uptimeSeconds).toBeGreaterThanOrEqual(0);
    const info = await provider.connectionInfo(instance);
    expect(info).toEqual({
      host: status.host,
      port: status.port,
      database: engine === 'postgresql' ? 'postgres' : null,
      username: adminUsername,
      tlsMode: 'verify-full',
      caCertificate: expect.stringMatching(/^-----BEGIN CERTIFICATE-----\n[\s\S]+\n-----END CERTIFICATE-----\n$/),
    });
    expect(JSON.stringify(info)).not.toContain(h().adminPassword);
  });

  it('lets the admin log in with its password, and nobody with a wrong one', async () => {
    const session = await h().connect(h().adminUsername, h().adminPassword);
    expect(await session.alive()).toBe(true);
    await session.close();
    await expectLoginRefused(h(), h().adminUsername, 'not-the-password-at-all');
  });

  it('creates, lists and drops databases; a dropped database is gone', async () => {
    const { provider, instance, adminUsername } = h();
    const created = await provider.createDatabase(instance, { name: 'shop', owner: undefined, charset: undefined });
    expect(created).toEqual(
      isMysql()
        ? { name: 'shop', owner: null, charset: 'utf8mb4', collation: expect.stringMatching(/^utf8mb4_/) }
        : { name: 'shop', owner: adminUsername, charset: null, collation: null },
    );
    expect(await provider.listDatabases(instance)).toContainEqual(created);
    await expectRejects(provider.createDatabase(instance, { name: 'shop' }), BackendRefusedError, { code: 'already_exists', param: null });
    const session = await h().connect(adminUsername, h().adminPassword, 'shop');
    await session.close();

    await provider.deleteDatabase(instance, 'shop');
    expect((await provider.listDatabases(instance)).map((d) => d.name)).not.toContain('shop');
    await expectLoginRefused(h(), adminUsername, h().adminPassword, 'shop');
    await expectRejects(provider.deleteDatabase(instance, 'shop'), BackendGoneError);
  });

  it('applies owner on PostgreSQL and charset/collation on MySQL, and refuses unknown ones', async () => {
    const { provider, instance } = h();
    if (isMysql()) {
      // On MySQL an owner is a user given every right on the database (container apps' databases).
      await provider.createUser(instance, { username: 'legacy_owner', password: 'Legacy-0wner-pass' });
      const latin = await provider.createDatabase(instance, { name: 'legacy', charset: 'latin1', owner: 'legacy_owner' });
      expect(latin).toEqual({ name: 'legacy', owner: null, charset: 'latin1', collation: 'latin1_swedish_ci' });
      const byCollation = await provider.createDatabase(instance, { name: 'sorted', collation: 'utf8mb4_bin' });
      expect(byCollation).toMatchObject({ charset: 'utf8mb4', collation: 'utf8mb4_bin' });
      await expectRejects(provider.createDatabase(instance, { name: 'bad1', charset: 'klingon' }), BackendRefusedError, {
        code: 'validation_failed',
        param: 'charset',
      });
      await expectRejects(provider.createDatabase(instance, { name: 'bad2', charset: 'latin1', collation: 'utf8mb4_bin' }), BackendRefusedError, {
        code: 'validation_failed',
        param: 'collation',
      });
      await provider.deleteDatabase(instance, 'legacy');
      await provider.deleteDatabase(instance, 'sorted');
    } else {
      await provider.createUser(instance, { username: 'owner_one', password: USER_PASSWORD });
      const owned = await provider.createDatabase(instance, { name: 'owned', owner: 'owner_one', charset: 'latin1' });
      expect(owned).toEqual({ name: 'owned', owner: 'owner_one', charset: null, collation: null });
      await expectRejects(provider.createDatabase(instance, { name: 'orphan', owner: 'nobody_here' }), BackendRefusedError, {
        code: 'validation_failed',
        param: 'owner',
      });
      // Deleting the owner deletes no data: the database passes to the admin.
      await provider.deleteUser(instance, { username: 'owner_one' });
      expect((await provider.listDatabases(instance)).find((d) => d.name === 'owned')).toMatchObject({ owner: h().adminUsername });
      await provider.deleteDatabase(instance, 'owned');
    }
  });

  it('creates users that can log in, lists them with the admin, and refuses duplicates', async () => {
    const { provider, instance, adminUsername } = h();
    const bob = await provider.createUser(instance, { username: 'bob', password: USER_PASSWORD });
    expect(bob).toEqual({ id: userId('bob'), username: 'bob', host: isMysql() ? '%' : null, isAdmin: false });
    const users = await provider.listUsers(instance);
    expect(users).toContainEqual(bob);
    expect(users).toContainEqual({ id: userId(adminUsername), username: adminUsername, host: isMysql() ? '%' : null, isAdmin: true });
    expect(users.filter((u) => u.isAdmin)).toHaveLength(1);
    expect(JSON.stringify(users)).not.toContain(USER_PASSWORD);
    await expectRejects(provider.createUser(instance, { username: 'bob', password: USER_PASSWORD }), BackendRefusedError, {
      code: 'already_exists',
      param: null,
    });
    const session = await h().connect('bob', USER_PASSWORD);
    expect(await session.alive()).toBe(true);
    await session.close();
  });

  it("changes a password with effect at once, the admin's too", async () => {
    const { provider, instance, adminUsername, adminPassword } = h();
    await provider.setPassword(instance, { username: 'bob' }, 'bob-second-password');
    await expectLoginRefused(h(), 'bob', USER_PASSWORD);
    await (await h().connect('bob', 'bob-second-password')).close();

    await provider.setPassword(instance, { username: adminUsername }, 'admin-second-password');
    await expectLoginRefused(h(), adminUsername, adminPassword);
    await (await h().connect(adminUsername, 'admin-second-password')).close();
    await provider.setPassword(instance, { username: adminUsername }, adminPassword);
    await (await h().connect(adminUsername, adminPassword)).close();

    await expectRejects(provider.setPassword(instance, { username: 'nobody_here' }, 'whatever-password'), BackendGoneError);
  });

  it('deletes a user, ending its open sessions; the admin cannot be deleted', async () => {
    const { provider, instance, adminUsername } = h();
    const session = await h().connect('bob', 'bob-second-password');
    expect(await session.alive()).toBe(true);
    await provider.deleteUser(instance, isMysql() ? { username: 'bob', host: '%' } : { username: 'bob' });
    expect(await session.alive()).toBe(false);
    await session.close();
    expect((await provider.listUsers(instance)).map((u) => u.username)).not.toContain('bob');
    await expectLoginRefused(h(), 'bob', 'bob-second-password');
    await expectRejects(provider.deleteUser(instance, { username: 'bob' }), BackendGoneError);
    await expectRejects(provider.deleteUser(instance, { username: adminUsername }), BackendRefusedError, { code: 'conflict', param: null });
    expect((await provider.listUsers(instance)).some((u) => u.isAdmin)).toBe(true);
  });

  it('restarts for real: open sessions end, the instance answers again', async () => {
    const { provider, instance, adminUsername, adminPassword } = h();
    const before = await provider.status(instance);
    const session = await h().connect(adminUsername, adminPassword);
    expect(await session.alive()).toBe(true);
    await provider.restartInstance(instance);
    expect(await session.alive()).toBe(false);
    await session.close();
    const after = await provider.status(instance);
    expect(after).toMatchObject({ state: 'running', port: before.port, host: before.host });
    await (await h().connect(adminUsername, adminPassword)).close();
  });

  it('tails the engine log, oldest to newest, at most the lines asked for', async () => {
    const { provider, instance } = h();
    const all = await provider.logs(instance, 1000);
    expect(all.length).toBeGreaterThan(2);
    for (const entry of all) {
      expect(entry.timestamp).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      expect(['debug', 'info', 'notice', 'warning', 'error', 'fatal']).toContain(entry.level);
      expect(typeof entry.message).toBe('string');
    }
    const times = all.map((e) => Date.parse(e.timestamp));
    expect([...times].sort((a, b) => a - b)).toEqual(times);
    // The restart just done is in it.
    expect(all.some((e) => /ready (to accept|for) connections/.test(e.message))).toBe(true);
    // The engine may log more meanwhile (a line per aborted connection, several per second), so the
    // tail is checked against reads taken around it: three entries of the log, oldest to newest,
    // none older than the newest entry read before it.
    const three = await provider.logs(instance, 3);
    const after = await provider.logs(instance, 1000);
    expect(three).toHaveLength(3);
    const key = (e: { timestamp: string; message: string }) => `${e.timestamp} ${e.message}`;
    const known = new Set(after.map(key));
    for (const entry of three) expect(known.has(key(entry)), key(entry)).toBe(true);
    const tailTimes = three.map((e) => Date.parse(e.timestamp));
    expect([...tailTimes].sort((x, y) => x - y)).toEqual(tailTimes);
    expect(tailTimes[2]).toBeGreaterThanOrEqual(Date.parse(all[all.length - 1].timestamp));
    expect(JSON.stringify(all)).not.toContain(USER_PASSWORD);
    expect(JSON.stringify(all)).not.toContain(h().adminPassword);
  });

  it('reads statistics from the engine', async () => {
    const { provider, instance, adminUsername, adminPassword } = h();
    await provider.createDatabase(instance, { name: 'stats_db' });
    const session = await h().connect(adminUsername, adminPassword, 'stats_db');
    const stats = await provider.stats(instance);
    await session.close();
    expect(stats.connections.current).toBeGreaterThanOrEqual(1);
    expect(stats.connections.max).toBeGreaterThan(stats.connections.current);
    expect(stats.databases).toBe((await provider.listDatabases(instance)).length);
    expect(stats.uptimeSeconds).toBeGreaterThanOrEqual(0);
    expect(stats.transactions.committed).toBeGreaterThanOrEqual(0);
    if (stats.cacheHitRatio !== null) expect(stats.cacheHitRatio).toBeGreaterThanOrEqual(0);
    await provider.deleteDatabase(instance, 'stats_db');
  });

  it('backs up with the dump tool: same key same backup, listed newest first once complete', async () => {
    const { provider, instance } = h();
    const first = await provider.startBackup(instance, 'key-1');
    expect(first.status).toMatch(/^(running|completed)$/);
    expect((await provider.startBackup(instance, 'key-1')).id).toBe(first.id);
    const done = await waitForBackup(provider, instance, first.id);
    expect(done).toMatchObject({ id: first.id, status: 'completed' });
    expect(done.sizeBytes).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 1_100)); // backup ids and times have second resolution
    const second = await provider.startBackup(instance, 'key-2');
    await waitForBackup(provider, instance, second.id);
    const list = await provider.listBackups(instance);
    expect(list.map((b) => b.id).slice(0, 2)).toEqual([second.id, first.id]);
  });

  it('reports an unknown instance as gone', async () => {
    const { provider } = h();
    await expectRejects(provider.status('no-such-instance'), BackendGoneError);
    await expectRejects(provider.listDatabases('no-such-instance'), BackendGoneError);
  });

  it('does not answer while stopped (BackendUnavailableError), and does again once started', async () => {
    const { provider, instance, adminUsername, adminPassword } = h();
    await provider.stopInstance(instance);
    await expectRejects(provider.status(instance), BackendUnavailableError, { backend: 'dbaas' });
    await expectRejects(provider.listDatabases(instance), BackendUnavailableError);
    await expectRejects(provider.createUser(instance, { username: 'late', password: USER_PASSWORD }), BackendUnavailableError);
    await expectRejects(provider.startBackup(instance, 'key-3'), BackendUnavailableError);
    await expectLoginRefused(h(), adminUsername, adminPassword);
    await provider.startInstance(instance);
    expect((await provider.status(instance)).state).toBe('running');
    await (await h().connect(adminUsername, adminPassword)).close();
  });
}
