import { randomBytes } from 'node:crypto';
import knexFactory from 'knex';
import { createDb, type Db } from '../../db/knex';

/** The server the suite creates its databases on (the `cloud` superuser of scripts/ensure-tools.sh). */
export function adminDatabaseUrl(): string {
  return process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL ?? 'postgres://cloud:cloud@127.0.0.1:5432/cloud';
}

export interface TestDatabase {
  url: string;
  db: Db;
  drop(): Promise<void>;
}

/** A fresh, migrated database for one test file; dropped afterwards. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const admin = knexFactory({ client: 'pg', connection: adminDatabaseUrl(), pool: { min: 0, max: 1 } });
  const name = `cloud_test_${randomBytes(6).toString('hex')}`;
  await admin.raw(`create database ${name}`);
  await admin.destroy();
  const url = new URL(adminDatabaseUrl());
  url.pathname = `/${name}`;
  const db = createDb(url.toString(), 10);
  await db.migrate.latest();
  return {
    url: url.toString(),
    db,
    async drop() {
      await db.destroy();
      const again = knexFactory({ client: 'pg', connection: adminDatabaseUrl(), pool: { min: 0, max: 1 } });
      await again.raw(`drop database if exists ${name} with (force)`);
      await again.destroy();
    },
  };
}
