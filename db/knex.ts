import knexFactory, { type Knex } from 'knex';
import { Model } from 'objection';
import pg from 'pg';
import { migrationSource } from './migrations';

// bigint ids fit comfortably in a double; numeric money is returned as a number with 2 decimals.
pg.types.setTypeParser(20, (v) => Number(v));
pg.types.setTypeParser(1700, (v) => Number(v));

export type Db = Knex;

export function createDb(databaseUrl: string, poolMax = 10): Db {
  const db = knexFactory({
    client: 'pg',
    connection: databaseUrl,
    pool: { min: 0, max: poolMax },
    migrations: { migrationSource, tableName: 'knex_migrations' },
  });
  Model.knex(db);
  return db;
}

export async function migrateLatest(db: Db): Promise<void> {
  await db.migrate.latest();
}
