/**
 * MariaDB instances (the `mysql` engine): Debian's mariadb-server binaries, one datadir, socket,
 * port and configuration file per instance (`--defaults-file`, so /etc/mysql and the packaged
 * system service play no part), run by the instance's own system account (engine.ts; `mysql` for
 * an instance from before accounts per instance).
 *
 * Access: clients over TCP on the loopback port with TLS required (`require_secure_transport`);
 * the control plane as `root@localhost` over the instance's private socket with unix_socket
 * authentication, so it holds no customer password.
 *
 * Customer accounts have rights on customer databases only. The admin (`<admin>@%`) has no global
 * privilege at all (USAGE): every privilege WITH GRANT OPTION on each customer database, given when
 * the database is created through the API and again by ensureAdmin for every database there is. It
 * can therefore create tables, routines and views in them and grant its users rights on them, but
 * has no right on `mysql`, `sys` or `performance_schema` (no writing its own grants), no CREATE USER
 * (which also drops and renames any account, `root@localhost` included: users are created through
 * the API), no RELOAD, FILE, SUPER, SET USER or SHUTDOWN, and no CREATE for new databases (they
 * are created through the API). `secure_file_priv` keeps file import/export inside the instance's
 * own `files/` directory in any case. ensureAdmin runs on every create, so an instance made with
 * broader grants is narrowed: the admin's privileges are revoked first, and every other customer
 * account or role loses its global privileges and anything on the system databases.
 *
 * Backups: mariadb-dump runs as the instance's OS account and logs in as the MariaDB account of
 * that name, which can only read (DUMP_PRIVILEGES). Database names reach it after `--`, so no name
 * is ever read as an option, and only names the API could have created are passed.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import mysql from 'mysql2/promise';
import type { DbDatabase, DbLogEntry, DbLogLevel, DbStats, DbUser, DbUserRef, NewDbDatabase } from '../dbaas.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { isConnectionFailure } from '../../db/errors';
import {
  groupLogLines,
  instanceAccount,
  instanceAddress,
  instanceUnavailable,
  num,
  type DumpCommand,
  type EngineDriver,
  type Instance,
  type ServerVitals,
} from './engine';
import { mysqlNativePasswordHash } from './password-verifiers';
import {
  CommandError,
  currentAccount,
  exists,
  ownedDirectory,
  processAlive,
  readPidFile,
  run,
  runningAsRoot,
  spawnDetached,
  waitFor,
  type Account,
} from './system';
import { readTenantFile, requireBinary, stopProcess } from '../local-server';

const BACKEND = 'dbaas';
const SYSTEM_DATABASES = ['mysql', 'information_schema', 'performance_schema', 'sys'];
const CONNECT_TIMEOUT_MS = 5_000;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 60_000;

/** The server or tool of `names` (the local-server kit's install check names scripts/install/dbaas.sh when missing). */
async function findBinary(...names: string[]): Promise<string> {
  return requireBinary(names, { what: 'MariaDB (mariadb-server)', script: 'scripts/install/dbaas.sh' });
}

const UNAVAILABLE_CODES = new Set([
  'ENOENT',
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'PROTOCOL_CONNECTION_LOST',
  'ER_SERVER_SHUTDOWN',
  'ER_CON_COUNT_ERROR',
  'ER_SERVER_IS_IN_SECURE_AUTH_MODE',
]);

export function mapError(err: unknown, instance: string): Error {
  if (err instanceof BackendGoneError || err instanceof BackendRefusedError || err instanceof BackendUnavailableError) return err;
  const e = err as { code?: string; message?: string; fatal?: boolean };
  if (
    (e.code && UNAVAILABLE_CODES.has(e.code)) ||
    isConnectionFailure(err) ||
    /connect ECONNREFUSED|Connection lost|closed state|socket has unexpectedly been closed/i.test(e.message ?? '')
  )
    return instanceUnavailable(BACKEND, instance, e.code ?? 'connection failed');
  // A new error without the driver's `sql` property: a statement that sets a password must not travel on.
  return new Error(`mariadb instance ${instance}: ${e.code ?? ''} ${e.message ?? String(err)}`.trim());
}

