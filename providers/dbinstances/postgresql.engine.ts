/**
 * PostgreSQL instances: the installed major version's binaries (initdb, pg_ctl, pg_dumpall), one
 * cluster per instance, run by the instance's own system account (engine.ts; `postgres` for an
 * instance from before accounts per instance), never root (PostgreSQL refuses it).
 *
 * Access: clients over TCP on the loopback port with TLS only (`hostssl`, SCRAM); the control
 * plane as the bootstrap superuser `postgres` over the instance's private Unix socket (directory
 * 0700, peer authentication mapped from root and the instance's account), so it never needs, and
 * never holds, a customer password. The customer's admin is not a superuser and has no CREATEROLE
 * (on PostgreSQL 15 it could grant itself pg_execute_server_program and run programs as the
 * server's account, next to other instances): it creates databases, monitors and ends sessions,
 * and is granted every user created through the API, whose objects it can therefore manage.
 *
 * The API refuses the server's own names (`postgres`, `pg_*`); this file refuses the server's own
 * roles again by what they are (SERVER_ROLE: superuser, replication, BYPASSRLS, bootstrap or
 * predefined), checked on the row it changes, locked in the same transaction. Such roles are never
 * listed, renamed, dropped, given a password or made a database's owner.
 */
import { promises as fs, readdirSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
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
import { scramSha256Verifier } from './password-verifiers';
import { chownTree, currentAccount, ownedDirectory, processAlive, readPidFile, run, runningAsRoot, type Account } from './system';

const BACKEND = 'dbaas';
const SUPERUSER = 'postgres';
/** Databases that belong to the engine, not the customer. */
const SYSTEM_DATABASES = ['postgres', 'template0', 'template1'];
const CONNECT_TIMEOUT_MS = 5_000;
const START_TIMEOUT_S = 60;

/** The highest installed major version's bin directory (/usr/lib/postgresql/<n>/bin). */
export function installedPostgresBinDir(base = '/usr/lib/postgresql'): string {
  let versions: string[] = [];
  try {
    versions = readdirSync(base).filter((v) => /^\d+$/.test(v));
  } catch {
    // reported below
  }
  if (versions.length === 0) throw new Error(`no PostgreSQL under ${base} (scripts/install/dbaas.sh installs it)`);
  versions.sort((a, b) => Number(a) - Number(b));
  return path.join(base, versions[versions.length - 1], 'bin');
}

/**
 * SQL over `pg_authid r`: a role of the server, not of the customer. Superusers, and roles that
 * replicate or bypass row security, can read or change everything; oids below FirstNormalObjectId
 * (16384) are the bootstrap superuser and the predefined roles, which also own every `pg_*` name.
 */
const SERVER_ROLE = "(r.rolsuper or r.rolreplication or r.rolbypassrls or r.oid < 16384 or r.rolname ~ '^pg_')";

const ident = (name: string) => pg.escapeIdentifier(name);
const literal = (value: string) => pg.escapeLiteral(value);

/** Connection-level failures: the server is down, starting, stopping or out of slots. */
const UNAVAILABLE_CODES = new Set(['ENOENT', 'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', '57P01', '57P02', '57P03', '53300']);

export function mapError(err: unknown, instance: string): Error {
  if (err instanceof BackendGoneError || err instanceof BackendRefusedError || err instanceof BackendUnavailableError) return err;
  const e = err as { code?: string; message?: string };
  if (
    (e.code && UNAVAILABLE_CODES.has(e.code)) ||
    isConnectionFailure(err) ||
    /Connection terminated|timeout expired|connect ECONNREFUSED/i.test(e.message ?? '')
  )
    return instanceUnavailable(BACKEND, instance, e.code ?? 'connection failed');
  // Anything else is unexpected: keep the engine's words (no query text is in them) for the log.
  return new Error(`postgresql instance ${instance}: ${e.code ?? ''} ${e.message ?? String(err)}`.trim());
}

const LEVELS: Record<string, DbLogLevel> = {
  DEBUG1: 'debug',
  DEBUG2: 'debug',
  DEBUG3: 'debug',
  DEBUG4: 'debug',
  DEBUG5: 'debug',
  LOG: 'info',
  INFO: 'info',
  NOTICE: 'notice',
  WARNING: 'warning',
  ERROR: 'error',
  FATAL: 'fatal',
  PANIC: 'fatal',
};
// log_line_prefix = '%m [%p] ': `2026-11-23 10:00:00.123 UTC [4242] LOG:  message`
const LOG_LINE = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:\.\d+)?) UTC \[\d+\] ([A-Z0-9]+):\s+(.*)$/;
/** Lines that add to the entry before them (same prefix, their own tag). */
const DETAIL_TAGS = new Set(['DETAIL', 'HINT', 'CONTEXT', 'STATEMENT', 'QUERY', 'LOCATION']);

