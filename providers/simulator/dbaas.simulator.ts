import type { Knex } from 'knex';
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../../common/crypto';
import type {
  DbBackup,
  DbConnectionInfo,
  DbDatabase,
  DbEngine,
  DbInstanceStatus,
  DbLogEntry,
  DbLogLevel,
  DbStats,
  DbUser,
  DbUserRef,
  DbaasProvider,
  NewDbDatabase,
  NewDbInstance,
} from '../dbaas.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { simulatedDelay } from '../switchboard';
import type { SimulatedTasks } from './task-engine';

const BACKEND = 'dbaas';

/** How long things take at SIM_DELAY_SCALE 1 (about what the real instances take on a small machine). */
const TIMING_MS = { create: 3_000, start: 1_000, stop: 500, restart: 1_500, backup: 5_000, call: 20 } as const;

const ENGINES: Record<DbEngine, { version: string; port: number; defaultDatabase: string | null; charset: string | null; collation: string | null }> = {
  postgresql: { version: '15.18', port: 5432, defaultDatabase: 'postgres', charset: null, collation: null },
  mysql: { version: '10.11.19', port: 3306, defaultDatabase: null, charset: 'utf8mb4', collation: 'utf8mb4_general_ci' },
};

/** The character sets the simulated MariaDB knows, with their default collation. */
const MYSQL_CHARSETS: Record<string, string> = {
  utf8mb4: 'utf8mb4_general_ci',
  utf8mb3: 'utf8mb3_general_ci',
  latin1: 'latin1_swedish_ci',
  ascii: 'ascii_general_ci',
  binary: 'binary',
};
const EMPTY_DATABASE_BYTES = 7_500_000;

/**
 * A certificate authority no simulated instance presents a certificate of (there is no server to
 * connect to); `connection` returns it so that the response has the real shape. Its key was
 * thrown away when it was made.
 */
export const SIMULATOR_CA_CERTIFICATE = `-----BEGIN CERTIFICATE-----
MIIB3DCCAYOgAwIBAgIUXnMn5nD7Ah3Sw05mCpgbzhG4W+IwCgYIKoZIzj0EAwIw
OzEcMBoGA1UECgwTQ2xvdWQgY29udHJvbCBwbGFuZTEbMBkGA1UEAwwSREJhYVMg
c2ltdWxhdG9yIENBMCAXDTI2MTEyMzIxMzMyNVoYDzIxMjYxMDMwMjEzMzI1WjA7
MRwwGgYDVQQKDBNDbG91ZCBjb250cm9sIHBsYW5lMRswGQYDVQQDDBJEQmFhUyBz
aW11bGF0b3IgQ0EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAATjDSVEN83RnViB
mhJmdveJjWk5fNprZa4fPiVjDZNxlaFixmHknt+cEU9LBJqA5m2ey6y5Xta2Y814
WkCc5kbMo2MwYTAdBgNVHQ4EFgQUZGtfLlDTQI20bfAi/kpiTF3RRpYwHwYDVR0j
BBgwFoAUZGtfLlDTQI20bfAi/kpiTF3RRpYwDwYDVR0TAQH/BAUwAwEB/zAOBgNV
HQ8BAf8EBAMCAQYwCgYIKoZIzj0EAwIDRwAwRAIgKsLo+VbnuMI97DP1I5LuuGbV
UeQ97tkuuO3hLSUSO2ECIC0cWf37D6Wmidzb0C6oBGGOPcmWLxxWs4pguVVAfYM5
-----END CERTIFICATE-----
`;

interface InstanceRow {
  name: string;
  service_id: number | null;
  engine: DbEngine;
  version: string;
  host: string;
  port: number;
  admin_username: string;
  state: 'running' | 'stopped';
  started_at: Date | null;
  commits: string;
}

interface UserRow {
  instance: string;
  username: string;
  host: string;
  password_hash: string;
  is_admin: boolean;
}