const LEVELS: Record<string, DbLogLevel> = { Note: 'info', Warning: 'warning', ERROR: 'error', Error: 'error' };
// `2026-11-23 10:00:00 0 [Note] message` (the hour is space-padded; the server runs with TZ=UTC).
const LOG_LINE = /^(\d{4}-\d\d-\d\d) +(\d{1,2}):(\d\d):(\d\d) +\d+ \[(\w+)\] (.*)$/;

/**
 * Accounts of the engine and of the control plane, never listed as users (with the accounts this
 * process and the dump log in as, see internalUsers()). `mysql` is the server's OS account in
 * Debian's install; `''` the anonymous account.
 */
const INTERNAL_USERS = ['root', 'mysql', 'mariadb.sys', ''];
/** What mariadb-dump needs, --routines, --events, --triggers and --system=users included (MariaDB 10.11); nothing that writes. */
const DUMP_PRIVILEGES = 'SELECT, SHOW VIEW, TRIGGER, LOCK TABLES, EVENT';

/** A database name as a literal GRANT pattern: `_` and `%` are wildcards there, backslash their escape. */
const literalPattern = (name: string) => name.replace(/[\\_%]/g, (ch) => `\\${ch}`);

export class MariaDbEngine implements EngineDriver {
  readonly engine = 'mysql' as const;
  readonly defaultDatabase = null;
  // Its configuration lives outside the data directory (root's .cnf): every file of the data moves.
  readonly hostFilesOfData: readonly string[] = [];

  account(inst: Instance): Promise<Account> {
    return instanceAccount(inst, 'mysql');
  }

  /** The MariaDB account this process's OS account maps to over the socket (unix_socket). */
  private controlUser(): string {
    return runningAsRoot() ? 'root' : currentAccount().name;
  }

  /** The MariaDB account the dump logs in as: the one of the OS account it runs as (unix_socket). */
  private async dumpUser(inst: Instance): Promise<string> {
    return (await this.account(inst)).name;
  }

  /** Accounts that are the server's or the control plane's, on this instance. */
  private async internalUsers(inst: Instance): Promise<string[]> {
    return [...new Set([...INTERNAL_USERS, this.controlUser(), await this.dumpUser(inst)])];
  }

  private cnf(inst: Instance) {
    return path.join(inst.paths.dir, 'my.cnf');
  }
  private socket(inst: Instance) {
    return path.join(inst.paths.run, 'mariadbd.sock');
  }
  private pidFile(inst: Instance) {
    return path.join(inst.paths.run, 'mariadbd.pid');
  }
  logFile(inst: Instance): string {
    return path.join(inst.paths.log, 'mariadb.log');
  }

  async initialize(inst: Instance, tls: { certFile: string; keyFile: string }): Promise<void> {
    const account = await this.account(inst);
    const { paths, rec } = inst;
    for (const dir of [paths.data, paths.run, paths.log, paths.backups, path.join(paths.dir, 'files')]) await ownedDirectory(dir, account);
    const settings = [
      '[mariadbd]',
      `datadir=${paths.data}`,
      `socket=${this.socket(inst)}`,
      `pid-file=${this.pidFile(inst)}`,
      `port=${rec.port}`,
      `bind-address=${instanceAddress(rec)}`,
      'skip-name-resolve',
      `log-error=${this.logFile(inst)}`,
      'log-warnings=2',
      `ssl-cert=${tls.certFile}`,
      `ssl-key=${tls.keyFile}`,
      'require-secure-transport=ON',
      'tls-version=TLSv1.2,TLSv1.3',
      'character-set-server=utf8mb4',
      'max-connections=50',
      'innodb-buffer-pool-size=32M',
      'innodb-log-file-size=16M',
      'performance-schema=OFF',
      'skip-log-bin',
      // Statements are never written to a log (they may set passwords).
      'general-log=0',
      'slow-query-log=0',
      // LOAD DATA INFILE, SELECT ... INTO OUTFILE and LOAD_FILE() only inside this instance.
      `secure-file-priv=${path.join(paths.dir, 'files')}`,
      '',
    ];
    // Root's, in root's instance directory: the server reads it but cannot change it.
    await fs.writeFile(this.cnf(inst), settings.join('\n'), { mode: 0o644 });
    const args = [`--defaults-file=${this.cnf(inst)}`, '--auth-root-authentication-method=socket', '--skip-test-db', '--skip-name-resolve'];
    if (runningAsRoot()) args.push(`--user=${account.name}`);
    await run(await findBinary('mariadb-install-db', 'mysql_install_db'), args, { env: { ...process.env, TZ: 'UTC' }, cwd: paths.dir });
  }