export class PostgresEngine implements EngineDriver {
  readonly engine = 'postgresql' as const;
  readonly defaultDatabase = 'postgres';
  // initialize() writes these with this host's address, port, socket, certificate and OS accounts.
  readonly hostFilesOfData = ['postgresql.conf', 'postgresql.auto.conf', 'pg_hba.conf', 'pg_ident.conf', 'postmaster.pid', 'postmaster.opts'];

  constructor(private readonly binDir: string = installedPostgresBinDir()) {}

  account(inst: Instance): Promise<Account> {
    return instanceAccount(inst, 'postgres');
  }

  private bin(tool: string): string {
    return path.join(this.binDir, tool);
  }

  private logPath(inst: Instance): string {
    return path.join(inst.paths.log, 'postgresql.log');
  }

  logFile(inst: Instance): string {
    return this.logPath(inst);
  }

  async initialize(inst: Instance, tls: { certFile: string; keyFile: string }): Promise<void> {
    const account = await this.account(inst);
    const { paths, rec } = inst;
    for (const dir of [paths.data, paths.run, paths.log, paths.backups]) await ownedDirectory(dir, account);
    await run(
      this.bin('initdb'),
      ['-D', paths.data, '-U', SUPERUSER, '-E', 'UTF8', '--locale=C.UTF-8', '--auth-local=peer', '--auth-host=scram-sha-256', '--no-instructions'],
      { as: account, env: { ...process.env, LC_ALL: 'C.UTF-8' } },
    );
    // Peer authentication maps the OS accounts that manage this instance (root, and its own
    // account for the dumps) to the superuser; no other instance's account gets in.
    const controllers = runningAsRoot() ? ['root', account.name] : [currentAccount().name];
    await fs.writeFile(path.join(paths.data, 'pg_ident.conf'), controllers.map((os) => `control ${os} ${SUPERUSER}\n`).join(''));
    await fs.writeFile(
      path.join(paths.data, 'pg_hba.conf'),
      [
        '# Managed by the control plane: the superuser over the private socket only; everyone else',
        '# over TCP with TLS and SCRAM (no plain-text connections at all).',
        `local all ${SUPERUSER} peer map=control`,
        // A client of 127.78.x.y normally connects from 127.0.0.1: any loopback source.
        'hostssl all all 127.0.0.0/8 scram-sha-256',
        'hostssl all all ::1/128 scram-sha-256',
        '',
      ].join('\n'),
    );
    const settings: Record<string, string> = {
      listen_addresses: literal(instanceAddress(rec)),
      port: String(rec.port),
      unix_socket_directories: literal(paths.run),
      unix_socket_permissions: '0700',
      max_connections: '50',
      shared_buffers: "'16MB'",
      ssl: 'on',
      ssl_cert_file: literal(tls.certFile),
      ssl_key_file: literal(tls.keyFile),
      ssl_min_protocol_version: "'TLSv1.2'",
      password_encryption: "'scram-sha-256'",
      log_destination: "'stderr'",
      logging_collector: 'off',
      log_line_prefix: "'%m [%p] '",
      log_timezone: "'UTC'",
      timezone: "'UTC'",
      // The control plane connects for every call; logging connections would drown the customer's entries.
      log_connections: 'off',
      // Statements are never copied into the log (it is readable through the API).
      log_min_error_statement: 'panic',
      log_statement: "'none'",
    };
    const conf = Object.entries(settings)
      .map(([k, v]) => `${k} = ${v}\n`)
      .join('');
    await fs.appendFile(path.join(paths.data, 'postgresql.conf'), `\n# Managed by the control plane\n${conf}`);
    await chownTree(paths.data, account);
  }

  async isRunning(inst: Instance): Promise<boolean> {
    const pid = await readPidFile(path.join(inst.paths.data, 'postmaster.pid'));
    return pid !== null && processAlive(pid, 'postgres');
  }