interface BackupRow {
  id: string;
  instance: string;
  request_key: string;
  task_id: string;
  size_bytes: string;
  created_at: Date;
}

// Salted by instance and name, so the same password gives different hashes; never stored in clear.
const passwordHash = (instance: string, username: string, password: string) => sha256Hex(`sim-dbaas:${instance}:${username}:${password}`);

/**
 * The DBaaS backend, simulated in PostgreSQL: instances with databases, users, an engine log,
 * statistics and backups, taking `TIMING_MS × SIM_DELAY_SCALE` (a backup is a task of the shared
 * task engine, so `faults.failNext('dbaas', instance, { kind: 'backup' })` makes the next one
 * fail). It has no server to connect to; `openSession` stands in for a client logging in (checked against the user's password), so
 * that a restart, a stop or a deleted user can be seen ending sessions. The outage switch is not
 * here: the registry wraps this provider with withOutageSwitch like the real one.
 */
export class DbaasSimulator implements DbaasProvider {
  readonly pollIntervalMs: number;
  private readonly scale: number;

  constructor(
    private readonly db: Knex,
    private readonly tasks: SimulatedTasks,
  ) {
    this.scale = tasks.scale;
    this.pollIntervalMs = Math.max(20, Math.round(500 * this.scale));
  }

  private delay(ms: number): Promise<void> {
    return simulatedDelay(ms, this.scale);
  }

  private async row(id: string, trx: Knex = this.db): Promise<InstanceRow> {
    const row = await trx<InstanceRow>('sim_dbaas_instances').where({ name: id }).first();
    if (!row) throw new BackendGoneError(BACKEND, `instance ${id}`);
    return row;
  }

  /** The instance, which must be running: a stopped one does not answer. */
  private async running(id: string, trx: Knex = this.db): Promise<InstanceRow> {
    await this.delay(TIMING_MS.call);
    const row = await this.row(id, trx);
    if (row.state !== 'running') throw new BackendUnavailableError(BACKEND, `instance ${id} is not running`);
    return row;
  }