  /**
   * The server of this instance and no other: its pidfile is in a directory the instance's account
   * writes, so the pid it names counts only when that process runs as the account with this
   * instance's configuration (a tenant must not get another tenant's server stopped through it).
   */
  private async isOurs(inst: Instance, pid: number): Promise<boolean> {
    const defaults = `--defaults-file=${this.cnf(inst)}`;
    const uid = runningAsRoot() ? (await this.account(inst)).uid : undefined;
    return processAlive(pid, (args) => args.includes(defaults), { uid });
  }

  async isRunning(inst: Instance): Promise<boolean> {
    const pid = await readPidFile(this.pidFile(inst));
    return pid !== null && this.isOurs(inst, pid);
  }

  private async answers(inst: Instance): Promise<boolean> {
    try {
      await this.withConnection(inst, (c) => c.query('select 1'));
      return true;
    } catch {
      return false;
    }
  }

  async start(inst: Instance): Promise<void> {
    if ((await this.isRunning(inst)) && (await this.answers(inst))) return;
    const account = await this.account(inst);
    const server = await findBinary('mariadbd', 'mysqld');
    const pid = await spawnDetached(server, [`--defaults-file=${this.cnf(inst)}`], {
      as: account,
      env: { PATH: process.env.PATH, TZ: 'UTC', LANG: 'C.UTF-8' },
      cwd: inst.paths.dir,
      outputFile: path.join(inst.paths.log, 'mariadbd.out'),
    });
    let exited = false;
    const ready = await waitFor(
      async () => {
        if (!(await this.isOurs(inst, pid))) {
          exited = true;
          return true;
        }
        return this.answers(inst);
      },
      START_TIMEOUT_MS,
      100,
    );
    if (!ready || exited) {
      const tail = await readTenantFile(this.logFile(inst), 4 * 1024 * 1024).catch(() => '');
      const lastError = tail
        .trim()
        .split('\n')
        .filter((l) => /\[ERROR\]/.test(l))
        .slice(-2)
        .join(' | ');
      throw new CommandError('mariadbd', null, exited ? `exited during start: ${lastError || 'see its log'}` : 'did not answer within 60 s');
    }
  }

  async stop(inst: Instance): Promise<void> {
    const pid = await readPidFile(this.pidFile(inst));
    if (pid === null || !(await this.isOurs(inst, pid))) return;
    // SIGTERM is a normal shutdown: every connection is closed, InnoDB flushes.
    const uid = runningAsRoot() ? (await this.account(inst)).uid : undefined;
    await stopProcess(pid, (args) => args.includes(`--defaults-file=${this.cnf(inst)}`), STOP_TIMEOUT_MS, { uid });
    // The socket file goes with the server; wait for it so a start right after binds cleanly.
    await waitFor(async () => !(await exists(this.socket(inst))), 5_000, 50);
  }

  async restart(inst: Instance): Promise<void> {
    await this.stop(inst);
    await this.start(inst);
  }

  private async withConnection<T>(inst: Instance, fn: (c: mysql.Connection) => Promise<T>): Promise<T> {
    let connection: mysql.Connection | null = null;
    try {
      connection = await mysql.createConnection({
        socketPath: this.socket(inst),
        user: this.controlUser(),
        connectTimeout: CONNECT_TIMEOUT_MS,
        // The server's own collation: literals compared with catalog columns must not mix collations.
        charset: 'UTF8MB4_GENERAL_CI',
        supportBigNumbers: true,
        bigNumberStrings: true,
      });
      connection.on('error', () => undefined);
      return await fn(connection);
    } catch (err) {
      throw mapError(err, inst.rec.name);
    } finally {
      await connection?.end().catch(() => connection?.destroy());
    }
  }