  async start(inst: Instance): Promise<void> {
    if (await this.isRunning(inst)) return;
    await run(this.bin('pg_ctl'), ['start', '-D', inst.paths.data, '-l', this.logPath(inst), '-w', '-t', String(START_TIMEOUT_S), '-s'], {
      as: await this.account(inst),
      detached: true,
      timeoutMs: (START_TIMEOUT_S + 10) * 1000,
    });
  }

  async stop(inst: Instance): Promise<void> {
    if (!(await this.isRunning(inst))) return;
    await run(this.bin('pg_ctl'), ['stop', '-D', inst.paths.data, '-m', 'fast', '-w', '-t', String(START_TIMEOUT_S), '-s'], {
      as: await this.account(inst),
      timeoutMs: (START_TIMEOUT_S + 10) * 1000,
    }).catch(async (err) => {
      if (await this.isRunning(inst)) throw err;
    });
  }

  async restart(inst: Instance): Promise<void> {
    if (!(await this.isRunning(inst))) return this.start(inst);
    // Fast mode: every session is ended (rolled back) before the server goes down.
    await run(this.bin('pg_ctl'), ['restart', '-D', inst.paths.data, '-l', this.logPath(inst), '-m', 'fast', '-w', '-t', String(START_TIMEOUT_S), '-s'], {
      as: await this.account(inst),
      detached: true,
      timeoutMs: (2 * START_TIMEOUT_S + 10) * 1000,
    });
  }

