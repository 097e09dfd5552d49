import type { Knex } from 'knex';
import { randomBase62, type Keyring } from '../../common/crypto';
import { iso } from '../../common/time';
import type { Providers } from '../../providers';
import type { DbEngine } from '../../providers/dbaas.provider';
import { DomainError, quotaExceeded, validationFailed } from '../errors';
import { placeIfHosted } from '../hosts/directory';
import { CAAS_LIMITS } from './manage';

/**
 * A container service's databases (DECISIONS "CaaS"): each a real database with a user of its own
 * on the service's database server of that engine (a DBaaS instance, `svc-<n>-caas-pg|my`, made
 * with the first database of the engine). The user's password is generated, sealed, and reaches
 * only the apps' containers, in `DATABASE_URL_<NAME>` (and `DATABASE_URL`: the oldest database).
 */
export const DB_PASSWORD_PURPOSE = 'caas-database-password';
const DB_NAME = /^[a-z_][a-z0-9_]{0,62}$/;
/** Names the engines keep for themselves. */
const RESERVED = new Set(['postgres', 'template0', 'template1', 'mysql', 'sys', 'information_schema', 'performance_schema', 'public']);
const ENGINES: Record<string, DbEngine> = { postgresql: 'postgresql', mysql: 'mysql' };

export interface CaasDatabaseView {
  object: 'caas_database';
  name: string;
  engine: DbEngine;
  env_var: string;
  created_at: string;
}

interface DatabaseRow {
  service_id: number;
  name: string;
  engine: DbEngine;
  env_var: string;
  username: string;
  password_sealed: string;
  created_at: Date;
}

const present = (r: Pick<DatabaseRow, 'name' | 'engine' | 'env_var' | 'created_at'>): CaasDatabaseView => ({
  object: 'caas_database',
  name: r.name,
  engine: r.engine,
  env_var: r.env_var,
  created_at: iso(r.created_at)!,
});

interface Deps {
  db: Knex;
  keyring: Keyring;
  providers: Providers;
}

/** The service's database server of the engine, made (or started again) when missing. */
async function serverOf(deps: Deps, serviceId: number, engine: DbEngine): Promise<string> {
  // `svc-<n>-...`: the DBaaS backend finds an instance's host by the service in its name.
  const instance = `svc-${serviceId}-caas-${engine === 'postgresql' ? 'pg' : 'my'}`;
  let row = await deps.db('caas_db_servers').where({ service_id: serviceId, engine }).first();
  if (!row) {
    await deps
      .db('caas_db_servers')
      .insert({ service_id: serviceId, engine, instance, admin_password_sealed: deps.keyring.encrypt(DB_PASSWORD_PURPOSE, randomBase62(32)) })
      .onConflict(['service_id', 'engine'])
      .ignore();
    row = await deps.db('caas_db_servers').where({ service_id: serviceId, engine }).first();
  }
  // A database server lives on a host like a DBaaS service's: the container service is placed for it.
  await placeIfHosted(deps.db, deps.providers.hosts, 'dbaas', serviceId);
  await deps.providers.dbaas.createInstance({
    name: row.instance,
    serviceId,
    engine,
    adminUsername: 'caasadmin',
    adminPassword: deps.keyring.decrypt(DB_PASSWORD_PURPOSE, row.admin_password_sealed),
  });
  return row.instance;
}