  async ensureAdmin(inst: Instance, password: string): Promise<void> {
    const hash = mysqlNativePasswordHash(password);
    const admin = inst.rec.adminUsername;
    await this.withConnection(inst, async (c) => {
      const [rows] = await c.query<mysql.RowDataPacket[]>("select 1 from mysql.user where User = ? and Host = '%'", [admin]);
      if (rows.length) await c.query("ALTER USER ?@'%' IDENTIFIED BY PASSWORD ?", [admin, hash]);
      else await c.query("CREATE USER ?@'%' IDENTIFIED BY PASSWORD ?", [admin, hash]);
      // Whatever it held before (an instance made with broader grants) goes, at every level...
      await c.query("REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@'%'", [admin]);
      // ... and it gets the customer databases, each with the grant option.
      for (const db of await this.databaseRows(c)) await this.grantAdmin(c, admin, db.name);
      await this.confineCustomerAccounts(c, inst);
      await this.restrictDumpAccount(c, inst);
    });
  }

  /**
   * Every privilege on one customer database, with the grant option. In a database-level grant the
   * name is a pattern (`_` matches any character), and the customer's own `GRANT ... ON app_data.*`
   * may only pass on a pattern the admin holds as written: so the admin gets the name as a pattern,
   * unless that pattern also matches a system database (`mysq_` would cover `mysql`), when it gets
   * the name literally. A pattern can only reach other databases of the same instance, all the customer's.
   */
  private async grantAdmin(c: mysql.Connection, admin: string, database: string): Promise<void> {
    await c.query(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(await this.grantPattern(c, database), true)}.* TO ?@'%' WITH GRANT OPTION`, [admin]);
  }

  /** The database's name as the admin holds it in its grant (see grantAdmin). */
  private async grantPattern(c: mysql.Connection, database: string): Promise<string> {
    const [[hit]] = await c.query<mysql.RowDataPacket[]>(
      `select ${SYSTEM_DATABASES.map(() => '? like ?').join(' or ')} as system`,
      SYSTEM_DATABASES.flatMap((d) => [d, database]),
    );
    return Number(hit.system) ? literalPattern(database) : database;
  }

  /**
   * Takes from every customer account and role (all but the server's and the control plane's) its
   * global privileges and whatever it holds on the system databases or through a proxy grant. Only
   * an instance made with broader grants has any: written to the grant tables as root, then loaded.
   */
  private async confineCustomerAccounts(c: mysql.Connection, inst: Instance): Promise<void> {
    const keep = (await this.internalUsers(inst)).filter((u) => u !== '');
    const system = SYSTEM_DATABASES.filter((d) => d !== 'information_schema');
    const affected = async (sql: string, params: unknown[]) => (await c.query<mysql.ResultSetHeader>(sql, params))[0].affectedRows;
    let changed = 0;
    changed += await affected("update mysql.global_priv set priv = json_set(priv, '$.access', 0) where User not in (?) and json_value(priv, '$.access') <> 0", [
      keep,
    ]);
    // Database-level grants are patterns: one that matches a system database's name covers it.
    changed += await affected(`delete from mysql.db where User not in (?) and (${system.map(() => '? like Db').join(' or ')})`, [keep, ...system]);
    for (const table of ['tables_priv', 'columns_priv', 'procs_priv'])
      changed += await affected(`delete from mysql.${table} where User not in (?) and Db in (?)`, [keep, system]);
    changed += await affected('delete from mysql.proxies_priv where User not in (?)', [keep]);
    if (changed > 0) await c.query('FLUSH PRIVILEGES');
  }

  /**
   * The server OS accounts' MariaDB accounts (Debian's `mysql`, and the instance's own, which the
   * dump runs as) can read, for mariadb-dump, and nothing else. When the control plane is that
   * account itself (an unprivileged checkout runs everything as one OS account), it keeps its rights.
   */
  private async restrictDumpAccount(c: mysql.Connection, inst: Instance): Promise<void> {
    const dump = await this.dumpUser(inst);
    if (dump === this.controlUser()) return;
    await c.query("CREATE USER IF NOT EXISTS ?@'localhost' IDENTIFIED VIA unix_socket", [dump]);
    // Another instance's dump account (`cdb-...`, a name no customer account can have): the one of the
    // host an instance moved from, carried over with its files (docs/hosts.md "Moving").
    const [others] = await c.query<mysql.RowDataPacket[]>("select User from mysql.user where Host = 'localhost' and User like 'cdb-%' and User <> ?", [dump]);
    for (const other of others) await c.query("DROP USER ?@'localhost'", [other.User]);
    for (const user of new Set(['mysql', dump])) {
      if (user === this.controlUser()) continue;
      const [found] = await c.query<mysql.RowDataPacket[]>("select 1 from mysql.user where User = ? and Host = 'localhost'", [user]);
      if (!found.length) continue;
      await c.query("REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@'localhost'", [user]);
      const [proxies] = await c.query<mysql.ResultSetHeader>("delete from mysql.proxies_priv where User = ? and Host = 'localhost'", [user]);
      if (proxies.affectedRows > 0) await c.query('FLUSH PRIVILEGES');
      await c.query(`GRANT ${DUMP_PRIVILEGES} ON *.* TO ?@'localhost'`, [user]);
    }
  }

  async vitals(inst: Instance): Promise<ServerVitals> {
    return this.withConnection(inst, async (c) => {
      const [rows] = await c.query<mysql.RowDataPacket[]>(
        "select version() as version, (select variable_value from information_schema.global_status where variable_name = 'UPTIME') as uptime",
      );
      return { version: String(rows[0].version).split('-')[0], uptimeSeconds: Number(rows[0].uptime) };
    });
  }

  private async databaseRows(c: mysql.Connection, name?: string): Promise<DbDatabase[]> {
    const [rows] = await c.query<mysql.RowDataPacket[]>(
      `select schema_name as name, default_character_set_name as charset, default_collation_name as collation
       from information_schema.schemata where schema_name not in (?) ${name ? 'and schema_name = ?' : ''} order by schema_name`,
      name ? [SYSTEM_DATABASES, name] : [SYSTEM_DATABASES],
    );
    return rows.map((r) => ({ name: r.name, owner: null, charset: r.charset, collation: r.collation }));
  }

  async listDatabases(inst: Instance): Promise<DbDatabase[]> {
    return this.withConnection(inst, (c) => this.databaseRows(c));
  }

  async createDatabase(inst: Instance, spec: NewDbDatabase): Promise<DbDatabase> {
    return this.withConnection(inst, async (c) => {
      if ((await this.databaseRows(c, spec.name)).length) throw new BackendRefusedError(BACKEND, `database "${spec.name}" already exists`, 'already_exists');
      let charset = spec.charset;
      if (charset) {
        const [rows] = await c.query<mysql.RowDataPacket[]>('select 1 from information_schema.character_sets where character_set_name = ?', [charset]);
        if (!rows.length) throw new BackendRefusedError(BACKEND, `unknown character set "${charset}"`, 'validation_failed', 'charset');
      }
      if (spec.collation) {
        const [rows] = await c.query<mysql.RowDataPacket[]>(
          'select character_set_name as charset from information_schema.collations where collation_name = ?',
          [spec.collation],
        );
        if (!rows.length) throw new BackendRefusedError(BACKEND, `unknown collation "${spec.collation}"`, 'validation_failed', 'collation');
        if (charset && rows[0].charset !== charset)
          throw new BackendRefusedError(
            BACKEND,
            `collation "${spec.collation}" does not belong to character set "${charset}"`,
            'validation_failed',
            'collation',
          );
        charset ??= rows[0].charset as string;
      }
      const options = `${charset ? ` CHARACTER SET ${charset}` : ''}${spec.collation ? ` COLLATE ${spec.collation}` : ''}`;
      await c.query(`CREATE DATABASE ${mysql.escapeId(spec.name, true)}${options}`);
      // The admin's rights on it: it has none on the server as a whole.
      await this.grantAdmin(c, inst.rec.adminUsername, spec.name);
      // Its owner, when one is named (a user made for it): every right on it, none elsewhere.
      if (spec.owner) await c.query(`GRANT ALL PRIVILEGES ON ${mysql.escapeId(await this.grantPattern(c, spec.name), true)}.* TO ?@'%'`, [spec.owner]);
      return (await this.databaseRows(c, spec.name))[0];
    });
  }

  async deleteDatabase(inst: Instance, name: string): Promise<void> {
    await this.withConnection(inst, async (c) => {
      if (!(await this.databaseRows(c, name)).length) throw new BackendGoneError(BACKEND, `database ${name}`);
      // Like PostgreSQL's DROP ... WITH (FORCE): sessions using it are ended first, so an open
      // transaction cannot hold the drop up.
      const [sessions] = await c.query<mysql.RowDataPacket[]>('select id from information_schema.processlist where db = ? and id <> connection_id()', [name]);
      for (const s of sessions) await c.query('KILL CONNECTION ?', [Number(s.id)]).catch(() => undefined);
      await c.query(`DROP DATABASE ${mysql.escapeId(name, true)}`);
    });
  }

  private async accounts(c: mysql.Connection, inst: Instance, user?: DbUserRef): Promise<Array<{ user: string; host: string }>> {
    const where = ["is_role = 'N'", 'User not in (?)'];
    const params: unknown[] = [await this.internalUsers(inst)];
    if (user) {
      where.push('User = ?');
      params.push(user.username);
      if (user.host !== undefined) {
        where.push('Host = ?');
        params.push(user.host);
      }
    }
    const [rows] = await c.query<mysql.RowDataPacket[]>(
      `select User as user, Host as host from mysql.user where ${where.join(' and ')} order by User, Host`,
      params,
    );
    return rows.map((r) => ({ user: String(r.user), host: String(r.host) }));
  }

  private toUser(inst: Instance, a: { user: string; host: string }): DbUser {
    return { id: `${a.user}@${a.host}`, username: a.user, host: a.host, isAdmin: a.user === inst.rec.adminUsername && a.host === '%' };
  }

  async listUsers(inst: Instance): Promise<DbUser[]> {
    return this.withConnection(inst, async (c) => (await this.accounts(c, inst)).map((a) => this.toUser(inst, a)));
  }

  async createUser(inst: Instance, username: string, password: string): Promise<DbUser> {
    const hash = mysqlNativePasswordHash(password);
    if ((await this.internalUsers(inst)).includes(username))
      throw new BackendRefusedError(BACKEND, `"${username}" is an account of the database server`, 'validation_failed', 'username');
    return this.withConnection(inst, async (c) => {
      if ((await this.accounts(c, inst, { username, host: '%' })).length)
        throw new BackendRefusedError(BACKEND, `user "${username}@%" already exists`, 'already_exists');
      await c.query("CREATE USER ?@'%' IDENTIFIED BY PASSWORD ?", [username, hash]);
      return this.toUser(inst, { user: username, host: '%' });
    });
  }

  async deleteUser(inst: Instance, user: DbUserRef): Promise<void> {
    await this.withConnection(inst, async (c) => {
      const accounts = await this.accounts(c, inst, user);
      if (!accounts.length) throw new BackendGoneError(BACKEND, `user ${user.host === undefined ? user.username : `${user.username}@${user.host}`}`);
      if (accounts.some((a) => this.toUser(inst, a).isAdmin)) throw new BackendRefusedError(BACKEND, 'the admin user cannot be deleted', 'conflict');
      for (const a of accounts) await c.query('DROP USER ?@?', [a.user, a.host]);
      // DROP USER leaves open sessions alone: end the ones that came in through a dropped account
      // (the account's host is a LIKE pattern over the client address).
      const [sessions] = await c.query<mysql.RowDataPacket[]>(
        "select id, substring_index(host, ':', 1) as client from information_schema.processlist where user = ? and id <> connection_id()",
        [user.username],
      );
      const remaining = await this.accounts(c, inst, { username: user.username });
      for (const s of sessions) {
        const matches = async (pattern: string) => {
          const [r] = await c.query<mysql.RowDataPacket[]>('select ? like ? as m', [s.client, pattern]);
          return Number(r[0].m) === 1;
        };
        let dropped = remaining.length === 0;
        for (const a of accounts) if (!dropped && (await matches(a.host))) dropped = true;
        if (dropped) await c.query('KILL CONNECTION ?', [Number(s.id)]).catch(() => undefined);
      }
    });
  }

  async setPassword(inst: Instance, user: DbUserRef, password: string): Promise<void> {
    const hash = mysqlNativePasswordHash(password);
    await this.withConnection(inst, async (c) => {
      const accounts = await this.accounts(c, inst, user);
      if (!accounts.length) throw new BackendGoneError(BACKEND, `user ${user.host === undefined ? user.username : `${user.username}@${user.host}`}`);
      for (const a of accounts) await c.query('ALTER USER ?@? IDENTIFIED BY PASSWORD ?', [a.user, a.host, hash]);
    });
  }

  async stats(inst: Instance): Promise<DbStats> {
    return this.withConnection(inst, async (c) => {
      const [status] = await c.query<mysql.RowDataPacket[]>(
        `select lower(variable_name) as name, variable_value as value from information_schema.global_status where variable_name in
         ('UPTIME','THREADS_CONNECTED','THREADS_RUNNING','QUESTIONS','COM_COMMIT','COM_ROLLBACK','INNODB_ROWS_READ','INNODB_ROWS_INSERTED',
          'INNODB_ROWS_UPDATED','INNODB_ROWS_DELETED','INNODB_BUFFER_POOL_READ_REQUESTS','INNODB_BUFFER_POOL_READS','INNODB_DEADLOCKS',
          'BYTES_RECEIVED','BYTES_SENT')`,
      );
      const s = Object.fromEntries(status.map((r) => [String(r.name), num(r.value)]));
      const [[limits]] = await c.query<mysql.RowDataPacket[]>('select @@max_connections as max');
      const [[size]] = await c.query<mysql.RowDataPacket[]>(
        `select (select count(*) from information_schema.schemata where schema_name not in (?)) as db_count,
                (select coalesce(sum(data_length + index_length), 0) from information_schema.tables where table_schema not in (?)) as size`,
        [SYSTEM_DATABASES, SYSTEM_DATABASES],
      );
      const requests = s.innodb_buffer_pool_read_requests ?? 0;
      const misses = s.innodb_buffer_pool_reads ?? 0;
      // This very connection is one of the threads; it is not the customer's.
      return {
        uptimeSeconds: s.uptime ?? 0,
        connections: { current: Math.max(0, (s.threads_connected ?? 1) - 1), active: Math.max(0, (s.threads_running ?? 1) - 1), max: Number(limits.max) },
        databases: Number(size.db_count),
        sizeBytes: Number(size.size),
        transactions: { committed: s.com_commit ?? null, rolledBack: s.com_rollback ?? null },
        queries: s.questions ?? null,
        rows: {
          returned: s.innodb_rows_read ?? null,
          inserted: s.innodb_rows_inserted ?? null,
          updated: s.innodb_rows_updated ?? null,
          deleted: s.innodb_rows_deleted ?? null,
        },
        cacheHitRatio: requests > 0 ? Math.max(0, (requests - misses) / requests) : null,
        deadlocks: s.innodb_deadlocks ?? null,
        bytes: { received: s.bytes_received ?? null, sent: s.bytes_sent ?? null },
      };
    });
  }

  parseLog(lines: string[]): DbLogEntry[] {
    return groupLogLines(
      lines,
      (line) => {
        const m = LOG_LINE.exec(line);
        if (!m) return null;
        const timestamp = new Date(`${m[1]}T${m[2].padStart(2, '0')}:${m[3]}:${m[4]}Z`).toISOString();
        return { timestamp, level: LEVELS[m[5]] ?? 'info', message: m[6] };
      },
      (entry, line) => {
        entry.message += `\n${line}`;
      },
    );
  }

  async dumpCommand(inst: Instance): Promise<DumpCommand> {
    // Every customer database, whatever its name: one made around the API (by SQL, with the broader
    // rights admins had before) is the tenant's data too, and a backup that left it out while saying
    // `completed` would lose it. After `--` a name is only ever a name (`--all-databases`,
    // `--socket=...` included), never an option.
    const databases = (await this.listDatabases(inst)).map((d) => d.name);
    // Users as CREATE USER IF NOT EXISTS (--insert-ignore), so the dump replays into a fresh server.
    const args = [
      `--socket=${this.socket(inst)}`,
      // The dump runs as the instance's account: `<account>@localhost` by unix_socket, read-only (restrictDumpAccount).
      `--user=${await this.dumpUser(inst)}`,
      '--single-transaction',
      '--routines',
      '--events',
      '--triggers',
      '--insert-ignore',
      '--system=users',
    ];
    // `--` ends the options: whatever follows is a database name, never an option.
    if (databases.length) args.push('--databases', '--', ...databases);
    return { command: await findBinary('mariadb-dump', 'mysqldump'), args };
  }
}
