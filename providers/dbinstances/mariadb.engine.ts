/**
 * MariaDB instances (the `mysql` engine): Debian's mariadb-server binaries, one datadir, socket,
 * port and configuration file per instance (`--defaults-file`, so /etc/mysql and the packaged
 * system service play no part), run by the `mysql` system account.
 *
 * Access: clients over TCP on the loopback port with TLS required (`require_secure_transport`);
 * the control plane as `root@localhost` over the instance's private socket with unix_socket
 * authentication, so it holds no customer password. The customer's admin is `<admin>@%` with
 * every privilege and the grant option except FILE, SUPER and SHUTDOWN: no file of the machine
 * (the instances share the `mysql` account), no global settings such as log file paths; and
 * `secure_file_priv` keeps file import/export inside the instance's own `files/` directory.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import mysql from 'mysql2/promise';
import type { DbDatabase, DbLogEntry, DbLogLevel, DbStats, DbUser, DbUserRef, NewDbDatabase } from '../dbaas.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { groupLogLines, num, type DumpCommand, type EngineDriver, type Instance, type ServerVitals } from './engine';
import { mysqlNativePasswordHash } from './password-verifiers';
import {
  chownTree,
  CommandError,
  currentAccount,
  exists,
  processAlive,
  readPidFile,
  run,
  runningAsRoot,
  serverAccount,
  spawnDetached,
  waitFor,
  type Account,
} from './system';

const BACKEND = 'dbaas';
const SYSTEM_DATABASES = ['mysql', 'information_schema', 'performance_schema', 'sys'];
const CONNECT_TIMEOUT_MS = 5_000;
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 60_000;

/** Where Debian puts the server and its tools. */
const SEARCH_PATH = ['/usr/sbin', '/usr/bin', '/usr/local/sbin', '/usr/local/bin'];