  /** A superuser session over the private socket. */
  private async withClient<T>(inst: Instance, fn: (client: pg.Client) => Promise<T>, database = 'postgres'): Promise<T> {
    const client = new pg.Client({
      host: inst.paths.run,
      port: inst.rec.port,
      user: SUPERUSER,
      database,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
      application_name: 'cloud-control-plane',
    });
    // A server going down while idle emits 'error' on the client; the call itself reports it.
    client.on('error', () => undefined);
    try {
      await client.connect();
      return await fn(client);
    } catch (err) {
      throw mapError(err, inst.rec.name);
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /** Runs `fn` in a transaction on `client`: committed when it resolves, rolled back when it throws. */
  private async inTransaction<T>(client: pg.Client, fn: () => Promise<T>): Promise<T> {
    await client.query('begin');
    try {
      const result = await fn();
      await client.query('commit');
      return result;
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    }
  }

  /**
   * The customer role `name` that can log in, or null when there is none. A role of the server
   * (SERVER_ROLE) is refused (400 with `param`) whatever its name. Inside a transaction the row is
   * locked until it ends, so the statement that follows acts on the role as checked.
   */
  private async customerLogin(client: pg.Client, name: string, param = 'username'): Promise<boolean> {
    const { rows } = await client.query(`select r.rolcanlogin as login, ${SERVER_ROLE} as server from pg_authid r where r.rolname = $1 for update`, [name]);
    if (rows.length === 0) return false;
    if (rows[0].server)
      throw new BackendRefusedError(BACKEND, `"${name}" is an account of the database server, not a user of this service`, 'protected', param);
    return rows[0].login === true;
  }

  async ensureAdmin(inst: Instance, password: string): Promise<void> {
    const admin = inst.rec.adminUsername;
    const verifier = literal(scramSha256Verifier(password));
    await this.withClient(inst, async (c) => {
      const { rowCount } = await c.query('select 1 from pg_roles where rolname = $1', [admin]);
      const attrs = 'LOGIN CREATEDB NOCREATEROLE NOSUPERUSER NOREPLICATION NOBYPASSRLS';
      if (rowCount) await c.query(`ALTER ROLE ${ident(admin)} ${attrs} PASSWORD ${verifier}`);
      else await c.query(`CREATE ROLE ${ident(admin)} ${attrs} PASSWORD ${verifier}`);
      await c.query(`GRANT pg_monitor, pg_signal_backend TO ${ident(admin)}`);
    });
  }

  async vitals(inst: Instance): Promise<ServerVitals> {
    return this.withClient(inst, async (c) => {
      const { rows } = await c.query(
        "select current_setting('server_version') as version, extract(epoch from now() - pg_postmaster_start_time())::float8 as uptime",
      );
      return { version: String(rows[0].version).split(' ')[0], uptimeSeconds: Math.floor(Number(rows[0].uptime)) };
    });
  }

  async listDatabases(inst: Instance): Promise<DbDatabase[]> {
    return this.withClient(inst, async (c) => {
      const { rows } = await c.query(
        `select d.datname as name, r.rolname as owner from pg_database d join pg_roles r on r.oid = d.datdba
         where not d.datistemplate and d.datname <> all($1) order by d.datname`,
        [SYSTEM_DATABASES],
      );
      return rows.map((r) => ({ name: r.name, owner: r.owner, charset: null, collation: null }));
    });
  }

  async createDatabase(inst: Instance, spec: NewDbDatabase): Promise<DbDatabase> {
    const owner = spec.owner ?? inst.rec.adminUsername;
    return this.withClient(inst, async (c) => {
      const exists = await c.query('select 1 from pg_database where datname = $1', [spec.name]);
      if (exists.rowCount) throw new BackendRefusedError(BACKEND, `database "${spec.name}" already exists`, 'already_exists');
      // CREATE DATABASE cannot run in a transaction: the owner is checked just before (only the
      // control plane, over its socket, can turn a role into a server role meanwhile).
      if (!(await this.customerLogin(c, owner, 'owner')))
        throw new BackendRefusedError(BACKEND, `user "${owner}" does not exist`, 'validation_failed', 'owner');
      try {
        await c.query(`CREATE DATABASE ${ident(spec.name)} OWNER ${ident(owner)}`);
      } catch (err) {
        if ((err as { code?: string }).code === '42P04') throw new BackendRefusedError(BACKEND, `database "${spec.name}" already exists`, 'already_exists');
        throw err;
      }
      return { name: spec.name, owner, charset: null, collation: null };
    });
  }

  async deleteDatabase(inst: Instance, name: string): Promise<void> {
    await this.withClient(inst, async (c) => {
      const exists = await c.query('select 1 from pg_database where datname = $1 and not datistemplate and datname <> all($2)', [name, SYSTEM_DATABASES]);
      if (!exists.rowCount) throw new BackendGoneError(BACKEND, `database ${name}`);
      // FORCE ends the sessions connected to it first.
      await c.query(`DROP DATABASE ${ident(name)} WITH (FORCE)`);
    });
  }

  async listUsers(inst: Instance): Promise<DbUser[]> {
    return this.withClient(inst, async (c) => {
      // The server's roles (the control plane's superuser among them) are not the customer's users.
      const { rows } = await c.query(`select r.rolname from pg_authid r where r.rolcanlogin and not ${SERVER_ROLE} order by r.rolname`);
      return rows.map((r) => ({ id: r.rolname, username: r.rolname, host: null, isAdmin: r.rolname === inst.rec.adminUsername }));
    });
  }

  async createUser(inst: Instance, username: string, password: string): Promise<DbUser> {
    const verifier = literal(scramSha256Verifier(password));
    if (username.startsWith('pg_'))
      throw new BackendRefusedError(BACKEND, 'names starting with "pg_" are reserved by PostgreSQL', 'validation_failed', 'username');
    return this.withClient(inst, async (c) => {
      const exists = await c.query('select 1 from pg_roles where rolname = $1', [username]);
      if (exists.rowCount) throw new BackendRefusedError(BACKEND, `user "${username}" already exists`, 'already_exists');
      await c.query(`CREATE ROLE ${ident(username)} LOGIN PASSWORD ${verifier}`);
      // The admin can act as every user it manages (own their objects, grant on them).
      await c.query(`GRANT ${ident(username)} TO ${ident(inst.rec.adminUsername)}`);
      return { id: username, username, host: null, isAdmin: false };
    });
  }

  async deleteUser(inst: Instance, user: DbUserRef): Promise<void> {
    const { username } = user;
    if (username === inst.rec.adminUsername) throw new BackendRefusedError(BACKEND, 'the admin user cannot be deleted', 'conflict');
    const admin = inst.rec.adminUsername;
    const databases = await this.withClient(inst, async (c) => {
      if (user.host !== undefined) throw new BackendGoneError(BACKEND, `user ${username}`);
      await this.inTransaction(c, async () => {
        if (!(await this.customerLogin(c, username))) throw new BackendGoneError(BACKEND, `user ${username}`);
        // No new sessions...
        await c.query(`ALTER ROLE ${ident(username)} NOLOGIN`);
      });
      // ... then end the open ones (waiting up to 5 s for each to go).
      await c.query('select pg_terminate_backend(pid, 5000) from pg_stat_activity where usename = $1', [username]);
      const { rows } = await c.query('select datname from pg_database where datallowconn and not datistemplate order by datname');
      return rows.map((r) => r.datname as string);
    });
    // Its objects pass to the admin in every database; nothing it owned is dropped.
    for (const database of databases) {
      await this.withClient(
        inst,
        async (c) => {
          await c.query(`REASSIGN OWNED BY ${ident(username)} TO ${ident(admin)}`);
          await c.query(`DROP OWNED BY ${ident(username)}`);
        },
        database,
      );
    }
    await this.withClient(inst, (c) =>
      this.inTransaction(c, async () => {
        // Checked again on the row it drops (it no longer logs in).
        await this.customerLogin(c, username);
        await c.query(`DROP ROLE ${ident(username)}`);
      }),
    );
  }

  async setPassword(inst: Instance, user: DbUserRef, password: string): Promise<void> {
    const verifier = literal(scramSha256Verifier(password));
    await this.withClient(inst, (c) =>
      this.inTransaction(c, async () => {
        if (user.host !== undefined || !(await this.customerLogin(c, user.username))) throw new BackendGoneError(BACKEND, `user ${user.username}`);
        await c.query(`ALTER ROLE ${ident(user.username)} PASSWORD ${verifier}`);
      }),
    );
  }

  async stats(inst: Instance): Promise<DbStats> {
    return this.withClient(inst, async (c) => {
      const { rows } = await c.query(
        `select
           extract(epoch from now() - pg_postmaster_start_time())::float8 as uptime,
           (select count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()) as current,
           (select count(*) from pg_stat_activity where backend_type = 'client backend' and state = 'active' and pid <> pg_backend_pid()) as active,
           current_setting('max_connections')::int as max,
           (select count(*) from pg_database where not datistemplate and datname <> all($1)) as databases,
           (select coalesce(sum(pg_database_size(datname)), 0) from pg_database where not datistemplate and datname <> all($1)) as size,
           sum(xact_commit) as committed, sum(xact_rollback) as rolled_back,
           sum(tup_returned) as returned, sum(tup_inserted) as inserted, sum(tup_updated) as updated, sum(tup_deleted) as deleted,
           sum(blks_hit) as hit, sum(blks_read) as read, sum(deadlocks) as deadlocks
         from pg_stat_database`,
        [SYSTEM_DATABASES],
      );
      const r = rows[0];
      const hit = num(r.hit) ?? 0;
      const read = num(r.read) ?? 0;
      return {
        uptimeSeconds: Math.floor(Number(r.uptime)),
        connections: { current: Number(r.current), active: Number(r.active), max: Number(r.max) },
        databases: Number(r.databases),
        sizeBytes: Number(r.size),
        transactions: { committed: num(r.committed), rolledBack: num(r.rolled_back) },
        queries: null,
        rows: { returned: num(r.returned), inserted: num(r.inserted), updated: num(r.updated), deleted: num(r.deleted) },
        cacheHitRatio: hit + read > 0 ? hit / (hit + read) : null,
        deadlocks: num(r.deadlocks),
        bytes: { received: null, sent: null },
      };
    });
  }

  parseLog(lines: string[]): DbLogEntry[] {
    return groupLogLines(
      lines,
      (line) => {
        const m = LOG_LINE.exec(line);
        if (!m || DETAIL_TAGS.has(m[3])) return null;
        return { timestamp: new Date(`${m[1]}T${m[2]}Z`).toISOString(), level: LEVELS[m[3]] ?? 'info', message: m[4] };
      },
      (entry, line) => {
        const m = LOG_LINE.exec(line);
        entry.message += m ? `\n${m[3]}: ${m[4]}` : `\n${line.replace(/^\t/, '')}`;
      },
    );
  }

  async dumpCommand(inst: Instance): Promise<DumpCommand> {
    // Roles and every database, as SQL that psql replays into an empty cluster. pg_dumpall reads
    // the database names itself: no name from the engine or the customer is ever an argument.
    return { command: this.bin('pg_dumpall'), args: ['-h', inst.paths.run, '-p', String(inst.rec.port), '-U', SUPERUSER, '--no-password'] };
  }
}
