import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { adminDatabaseUrl, createTestDatabase, dropStaleTemplates } from './helpers/db';

/**
 * The suite's databases carry their creation time in their names, so that what a killed run left
 * (its template, its file databases) is dropped by a later run once it is hours old, while other runs
 * on the same server keep theirs.
 */
const admin = new pg.Client({ connectionString: adminDatabaseUrl() });
const made: string[] = [];
const exists = async (name: string) => (await admin.query('select 1 from pg_database where datname = $1', [name])).rowCount === 1;

afterAll(async () => {
  for (const name of made) await admin.query(`drop database if exists ${name} with (force)`);
  await admin.end();
});

describe('test databases', () => {
  it('are named with their creation time; those of a run killed hours ago are dropped, fresh ones and other names kept', async () => {
    await admin.connect();
    const fresh = await createTestDatabase();
    const freshName = new URL(fresh.url).pathname.slice(1);
    expect(freshName).toMatch(/^cloud_test_\d{13}_[0-9a-f]{12}$/);
    expect(Math.abs(Number(freshName.split('_')[2]) - Date.now())).toBeLessThan(60_000);

    const old = Date.now() - 7 * 3_600_000;
    const stale = [`cloud_test_${old}_0123456789ab`, `cloud_test_template_${old}_abcdef`];
    const kept = [`cloud_test_${Date.now() - 3_600_000}_0123456789ab`, 'cloud_test_0123456789ab'];
    for (const name of [...stale, ...kept]) {
      await admin.query(`create database ${name}`);
      made.push(name);
    }
    await dropStaleTemplates();
    for (const name of stale) expect(await exists(name), name).toBe(false);
    for (const name of [...kept, freshName]) expect(await exists(name), name).toBe(true);
    await fresh.drop();
  });
});
