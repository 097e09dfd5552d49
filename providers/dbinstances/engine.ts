/**
 * What the instance manager (dbinstances.adapter.ts) needs from one database engine, and the
 * on-disk layout every instance shares:
 *
 *   <root>/ca/                       the install's CA (tls.ts), root only
 *   <root>/instances/<name>/         root, group of the instance's account, 0710: only root and that
 *                                    account get in, and only root adds, renames or removes entries
 *     instance.json                  what the manager knows: engine, account, address, port, admin name, desired state
 *     data/                          the engine's data directory      \
 *     run/                           its private socket and pidfile    |  each 0700, owned by
 *     tls/                           server key and certificate        |  the instance's account
 *     log/                           the engine's log                  |
 *     backups/<id>.sql|.json         dumps and their metadata         /
 *
 * An instance made before instances had accounts of their own has no `account` or `address` in
 * its record: it keeps running as the engine's shared account on 127.0.0.1, its directory as it was.
 */
import path from 'node:path';
import type { DbDatabase, DbEngine, DbLogEntry, DbLogLevel, DbStats, DbUser, DbUserRef, NewDbDatabase } from '../dbaas.provider';
import { BackendUnavailableError } from '../errors';
import { isolatedAccounts, lookupAccount, processAccount } from '../os-accounts';
import { serverAccount, type Account } from './system';

export interface InstanceRecord {
  name: string;
  engine: DbEngine;
  serviceId: number;
  port: number;
  adminUsername: string;
  /**
   * The OS account the server, its tools and its dumps run as (`cdb-<name>-<hash>`), made with the
   * instance and removed with it. Absent: an instance from before, run by the engine's shared account.
   */
  account?: string;
  /** The loopback address it listens on, the only one its certificate names. Absent: 127.0.0.1 (an instance from before). */
  address?: string;
  /** ISO 8601. */
  createdAt: string;
  /** What the instance should be doing; `resumeInstances` starts the ones meant to run. */
  desired: 'running' | 'stopped';
}

export interface InstancePaths {
  dir: string;
  record: string;
  lock: string;
  data: string;
  run: string;
  tls: string;
  log: string;
  backups: string;
}

export function instancePaths(root: string, name: string): InstancePaths {
  const dir = path.join(root, 'instances', name);
  return {
    dir,
    record: path.join(dir, 'instance.json'),
    lock: path.join(root, 'instances', `.${name}.lock`),
    data: path.join(dir, 'data'),
    run: path.join(dir, 'run'),
    tls: path.join(dir, 'tls'),
    log: path.join(dir, 'log'),
    backups: path.join(dir, 'backups'),
  };
}

export interface Instance {
  rec: InstanceRecord;
  paths: InstancePaths;
}

export interface ServerVitals {
  version: string;
  uptimeSeconds: number;
}

/** A dump command that writes the whole instance (databases and users) to standard output. */
export interface DumpCommand {
  command: string;
  args: string[];
}

export interface EngineDriver {
  readonly engine: DbEngine;
  /** The database a client lands in (connection info), or null when the engine needs none. */
  readonly defaultDatabase: string | null;
  /** The account this instance's server (and its tools and dumps) run as. */
  account(inst: Instance): Promise<Account>;
  /** Creates the data directory and configuration of a new instance; does not start it. */
  initialize(inst: Instance, tls: { certFile: string; keyFile: string }): Promise<void>;
  /** Whether the server process of the pidfile is alive (it may still be starting). */
  isRunning(inst: Instance): Promise<boolean>;
  /** Starts the server detached from this process; resolves once it accepts connections. */
  start(inst: Instance): Promise<void>;
  /** Stops the server, ending every connection; resolves once the process is gone. */
  stop(inst: Instance): Promise<void>;
  /** Stops and starts the server. */
  restart(inst: Instance): Promise<void>;
  /** Creates the admin user, or resets its password and privileges when it exists. */
  ensureAdmin(inst: Instance, password: string): Promise<void>;
  vitals(inst: Instance): Promise<ServerVitals>;
  listDatabases(inst: Instance): Promise<DbDatabase[]>;
  createDatabase(inst: Instance, spec: NewDbDatabase): Promise<DbDatabase>;
  deleteDatabase(inst: Instance, name: string): Promise<void>;
  listUsers(inst: Instance): Promise<DbUser[]>;
  createUser(inst: Instance, username: string, password: string): Promise<DbUser>;
  deleteUser(inst: Instance, user: DbUserRef): Promise<void>;
  setPassword(inst: Instance, user: DbUserRef, password: string): Promise<void>;
  stats(inst: Instance): Promise<DbStats>;
  /** The engine's log file. */
  logFile(inst: Instance): string;
  /**
   * Parses log lines into entries: a line that does not open an entry continues the previous one.
   * Lines before the first entry are dropped.
   */
  parseLog(lines: string[]): DbLogEntry[];
  dumpCommand(inst: Instance): Promise<DumpCommand>;
  /**
   * Files of the data directory that belong to the host it is on (its addresses, ports, certificate
   * paths, who may log in over its socket): a move copies every other file and keeps these.
   */
  readonly hostFilesOfData: readonly string[];
}

/** Where clients reach an instance (and the one address its certificate names). */
export const instanceAddress = (rec: InstanceRecord): string => rec.address ?? LEGACY_ADDRESS;
/** The address every instance shared before each had its own. */
export const LEGACY_ADDRESS = '127.0.0.1';

/**
 * A customer's instance that does not answer: `503 backend_unavailable` naming that instance (never
 * the control plane's own database, whose failures look alike: db/errors.ts). `why` is for the logs.
 */
export function instanceUnavailable(backend: string, instance: string, why: string): BackendUnavailableError {
  return new BackendUnavailableError(backend, `instance ${instance}: ${why}`, `database instance ${instance}`);
}

/**
 * The account an instance's server runs as: its own, named in its record; for an instance from
 * before, the engine's shared system account (`shared`). Without root, this process's account.
 */
export async function instanceAccount(inst: Instance, shared: string): Promise<Account> {
  if (!inst.rec.account) return serverAccount(shared);
  if (!isolatedAccounts()) return processAccount();
  const account = await lookupAccount(inst.rec.account);
  // Not recreated here: a new account would have another uid than the files it should own.
  if (!account) throw new BackendUnavailableError('dbaas', `instance ${inst.rec.name}: its system account ${inst.rec.account} is missing`);
  return account;
}

/** Groups log lines into entries with `opens(line)` returning the entry a line starts, or null. */
export function groupLogLines(
  lines: string[],
  opens: (line: string) => DbLogEntry | null,
  continuation: (entry: DbLogEntry, line: string) => void,
): DbLogEntry[] {
  const entries: DbLogEntry[] = [];
  for (const line of lines) {
    const entry = opens(line);
    if (entry) entries.push(entry);
    else if (entries.length > 0) continuation(entries[entries.length - 1], line);
  }
  return entries;
}

export const LOG_LEVELS: readonly DbLogLevel[] = ['debug', 'info', 'notice', 'warning', 'error', 'fatal'];

/** Numbers from SQL drivers arrive as strings (bigint) or numbers; null stays null. */
export function num(value: unknown): number | null {
  if (value === null || value === undefined || value === '') return null;
  const n = Number(value);
  return Number.isFinite(n) ? n : null;
}
