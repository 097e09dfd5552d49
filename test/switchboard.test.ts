import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { BackendSwitchboard } from '../providers/switchboard';
import { BackendUnavailableError, liveRead } from '../providers/errors';

/** The simulator's fault switch and the bounded live read behind convention 7. */
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database?.drop());

describe('backend switchboard', () => {
  it('takes a family down for every process sharing the database, and back up', async () => {
    const api = new BackendSwitchboard(database.db, 0);
    const worker = new BackendSwitchboard(database.db, 0);
    await expect(worker.assertUp('dns')).resolves.toBeUndefined();
    await api.setDown('dns', true);
    await expect(worker.assertUp('dns')).rejects.toBeInstanceOf(BackendUnavailableError);
    expect(await worker.isDown('vps')).toBe(false);
    await api.setDown('dns', false);
    await expect(worker.assertUp('dns')).resolves.toBeUndefined();
  });
});

describe('liveRead', () => {
  it('returns the answer, or null when the backend fails or is too slow', async () => {
    expect(await liveRead(100, async () => ({ state: 'running' }))).toEqual({ state: 'running' });
    expect(await liveRead(100, async () => Promise.reject(new BackendUnavailableError('vps')))).toBeNull();
    expect(await liveRead(50, () => new Promise((resolve) => setTimeout(() => resolve('late'), 500)))).toBeNull();
  });
});