  private async log(trx: Knex, instance: string, level: DbLogLevel, message: string): Promise<void> {
    await trx('sim_dbaas_log').insert({ instance, level, message });
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  async createInstance(spec: NewDbInstance): Promise<DbInstanceStatus> {
    const existing = await this.db<InstanceRow>('sim_dbaas_instances').where({ name: spec.name }).first();
    if (existing && existing.engine !== spec.engine)
      throw new BackendRefusedError(BACKEND, `instance ${spec.name} already exists with engine ${existing.engine}`, 'already_exists');
    if (!existing) {
      await this.delay(TIMING_MS.create);
      const { nextval } = (await this.db.raw("select nextval('sim_dbaas_address_seq')::int as nextval")).rows[0];
      const engine = ENGINES[spec.engine];
      await this.db('sim_dbaas_instances')
        .insert({
          name: spec.name,
          service_id: spec.serviceId,
          engine: spec.engine,
          version: engine.version,
          // Simulated instances get addresses from the documentation range TEST-NET-1.
          host: `192.0.2.${(Number(nextval) % 250) + 1}`,
          port: engine.port,
          admin_username: spec.adminUsername,
          state: 'running',
          started_at: this.db.fn.now(),
        })
        .onConflict('name')
        .ignore();
      await this.log(this.db, spec.name, 'info', 'database system is ready to accept connections');
    }
    await this.db.transaction(async (trx) => {
      const row = await this.row(spec.name, trx);
      if (row.state !== 'running') {
        await trx('sim_dbaas_instances').where({ name: spec.name }).update({ state: 'running', started_at: trx.fn.now() });
        await this.log(trx, spec.name, 'info', 'database system is ready to accept connections');
      }
      const host = row.engine === 'mysql' ? '%' : '';
      await trx('sim_dbaas_users')
        .insert({
          instance: spec.name,
          username: row.admin_username,
          host,
          password_hash: passwordHash(spec.name, row.admin_username, spec.adminPassword),
          is_admin: true,
        })
        .onConflict(['instance', 'username', 'host'])
        .merge(['password_hash', 'is_admin']);
    });
    return this.status(spec.name);
  }

  async startInstance(id: string): Promise<void> {
    const row = await this.row(id);
    if (row.state === 'running') return;
    await this.delay(TIMING_MS.start);
    await this.db.transaction(async (trx) => {
      await trx('sim_dbaas_instances').where({ name: id }).update({ state: 'running', started_at: trx.fn.now() });
      await this.log(trx, id, 'info', 'database system is ready to accept connections');
    });
  }

  async stopInstance(id: string): Promise<void> {
    const row = await this.row(id);
    if (row.state === 'stopped') return;
    await this.delay(TIMING_MS.stop);
    await this.db.transaction(async (trx) => {
      await trx('sim_dbaas_sessions').where({ instance: id }).delete();
      await trx('sim_dbaas_instances').where({ name: id }).update({ state: 'stopped', started_at: null });
      await this.log(trx, id, 'info', 'database system is shut down');
    });
  }

  async restartInstance(id: string): Promise<void> {
    await this.row(id);
    await this.delay(TIMING_MS.restart);
    await this.db.transaction(async (trx) => {
      const ended = await trx('sim_dbaas_sessions').where({ instance: id }).delete();
      await this.log(trx, id, 'info', `received fast shutdown request; terminating ${ended} connection(s)`);
      await this.log(trx, id, 'info', 'database system is shut down');
      await trx('sim_dbaas_instances').where({ name: id }).update({ state: 'running', started_at: trx.fn.now() });
      await this.log(trx, id, 'info', 'database system is ready to accept connections');
    });
  }

  async destroyInstance(id: string): Promise<void> {
    await this.delay(TIMING_MS.stop);
    await this.db.transaction(async (trx) => {
      await trx('sim_dbaas_instances').where({ name: id }).delete();
      await this.tasks.forget(BACKEND, id, trx);
    });
  }

  /** Simulated instances have no process to lose: they are in the state their rows say. */
  async resumeInstances(): Promise<{ started: string[]; failed: Array<{ name: string; error: string }> }> {
    return { started: [], failed: [] };
  }

  // ---- reads -----------------------------------------------------------------------------------

  async status(id: string): Promise<DbInstanceStatus> {
    const row = await this.running(id);
    return {
      id: row.name,
      engine: row.engine,
      state: 'running',
      version: row.version,
      host: row.host,
      port: row.port,
      uptimeSeconds: row.started_at ? Math.max(0, Math.floor((Date.now() - new Date(row.started_at).getTime()) / 1000)) : 0,
    };
  }

  async connectionInfo(id: string): Promise<DbConnectionInfo> {
    await this.delay(TIMING_MS.call);
    const row = await this.row(id);
    return {
      host: row.host,
      port: row.port,
      database: ENGINES[row.engine].defaultDatabase,
      username: row.admin_username,
      tlsMode: 'verify-full',
      caCertificate: SIMULATOR_CA_CERTIFICATE,
    };
  }

  // ---- databases -------------------------------------------------------------------------------

  private toDatabase(engine: DbEngine, r: { name: string; owner: string | null; charset: string | null; collation: string | null }): DbDatabase {
    return engine === 'postgresql'
      ? { name: r.name, owner: r.owner, charset: null, collation: null }
      : { name: r.name, owner: null, charset: r.charset, collation: r.collation };
  }

  async listDatabases(id: string): Promise<DbDatabase[]> {
    const row = await this.running(id);
    const rows = await this.db('sim_dbaas_databases').where({ instance: id }).orderBy('name');
    return rows.map((r) => this.toDatabase(row.engine, r));
  }

  async createDatabase(id: string, spec: NewDbDatabase): Promise<DbDatabase> {
    return this.db.transaction(async (trx) => {
      const row = await this.running(id, trx);
      await trx('sim_dbaas_instances').where({ name: id }).forUpdate().first();
      if (await trx('sim_dbaas_databases').where({ instance: id, name: spec.name }).first())
        throw new BackendRefusedError(BACKEND, `database "${spec.name}" already exists`, 'already_exists');
      let owner: string | null = null;
      let charset: string | null = null;
      let collation: string | null = null;
      if (row.engine === 'postgresql') {
        owner = spec.owner ?? row.admin_username;
        if (!(await trx('sim_dbaas_users').where({ instance: id, username: owner }).first()))
          throw new BackendRefusedError(BACKEND, `user "${owner}" does not exist`, 'validation_failed', 'owner');
      } else {
        charset = spec.charset ?? null;
        if (charset && !(charset in MYSQL_CHARSETS))
          throw new BackendRefusedError(BACKEND, `unknown character set "${charset}"`, 'validation_failed', 'charset');
        const wanted = spec.collation;
        if (wanted) {
          const owning = Object.keys(MYSQL_CHARSETS).find((cs) => wanted === MYSQL_CHARSETS[cs] || wanted.startsWith(`${cs}_`));
          if (!owning) throw new BackendRefusedError(BACKEND, `unknown collation "${wanted}"`, 'validation_failed', 'collation');
          if (charset && owning !== charset)
            throw new BackendRefusedError(BACKEND, `collation "${wanted}" does not belong to character set "${charset}"`, 'validation_failed', 'collation');
          charset ??= owning;
          collation = wanted;
        }
        charset ??= ENGINES.mysql.charset;
        collation ??= MYSQL_CHARSETS[charset as string];
      }
      await trx('sim_dbaas_databases').insert({
        instance: id,
        name: spec.name,
        owner,
        charset,
        collation,
        size_bytes: row.engine === 'postgresql' ? EMPTY_DATABASE_BYTES : 0,
      });
      await trx('sim_dbaas_instances').where({ name: id }).increment('commits', 1);
      return this.toDatabase(row.engine, { name: spec.name, owner, charset, collation });
    });
  }

  async deleteDatabase(id: string, name: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      await this.running(id, trx);
      const deleted = await trx('sim_dbaas_databases').where({ instance: id, name }).delete();
      if (!deleted) throw new BackendGoneError(BACKEND, `database ${name}`);
      await trx('sim_dbaas_sessions').where({ instance: id, database: name }).delete();
    });
  }

  // ---- users -----------------------------------------------------------------------------------

  private toUser(engine: DbEngine, r: UserRow): DbUser {
    return engine === 'mysql'
      ? { id: `${r.username}@${r.host}`, username: r.username, host: r.host, isAdmin: r.is_admin }
      : { id: r.username, username: r.username, host: null, isAdmin: r.is_admin };
  }

  /** The accounts a reference names: on PostgreSQL a host never matches. */
  private matching(trx: Knex, id: string, engine: DbEngine, user: DbUserRef) {
    const q = trx<UserRow>('sim_dbaas_users').where({ instance: id, username: user.username });
    if (user.host !== undefined) {
      if (engine === 'mysql') q.where({ host: user.host });
      else q.whereRaw('false');
    }
    return q;
  }

  async listUsers(id: string): Promise<DbUser[]> {
    const row = await this.running(id);
    const rows = await this.db<UserRow>('sim_dbaas_users').where({ instance: id }).orderBy(['username', 'host']);
    return rows.map((r) => this.toUser(row.engine, r));
  }

  async createUser(id: string, spec: { username: string; password: string }): Promise<DbUser> {
    return this.db.transaction(async (trx) => {
      const row = await this.running(id, trx);
      const host = row.engine === 'mysql' ? '%' : '';
      const conflict = row.engine === 'mysql' ? { instance: id, username: spec.username, host } : { instance: id, username: spec.username };
      if (await trx('sim_dbaas_users').where(conflict).first()) {
        throw new BackendRefusedError(BACKEND, `user "${spec.username}${row.engine === 'mysql' ? '@%' : ''}" already exists`, 'already_exists');
      }
      const user: UserRow = { instance: id, username: spec.username, host, password_hash: passwordHash(id, spec.username, spec.password), is_admin: false };
      await trx('sim_dbaas_users').insert(user);
      await trx('sim_dbaas_instances').where({ name: id }).increment('commits', 1);
      return this.toUser(row.engine, user);
    });
  }

  async deleteUser(id: string, user: DbUserRef): Promise<void> {
    await this.db.transaction(async (trx) => {
      const row = await this.running(id, trx);
      const accounts = await this.matching(trx, id, row.engine, user);
      if (!accounts.length) throw new BackendGoneError(BACKEND, `user ${user.host === undefined ? user.username : `${user.username}@${user.host}`}`);
      if (accounts.some((a) => a.is_admin)) throw new BackendRefusedError(BACKEND, 'the admin user cannot be deleted', 'conflict');
      await this.matching(trx, id, row.engine, user).delete();
      // Its sessions end; what it owned passes to the admin.
      await trx('sim_dbaas_sessions').where({ instance: id, username: user.username }).delete();
      if (row.engine === 'postgresql') await trx('sim_dbaas_databases').where({ instance: id, owner: user.username }).update({ owner: row.admin_username });
    });
  }

  async setPassword(id: string, user: DbUserRef, password: string): Promise<void> {
    await this.db.transaction(async (trx) => {
      const row = await this.running(id, trx);
      const updated = await this.matching(trx, id, row.engine, user).update({ password_hash: passwordHash(id, user.username, password) });
      if (!updated) throw new BackendGoneError(BACKEND, `user ${user.host === undefined ? user.username : `${user.username}@${user.host}`}`);
    });
  }

  // ---- simulated clients -----------------------------------------------------------------------

  /**
   * A client logging in (what a real client does over TLS): the password is checked, and a
   * session opens that a restart, a stop, a dropped database or a deleted user ends.
   * Returns the session id; a wrong password is refused (and logged, as an engine would).
   */
  async openSession(id: string, username: string, password: string, database?: string): Promise<number> {
    return this.db.transaction(async (trx) => {
      await this.running(id, trx);
      const accounts = await trx<UserRow>('sim_dbaas_users').where({ instance: id, username });
      if (!accounts.some((a) => a.password_hash === passwordHash(id, username, password))) {
        await this.log(trx, id, 'fatal', `password authentication failed for user "${username}"`);
        throw new BackendRefusedError(BACKEND, `password authentication failed for user "${username}"`, 'authentication_failed');
      }
      if (database && !(await trx('sim_dbaas_databases').where({ instance: id, name: database }).first()))
        throw new BackendRefusedError(BACKEND, `database "${database}" does not exist`, 'not_found');
      const [session] = await trx('sim_dbaas_sessions')
        .insert({ instance: id, username, database: database ?? null })
        .returning('id');
      return Number(session.id);
    });
  }

  /** Whether a simulated client's session is still open. */
  async sessionAlive(sessionId: number): Promise<boolean> {
    return Boolean(await this.db('sim_dbaas_sessions').where({ id: sessionId }).first());
  }

  async closeSession(sessionId: number): Promise<void> {
    await this.db('sim_dbaas_sessions').where({ id: sessionId }).delete();
  }

  // ---- logs and stats --------------------------------------------------------------------------

  async logs(id: string, lines: number): Promise<DbLogEntry[]> {
    await this.delay(TIMING_MS.call);
    await this.row(id);
    const rows = await this.db('sim_dbaas_log').where({ instance: id }).orderBy('id', 'desc').limit(lines);
    return rows.reverse().map((r) => ({ timestamp: new Date(r.at).toISOString(), level: r.level, message: r.message }));
  }

  async stats(id: string): Promise<DbStats> {
    const row = await this.running(id);
    const [{ count: sessions }] = await this.db('sim_dbaas_sessions').where({ instance: id }).count<Array<{ count: string }>>('id as count');
    const [{ count: databases, size }] = await this.db('sim_dbaas_databases')
      .where({ instance: id })
      .select(this.db.raw('count(*)::int as count'), this.db.raw('coalesce(sum(size_bytes), 0)::bigint as size'));
    return {
      uptimeSeconds: row.started_at ? Math.max(0, Math.floor((Date.now() - new Date(row.started_at).getTime()) / 1000)) : 0,
      connections: { current: Number(sessions), active: 0, max: 50 },
      databases: Number(databases),
      sizeBytes: Number(size),
      transactions: { committed: Number(row.commits), rolledBack: 0 },
      queries: row.engine === 'mysql' ? Number(row.commits) : null,
      rows: { returned: null, inserted: null, updated: null, deleted: null },
      cacheHitRatio: null,
      deadlocks: 0,
      bytes: row.engine === 'mysql' ? { received: 0, sent: 0 } : { received: null, sent: null },
    };
  }

  // ---- backups ---------------------------------------------------------------------------------

  /** A backup's state is its dump task's: running, done (completed) or failed. */
  private async backupRows(id: string, key?: string): Promise<Array<BackupRow & { status: string }>> {
    // The dump tasks only produce the state the join reads: nothing to apply when they end.
    await this.tasks.settle(BACKEND, id, async () => undefined);
    const q = this.db('sim_dbaas_backups as b')
      .join('sim_tasks as t', 't.id', 'b.task_id')
      .where('b.instance', id)
      .select('b.*', 't.status')
      .orderBy([
        { column: 'b.created_at', order: 'desc' },
        { column: 'b.id', order: 'desc' },
      ]);
    if (key !== undefined) q.where('b.request_key', key);
    return q;
  }

  private toBackup(r: BackupRow & { status: string }): DbBackup {
    const status = r.status === 'ok' ? 'completed' : r.status === 'error' ? 'failed' : 'running';
    return { id: r.id, status, sizeBytes: status === 'completed' ? Number(r.size_bytes) : null, createdAt: new Date(r.created_at) };
  }

  async startBackup(id: string, key: string): Promise<DbBackup> {
    await this.running(id);
    const [earlier] = await this.backupRows(id, key);
    if (earlier) return this.toBackup(earlier);
    const now = new Date();
    const backupId = `${now
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z')}-${randomBytes(3).toString('hex')}`;
    await this.db.transaction(async (trx) => {
      const task = await this.tasks.enqueue(
        { backend: BACKEND, subject: id, kind: 'backup', key: `dbaas-backup:${id}:${key}`, params: { backup_id: backupId }, durationMs: TIMING_MS.backup },
        trx,
      );
      const databases = await trx('sim_dbaas_databases').where({ instance: id }).orderBy('name').pluck('name');
      await trx('sim_dbaas_backups')
        .insert({
          id: backupId,
          instance: id,
          request_key: key,
          task_id: task.id,
          // A dump is far smaller than the files it reads.
          size_bytes: String(2_000 + databases.length * 1_500),
          databases: JSON.stringify(databases),
          created_at: now,
        })
        .onConflict(['instance', 'request_key'])
        .ignore();
      await this.log(trx, id, 'info', `backup ${backupId} started`);
    });
    const [row] = await this.backupRows(id, key);
    return this.toBackup(row);
  }

  async listBackups(id: string): Promise<DbBackup[]> {
    await this.delay(TIMING_MS.call);
    await this.row(id);
    return (await this.backupRows(id)).map((r) => this.toBackup(r));
  }

  /** The databases a simulated backup holds (the snapshot a restore would bring back). */
  async backupContents(id: string, backupId: string): Promise<string[]> {
    const row = await this.db('sim_dbaas_backups').where({ instance: id, id: backupId }).first();
    if (!row) throw new BackendGoneError(BACKEND, `backup ${backupId}`);
    return row.databases as string[];
  }
}
