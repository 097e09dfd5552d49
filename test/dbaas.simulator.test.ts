import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { createAccount, createService } from './helpers/fixtures';
import { DbaasSimulator } from '../providers/simulator/dbaas.simulator';
import { SimulatedTasks } from '../providers/simulator/task-engine';
import { BackendRefusedError } from '../providers/errors';
import type { DbEngine } from '../providers/dbaas.provider';
import { dbaasContract, waitForBackup, type ContractHarness } from './dbaas.support';

/**
 * The same provider contract on the PostgreSQL-backed simulator (DBAAS_BACKEND=simulator), for
 * both engines. Simulated clients log in with openSession, checked against the user's password.
 */
let testDb: TestDatabase;
let simulator: DbaasSimulator;

beforeAll(async () => {
  testDb = await createTestDatabase();
  simulator = new DbaasSimulator(testDb.db, new SimulatedTasks(testDb.db, 0.01));
});
afterAll(() => testDb?.drop());

function harnessFor(engine: DbEngine) {
  let harness: ContractHarness;
  beforeAll(async () => {
    const { accountId } = await createAccount(testDb.db);
    const { serviceId } = await createService(testDb.db, accountId, { family: 'dbaas' });
    const instance = `svc-${serviceId}`;
    await simulator.createInstance({ name: instance, serviceId, engine, adminUsername: 'admin', adminPassword: 'simulated-admin-password' });
    harness = {
      provider: simulator,
      engine,
      instance,
      adminUsername: 'admin',
      adminPassword: 'simulated-admin-password',
      async connect(username, password, database) {
        const session = await simulator.openSession(instance, username, password, database);
        return { alive: () => simulator.sessionAlive(session), close: () => simulator.closeSession(session) };
      },
    };
  });
  return () => harness;
}

describe('simulated PostgreSQL: the provider contract', () => {
  dbaasContract(harnessFor('postgresql'));
});

describe('simulated MariaDB: the provider contract', () => {
  const h = harnessFor('mysql');
  dbaasContract(h);

  it('keeps in a backup the databases of that moment, and takes time doing it', async () => {
    const { instance } = h();
    // The same tables at a slower clock: a dump of 2.5 s.
    const slow = new DbaasSimulator(testDb.db, new SimulatedTasks(testDb.db, 0.5));
    await slow.createDatabase(instance, { name: 'before' });
    const backup = await slow.startBackup(instance, 'snapshot');
    expect(backup.status).toBe('running');
    expect((await slow.listBackups(instance)).find((b) => b.id === backup.id)).toMatchObject({ status: 'running', sizeBytes: null });
    await slow.createDatabase(instance, { name: 'after' });
    expect(await waitForBackup(slow, instance, backup.id)).toMatchObject({ status: 'completed' });
    expect(await slow.backupContents(instance, backup.id)).toEqual(['before']);
  });

  it('fails the backup whose dump task was armed to fail', async () => {
    const { instance } = h();
    const tasks = new SimulatedTasks(testDb.db, 0.01);
    await tasks.failNext('dbaas', instance, { kind: 'backup', message: 'disk full (simulated)' });
    const backup = await simulator.startBackup(instance, 'doomed');
    expect(await waitForBackup(simulator, instance, backup.id)).toMatchObject({ status: 'failed', sizeBytes: null });
    const next = await simulator.startBackup(instance, 'fine');
    expect(await waitForBackup(simulator, instance, next.id)).toMatchObject({ status: 'completed' });
  });

  it('creating an existing instance with another engine is refused; with the same engine it resets the admin password', async () => {
    const { instance } = h();
    await expect(
      simulator.createInstance({ name: instance, serviceId: 1, engine: 'postgresql', adminUsername: 'admin', adminPassword: 'whatever-password' }),
    ).rejects.toBeInstanceOf(BackendRefusedError);
    await simulator.createInstance({ name: instance, serviceId: 1, engine: 'mysql', adminUsername: 'admin', adminPassword: 'reset-admin-password' });
    await expect(h().connect('admin', 'simulated-admin-password')).rejects.toBeInstanceOf(BackendRefusedError);
    await (await h().connect('admin', 'reset-admin-password')).close();
  });
});