export async function createDatabase(deps: Deps, serviceId: number, input: { engine: string; name: string }): Promise<CaasDatabaseView> {
  const engine = ENGINES[input.engine];
  const errors = [];
  if (!engine) errors.push({ param: 'engine', message: 'must be postgresql or mysql' });
  if (!DB_NAME.test(input.name)) errors.push({ param: 'name', message: 'must match ^[a-z_][a-z0-9_]{0,62}$' });
  else if (RESERVED.has(input.name) || input.name.startsWith('pg_')) errors.push({ param: 'name', message: `${input.name} is reserved` });
  if (errors.length) throw validationFailed(errors);
  const username = `${input.name.slice(0, 40)}_app`;
  const password = randomBase62(32);
  const env_var = `DATABASE_URL_${input.name.toUpperCase()}`;
  // The name is claimed first, under the service's lock (a second request sees it: 409, and counts
  // it against the limit); the server work happens outside that lock, and a failure gives the name back.
  const row = await deps.db.transaction(async (trx) => {
    await trx('services').where({ id: serviceId }).forUpdate().first();
    if (await trx('caas_databases').where({ service_id: serviceId, name: input.name }).first()) {
      throw new DomainError(409, 'invalid_request_error', 'already_exists', `A database named ${input.name} exists in this service.`, 'name');
    }
    const [{ n }] = await trx('caas_databases').where({ service_id: serviceId }).count({ n: '*' });
    if (Number(n) >= CAAS_LIMITS.databases) throw quotaExceeded(`The service holds at most ${CAAS_LIMITS.databases} databases (limits.databases).`);
    const [inserted] = await trx('caas_databases')
      .insert({ service_id: serviceId, name: input.name, engine, env_var, username, password_sealed: deps.keyring.encrypt(DB_PASSWORD_PURPOSE, password) })
      .returning('*');
    return inserted as DatabaseRow;
  });
  try {
    const instance = await serverOf(deps, serviceId, engine);
    // The user first (a retry finds it and sets the password), then its database.
    const users = await deps.providers.dbaas.listUsers(instance);
    if (users.some((u) => u.username === username)) await deps.providers.dbaas.setPassword(instance, { username }, password);
    else await deps.providers.dbaas.createUser(instance, { username, password });
    const databases = await deps.providers.dbaas.listDatabases(instance);
    if (!databases.some((d) => d.name === input.name)) await deps.providers.dbaas.createDatabase(instance, { name: input.name, owner: username });
  } catch (err) {
    await deps.db('caas_databases').where({ service_id: serviceId, name: input.name }).delete();
    throw err;
  }
  return present(row);
}

export async function listDatabases(db: Knex, serviceId: number): Promise<CaasDatabaseView[]> {
  const rows: DatabaseRow[] = await db('caas_databases').where({ service_id: serviceId }).orderBy('created_at');
  return rows.map(present);
}

/**
 * The variables that give the service's databases to an app: `DATABASE_URL_<NAME>` for each and
 * `DATABASE_URL` for the oldest, at the address the service's containers reach the server at
 * (TLS required by the server; `sslmode=require`, as the apps do not hold its CA).
 */
export async function databaseEnvOf(deps: Deps, serviceId: number): Promise<Record<string, string>> {
  const rows: Array<DatabaseRow & { instance: string }> = await deps
    .db('caas_databases as d')
    .join('caas_db_servers as s', function () {
      this.on('s.service_id', 'd.service_id').andOn('s.engine', 'd.engine');
    })
    .where('d.service_id', serviceId)
    .orderBy('d.created_at')
    .select('d.*', 's.instance');
  const env: Record<string, string> = {};
  for (const row of rows) {
    const info = await deps.providers.dbaas.connectionInfo(row.instance);
    const at = await deps.providers.caas.reachable(serviceId, { host: info.host, port: info.port });
    const password = encodeURIComponent(deps.keyring.decrypt(DB_PASSWORD_PURPOSE, row.password_sealed));
    const host = at.host.includes(':') ? `[${at.host}]` : at.host;
    env[row.env_var] =
      row.engine === 'postgresql'
        ? `postgresql://${row.username}:${password}@${host}:${at.port}/${row.name}?sslmode=require`
        : `mysql://${row.username}:${password}@${host}:${at.port}/${row.name}?ssl-mode=REQUIRED`;
    env.DATABASE_URL ??= env[row.env_var];
  }
  return env;
}