async function findBinary(...names: string[]): Promise<string> {
  for (const dir of [...SEARCH_PATH, ...(process.env.PATH ?? '').split(':').filter(Boolean)]) {
    for (const name of names) {
      const candidate = path.join(dir, name);
      if (await exists(candidate)) return candidate;
    }
  }
  throw new Error(`${names[0]} is not installed (scripts/install/dbaas.sh installs mariadb-server)`);
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

function mapError(err: unknown, instance: string): Error {
  if (err instanceof BackendGoneError || err instanceof BackendRefusedError || err instanceof BackendUnavailableError) return err;
  const e = err as { code?: string; message?: string; fatal?: boolean };
  if ((e.code && UNAVAILABLE_CODES.has(e.code)) || /connect ECONNREFUSED|Connection lost/i.test(e.message ?? ''))
    return new BackendUnavailableError(BACKEND, `instance ${instance}: ${e.code ?? 'connection failed'}`);
  // A new error without the driver's `sql` property: a statement that sets a password must not travel on.
  return new Error(`mariadb instance ${instance}: ${e.code ?? ''} ${e.message ?? String(err)}`.trim());
}

const LEVELS: Record<string, DbLogLevel> = { Note: 'info', Warning: 'warning', ERROR: 'error', Error: 'error' };
// `2026-11-23 10:00:00 0 [Note] message` (the hour is space-padded; the server runs with TZ=UTC).
const LOG_LINE = /^(\d{4}-\d\d-\d\d) +(\d{1,2}):(\d\d):(\d\d) +\d+ \[(\w+)\] (.*)$/;

/** Accounts of the engine and of the control plane, never listed as users. */
const INTERNAL_USERS = ['root', 'mysql', 'mariadb.sys', ''];

export class MariaDbEngine implements EngineDriver {
  readonly engine = 'mysql' as const;
  readonly defaultDatabase = null;
  private accountP: Promise<Account> | null = null;

  account(): Promise<Account> {
    this.accountP ??= serverAccount('mysql');
    return this.accountP;
  }

  /** The MariaDB account this process's OS account maps to over the socket (unix_socket). */
  private controlUser(): string {
    return runningAsRoot() ? 'root' : currentAccount().name;
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
    const account = await this.account();
    const { paths, rec } = inst;
    for (const dir of [paths.data, paths.run, paths.log, paths.backups, path.join(paths.dir, 'files')]) await fs.mkdir(dir, { recursive: true, mode: 0o700 });
    const settings = [
      '[mariadbd]',
      `datadir=${paths.data}`,
      `socket=${this.socket(inst)}`,
      `pid-file=${this.pidFile(inst)}`,
      `port=${rec.port}`,
      'bind-address=127.0.0.1',
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
    await fs.writeFile(this.cnf(inst), settings.join('\n'), { mode: 0o644 });
    await chownTree(paths.dir, account);
    const args = [`--defaults-file=${this.cnf(inst)}`, '--auth-root-authentication-method=socket', '--skip-test-db', '--skip-name-resolve'];
    if (runningAsRoot()) args.push(`--user=${account.name}`);
    await run(await findBinary('mariadb-install-db', 'mysql_install_db'), args, { env: { ...process.env, TZ: 'UTC' }, cwd: paths.dir });
  }

  async isRunning(inst: Instance): Promise<boolean> {
    const pid = await readPidFile(this.pidFile(inst));
    return pid !== null && processAlive(pid, 'mariadbd');
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
    const account = await this.account();
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
        if (!(await processAlive(pid, 'mariadbd'))) {
          exited = true;
          return true;
        }
        return this.answers(inst);
      },
      START_TIMEOUT_MS,
      100,
    );
    if (!ready || exited) {
      const tail = await fs.readFile(this.logFile(inst), 'utf8').catch(() => '');
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
    if (pid === null || !(await processAlive(pid, 'mariadbd'))) return;
    // SIGTERM is a normal shutdown: every connection is closed, InnoDB flushes.
    process.kill(pid, 'SIGTERM');
    if (!(await waitFor(async () => !(await processAlive(pid, 'mariadbd')), STOP_TIMEOUT_MS, 100))) {
      process.kill(pid, 'SIGKILL');
      await waitFor(async () => !(await processAlive(pid, 'mariadbd')), 10_000, 100);
    }
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
      await c.query("GRANT ALL PRIVILEGES ON *.* TO ?@'%' WITH GRANT OPTION", [admin]);
      await c.query("REVOKE FILE, SUPER, SHUTDOWN ON *.* FROM ?@'%'", [admin]);
    });
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
      await c.query(`CREATE DATABASE ${mysql.escapeId(spec.name)}${options}`);
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
      await c.query(`DROP DATABASE ${mysql.escapeId(name)}`);
    });
  }

  private async accounts(c: mysql.Connection, user?: DbUserRef): Promise<Array<{ user: string; host: string }>> {
    const where = ["is_role = 'N'", 'User not in (?)'];
    const params: unknown[] = [INTERNAL_USERS];
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
    return this.withConnection(inst, async (c) => (await this.accounts(c)).map((a) => this.toUser(inst, a)));
  }

  async createUser(inst: Instance, username: string, password: string): Promise<DbUser> {
    const hash = mysqlNativePasswordHash(password);
    return this.withConnection(inst, async (c) => {
      if ((await this.accounts(c, { username, host: '%' })).length)
        throw new BackendRefusedError(BACKEND, `user "${username}@%" already exists`, 'already_exists');
      await c.query("CREATE USER ?@'%' IDENTIFIED BY PASSWORD ?", [username, hash]);
      return this.toUser(inst, { user: username, host: '%' });
    });
  }

  async deleteUser(inst: Instance, user: DbUserRef): Promise<void> {
    await this.withConnection(inst, async (c) => {
      const accounts = await this.accounts(c, user);
      if (!accounts.length) throw new BackendGoneError(BACKEND, `user ${user.host === undefined ? user.username : `${user.username}@${user.host}`}`);
      if (accounts.some((a) => this.toUser(inst, a).isAdmin)) throw new BackendRefusedError(BACKEND, 'the admin user cannot be deleted', 'conflict');
      for (const a of accounts) await c.query('DROP USER ?@?', [a.user, a.host]);
      // DROP USER leaves open sessions alone: end the ones that came in through a dropped account
      // (the account's host is a LIKE pattern over the client address).
      const [sessions] = await c.query<mysql.RowDataPacket[]>(
        "select id, substring_index(host, ':', 1) as client from information_schema.processlist where user = ? and id <> connection_id()",
        [user.username],
      );
      const remaining = await this.accounts(c, { username: user.username });
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
      const accounts = await this.accounts(c, user);
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
    const databases = (await this.listDatabases(inst)).map((d) => d.name);
    const account = await this.account();
    // Users as CREATE USER IF NOT EXISTS (--insert-ignore), so the dump replays into a fresh server.
    const args = [
      `--socket=${this.socket(inst)}`,
      `--user=${runningAsRoot() ? account.name : currentAccount().name}`,
      '--single-transaction',
      '--routines',
      '--events',
      '--triggers',
      '--insert-ignore',
      '--system=users',
    ];
    if (databases.length) args.push('--databases', ...databases);
    return { command: await findBinary('mariadb-dump', 'mysqldump'), args };
  }
}
