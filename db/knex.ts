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

/**
 * One statement on a pooled connection, prepared under `name` (PostgreSQL parses and plans it once
 * per connection) and without the query builder: for the hot reads of the request path. A name
 * stands for one text; callers name each variant of a statement apart.
 */
export async function preparedQuery<R>(db: Db, name: string, text: string, values: unknown[]): Promise<R[]> {
  const pool = db.client as { acquireConnection(): Promise<pg.ClientBase>; releaseConnection(connection: pg.ClientBase): Promise<void> };
  const connection = await pool.acquireConnection();
  try {
    return (await connection.query<R & pg.QueryResultRow>({ name, text, values })).rows;
  } finally {
    await pool.releaseConnection(connection);
  }
}

/** SQL for a timestamptz as the API shows it (`2026-11-22T10:00:00.000Z`), formatted by PostgreSQL instead of parsed into a Date and printed again. */
export const isoSql = (column: string) => `to_char(${column} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

export async function migrateLatest(db: Db): Promise<void> {
  await db.migrate.latest();
}
