/**
 * What the managed-database backend can do for the DBaaS family: every dbaas service is its own
 * database server instance (PostgreSQL, or MariaDB for the `mysql` engine) that this provider
 * creates, starts, restarts and destroys, and whose databases, users, logs, statistics and backups
 * it manages through the engine itself.
 *
 * Implementations: the real one runs each instance as a server process on this machine
 * (providers/dbinstances/), the simulator keeps its state in PostgreSQL
 * (providers/simulator/dbaas.simulator.ts). Both throw only the errors of providers/errors.ts:
 * BackendUnavailableError('dbaas') when the instance does not answer (stopped, crashed, starting),
 * BackendGoneError when the instance, database or user is not there, BackendRefusedError when the
 * engine says no (the message is written for customers).
 *
 * Passwords given to this interface go to the engine and nowhere else: no implementation logs
 * them, stores them in clear, or puts them on a command line.
 */
export type DbEngine = 'postgresql' | 'mysql';
export const DB_ENGINES: readonly DbEngine[] = ['postgresql', 'mysql'];

/** `running` is the only state of an instance that answers; one that does not answer throws. */
export type DbInstanceState = 'running';

export interface NewDbInstance {
  /**
   * The caller's name for the instance (`svc-12`), unique per backend. Creating an existing name
   * again returns that instance (started if it was stopped) with the admin password reset to the
   * one given: activities retry.
   */
  name: string;
  /** The service it is built for. */
  serviceId: number;
  engine: DbEngine;
  adminUsername: string;
  adminPassword: string;
}

export interface DbInstanceStatus {
  /** The instance's name (as given to createInstance). */
  id: string;
  engine: DbEngine;
  state: DbInstanceState;
  /** The server's version as it reports it (`15.14`, `10.11.19`). */
  version: string;
  host: string;
  port: number;
  uptimeSeconds: number;
}

/** How a client reaches the instance; never carries a password. */
export interface DbConnectionInfo {
  host: string;
  port: number;
  /** The database a client lands in by default (`postgres`); null on MySQL, which needs none. */
  database: string | null;
  /** The admin user. */
  username: string;
  /** `verify-full`: the server only accepts TLS, with a certificate for `host` signed by `caCertificate`. */
  tlsMode: 'verify-full';
  /** PEM of the certificate authority that signed the server's certificate. */
  caCertificate: string;
}

export interface DbDatabase {
  name: string;
  /** PostgreSQL only (null on MySQL). */
  owner: string | null;
  /** MySQL only (null on PostgreSQL). */
  charset: string | null;
  /** MySQL only (null on PostgreSQL). */
  collation: string | null;
}

export interface NewDbDatabase {
  name: string;
  /** PostgreSQL: the owning user (the admin when omitted). MySQL: a user (`name@%`) given every right on it. */
  owner?: string;
  /** MySQL: the default character set and collation (the server's when omitted). Ignored on PostgreSQL. */
  charset?: string;
  collation?: string;
}

export interface DbUser {
  /** `user@host` on MySQL, the name on PostgreSQL. */
  id: string;
  username: string;
  /** MySQL: the account's host part (`%` for users created here); null on PostgreSQL. */
  host: string | null;
  isAdmin: boolean;
}

/** A user addressed by name, or on MySQL by `user@host` (`host` absent means every host of that name). */
export interface DbUserRef {
  username: string;
  host?: string;
}

export type DbLogLevel = 'debug' | 'info' | 'notice' | 'warning' | 'error' | 'fatal';

export interface DbLogEntry {
  /** ISO 8601, UTC. */
  timestamp: string;
  level: DbLogLevel;
  message: string;
}

/** A snapshot read from the engine's own statistics views; a field an engine does not keep is null. */
export interface DbStats {
  uptimeSeconds: number;
  connections: { current: number; active: number | null; max: number };
  /** Customer databases (system ones excluded). */
  databases: number;
  /** Size on disk of the customer databases. */
  sizeBytes: number;
  transactions: { committed: number | null; rolledBack: number | null };
  /** Statements executed since the start (MySQL `Questions`); PostgreSQL keeps no such counter. */
  queries: number | null;
  rows: { returned: number | null; inserted: number | null; updated: number | null; deleted: number | null };
  /** Share of page reads served from memory, 0..1; null before any read. */
  cacheHitRatio: number | null;
  deadlocks: number | null;
  bytes: { received: number | null; sent: number | null };
}

export type DbBackupStatus = 'running' | 'completed' | 'failed';

export interface DbBackup {
  id: string;
  status: DbBackupStatus;
  /** Null while running or when failed. */
  sizeBytes: number | null;
  createdAt: Date;
}

export interface DbaasProvider {
  createInstance(spec: NewDbInstance): Promise<DbInstanceStatus>;
  /** Starts a stopped instance; a running one is left alone. */
  startInstance(id: string): Promise<void>;
  /** Stops the server (ending every connection); its data stays. */
  stopInstance(id: string): Promise<void>;
  /** Stops and starts the server: every existing connection ends. Resolves once it answers again. */
  restartInstance(id: string): Promise<void>;
  /** Stops the server and deletes its data and backups. Destroying a missing instance is not an error. */
  destroyInstance(id: string): Promise<void>;
  status(id: string): Promise<DbInstanceStatus>;
  connectionInfo(id: string): Promise<DbConnectionInfo>;

  listDatabases(id: string): Promise<DbDatabase[]>;
  createDatabase(id: string, spec: NewDbDatabase): Promise<DbDatabase>;
  /** Drops the database and everything in it (ending its connections first). */
  deleteDatabase(id: string, name: string): Promise<void>;

  /** Every login user, the admin included (engine-internal accounts excluded). */
  listUsers(id: string): Promise<DbUser[]>;
  createUser(id: string, spec: { username: string; password: string }): Promise<DbUser>;
  /** Removes the user and ends its sessions; objects it owned pass to the admin (no data is deleted). The admin cannot be deleted. */
  deleteUser(id: string, user: DbUserRef): Promise<void>;
  /** Sets a user's password (the admin's too); new logins need it at once. */
  setPassword(id: string, user: DbUserRef, password: string): Promise<void>;

  /** The last `lines` entries of the engine's log, oldest first. */
  logs(id: string, lines: number): Promise<DbLogEntry[]>;
  stats(id: string): Promise<DbStats>;

  /**
   * Starts a backup with the engine's dump tool and returns it (`running`). The same key returns
   * the same backup, so a retried activity does not dump twice.
   */
  startBackup(id: string, key: string): Promise<DbBackup>;
  /** Newest first. */
  listBackups(id: string): Promise<DbBackup[]>;

  /**
   * Starts every instance of this backend that should be running and is not (after a reboot or a
   * crash; one stopped on purpose stays stopped). Instances outlive the processes that manage them:
   * this is how a worker takes them back. Returns what it started and what did not start.
   */
  resumeInstances(): Promise<{ started: string[]; failed: Array<{ name: string; error: string }> }>;

  /** How often a running backup is worth polling. */
  readonly pollIntervalMs: number;

  /**
   * Moving an instance to another host (docs/hosts.md "Moving"), where the backend's instances live
   * on hosts (the simulator's do not, and has neither): `exportFiles` stops the instance and streams
   * its files into `sink`, `importFiles` puts them into an instance of the same name on the new host.
   */
  exportFiles?(id: string, sink: (chunk: Buffer) => Promise<void>): Promise<number>;
  importFiles?(id: string, archive: AsyncIterable<Buffer>): Promise<void>;
}
