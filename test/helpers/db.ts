import { randomBytes } from 'node:crypto';
import knexFactory, { type Knex } from 'knex';
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

function databaseUrl(name: string): string {
  const url = new URL(adminDatabaseUrl());
  url.pathname = `/${name}`;
  return url.toString();
}

async function asAdmin<T>(fn: (admin: Knex) => Promise<T>): Promise<T> {
  const admin = knexFactory({ client: 'pg', connection: adminDatabaseUrl(), pool: { min: 0, max: 1 } });
  try {
    return await fn(admin);
  } finally {
    await admin.destroy();
  }
}

/**
 * Templates and file databases are named with their creation time, so that a run killed before its
 * teardown leaves ones that a later run can recognise as stale (other runs on the same server keep theirs).
 */
const TEMPLATE_PREFIX = 'cloud_test_template_';
const FILE_PREFIX = 'cloud_test_';
const STALE_TEMPLATE_MS = 6 * 3_600_000;

/**
 * A migrated database for test/global-setup.ts to hand to every file of a run: cloning it
 * (`CREATE DATABASE ... TEMPLATE`) is a file copy, where migrating each file's database ran every
 * migration again. Nothing may stay connected to it (a clone needs it idle).
 */
export async function createTemplateDatabase(): Promise<{ name: string }> {
  const name = `${TEMPLATE_PREFIX}${Date.now()}_${randomBytes(3).toString('hex')}`;
  await asAdmin((admin) => admin.raw(`create database ${name}`));
  const db = createDb(databaseUrl(name), 2);
  try {
    await db.migrate.latest();
  } finally {
    await db.destroy();
  }
  return { name };
}

/** Drops the templates and file databases of runs that were killed hours ago (`cloud_test_[template_]<ms>_<hex>`). */
export async function dropStaleTemplates(): Promise<void> {
  await asAdmin(async (admin) => {
    const rows: Array<{ datname: string }> = (await admin.raw(`select datname from pg_database where datname like '${FILE_PREFIX}%'`)).rows;
    for (const { datname } of rows) {
      const m = /^cloud_test_(?:template_)?(\d{13})_[0-9a-f]+$/.exec(datname);
      if (m && Date.now() - Number(m[1]) > STALE_TEMPLATE_MS) await admin.raw(`drop database if exists ${datname} with (force)`);
    }
  });
}

let template: string | null = null;

/** Clone file databases from this run's template (test/helpers/per-file.ts); without one, each is migrated. */
export function useTemplateDatabase(name: string | undefined): void {
  template = name ?? null;
}

/** A fresh, migrated database for one test file (or benchmark); dropped afterwards. */
export async function createTestDatabase(): Promise<TestDatabase> {
  const name = `${FILE_PREFIX}${Date.now()}_${randomBytes(6).toString('hex')}`;
  await asAdmin((admin) => admin.raw(template ? `create database ${name} template ${template}` : `create database ${name}`));
  const url = databaseUrl(name);
  const db = createDb(url, 10);
  if (!template) await db.migrate.latest();
  return {
    url,
    db,
    async drop() {
      await db.destroy();
      await asAdmin((admin) => admin.raw(`drop database if exists ${name} with (force)`));
    },
  };
}
