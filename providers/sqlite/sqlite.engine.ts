import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { BackendUnavailableError } from '../errors';
import {
  NamespaceMissingError,
  ScriptParamsError,
  SqlError,
  SqlNameError,
  SqlParamsError,
  SqlReadOnlyError,
  checkSqlNamespace,
  checkSqlTenant,
  type QueryOptions,
  type QueryOutcome,
  type SqlDbEngine,
  type SqlResult,
} from '../sqldb.provider';
import type { BindParams, BindValue, RawOutcome, RawResult } from './sqlite.connection';
import type { WorkerFailure, WorkerMessage, WorkerRequest, WorkerSettings, WorkerValue } from './sqlite.protocol';

/**
 * The db primitive on SQLite files (DECISIONS "Serverless": db; research
 * docs/research/serverless-backends.md §2): `<root>/<tenant>/<ns>.db`, folders 0700, files 0600,
 * opened with node:sqlite under an authorizer, defensive mode, no extensions and tight limits
 * (providers/sqlite/sqlite.guard.ts, sqlite.connection.ts).
 *
 * node:sqlite is synchronous and a statement cannot be interrupted from JavaScript, so queries run
 * in a small pool of worker processes (sqlite.worker.ts), each tenant always in the same one (a hash
 * of its handle): a namespace has one connection, and a slow query holds up only the tenants of its
 * worker. Worker threads would not do: Worker.terminate() waits for the thread to come back from
 * SQLite, which a runaway query never does (measured: the thread kept spinning and the process could
 * not exit). A query that runs longer than `queryTimeoutMs` has its worker killed (the open
 * transaction rolls back: WAL), answers SqlError, and a fresh worker takes the requests queued behind it.
 *
 * Each worker handles one request at a time, and the engine sends it the next only when it has
 * answered, so the time limit counts a query's own time, never the wait behind another.
 */
export interface SqliteEngineOptions {
  /** The folder of the tenants' folders (made 0700 when missing). */
  rootDir: string;
  /** Worker processes (default 2). */
  workers?: number;
  /** A query's time limit (default 5000 ms). */
  queryTimeoutMs?: number;
  /** Open databases each worker keeps (default 64); the least recently used is closed first. */
  maxOpenPerWorker?: number;
  /** Rows one answer may hold (default 10 000). */
  maxResultRows?: number;
  /** Estimated JSON bytes one answer may hold (default 8 MiB). */
  maxResultBytes?: number;
  /** Bytes of SQL text one query may send, script included (default 1 MiB; each statement is also capped at 100 kB by SQLite). */
  maxSqlBytes?: number;
}

/** Params one query may bind (also SQLite's variable limit on the connection, sqlite.connection.ts). */
export const SQL_MAX_PARAMS = 100;
/** How long a worker may take to start, and to answer anything but a query (creating, dropping). */
const WORKER_START_MS = 30_000;
const MANAGEMENT_MS = 30_000;
const CLOSE_MS = 5_000;

export class SqliteEngine implements SqlDbEngine {
  private readonly slots: WorkerSlot[];
  private readonly queryTimeoutMs: number;
  private readonly maxSqlBytes: number;
  private closed = false;

  constructor(private readonly options: SqliteEngineOptions) {
    this.queryTimeoutMs = options.queryTimeoutMs ?? 5000;
    this.maxSqlBytes = options.maxSqlBytes ?? 1024 * 1024;
    mkdirSync(options.rootDir, { recursive: true, mode: 0o700 });
    const settings: WorkerSettings = {
      root: path.resolve(options.rootDir),
      maxOpen: options.maxOpenPerWorker ?? 64,
      caps: { maxRows: options.maxResultRows ?? 10_000, maxBytes: options.maxResultBytes ?? 8 * 1024 * 1024 },
    };
    this.slots = Array.from({ length: options.workers ?? 2 }, () => new WorkerSlot(settings));
  }

  async createNamespace(tenant: string, ns: string): Promise<boolean> {
    checkSqlTenant(tenant);
    checkSqlNamespace(ns);
    return (await this.send(tenant, { op: 'create', tenant, ns })) as boolean;
  }

  async dropNamespace(tenant: string, ns: string): Promise<boolean> {
    checkSqlTenant(tenant);
    checkSqlNamespace(ns);
    return (await this.send(tenant, { op: 'drop', tenant, ns })) as boolean;
  }

  async query(tenant: string, ns: string, sql: string, params?: unknown[] | Record<string, unknown>, options: QueryOptions = {}): Promise<QueryOutcome> {
    checkSqlTenant(tenant);
    checkSqlNamespace(ns);
    checkSql(sql, this.maxSqlBytes);
    const bound = bindParams(params);
    const timeout = { ms: this.queryTimeoutMs, error: () => new SqlError(`the query ran longer than ${this.queryTimeoutMs} ms and was stopped`) };
    const raw = (await this.send(
      tenant,
      { op: 'query', tenant, ns, sql, readOnly: options.readOnly === true, ...(bound ? { params: bound } : {}) },
      timeout,
    )) as RawOutcome;
    return { results: raw.results.map(toResult), rowsRead: raw.rowsRead, rowsWritten: raw.rowsWritten };
  }

  /** The sizes of the tenant's `<ns>.db` and `<ns>.db-wal` files (the `-shm` index is not data). */
  async storedBytes(tenant: string): Promise<number> {
    checkSqlTenant(tenant);
    const dir = path.join(this.options.rootDir, tenant);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 0;
      throw err;
    }
    const files = names.filter((name) => name.endsWith('.db') || name.endsWith('.db-wal'));
    const sizes = await Promise.all(
      files.map((name) =>
        stat(path.join(dir, name)).then(
          (s) => s.size,
          () => 0,
        ),
      ),
    );
    return sizes.reduce((sum, size) => sum + size, 0);
  }

  async dropTenant(tenant: string): Promise<void> {
    checkSqlTenant(tenant);
    await this.send(tenant, { op: 'dropTenant', tenant });
  }

  /** Lets queued work finish, closes every database and ends the workers. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all(this.slots.map((slot) => slot.close()));
  }

  private send(tenant: string, request: WorkerRequest, timeout?: Timeout): Promise<WorkerValue> {
    if (this.closed) return Promise.reject(new BackendUnavailableError('db', 'the SQLite engine is closed'));
    return this.slots[workerIndexOf(tenant, this.slots.length)].call(request, timeout ?? managementTimeout());
  }
}

/** The worker a tenant's databases live in: FNV-1a of the handle, so the same one for the engine's lifetime. */
export function workerIndexOf(tenant: string, workers: number): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < tenant.length; i++) hash = Math.imul(hash ^ tenant.charCodeAt(i), 0x01000193) >>> 0;
  return hash % workers;
}

function checkSql(sql: string, maxBytes: number): void {
  if (typeof sql !== 'string') throw new SqlError('the SQL must be a string');
  if (Buffer.byteLength(sql) > maxBytes) throw new SqlError(`the SQL is longer than ${maxBytes} bytes`);
  // SQLite would stop reading at a NUL, and the rest would be neither run nor refused.
  if (sql.includes('\0')) throw new SqlError('the SQL contains a NUL character');
}

/**
 * Params as the workers bind them: null, strings, finite numbers (safe integers as bigint so they
 * bind as INTEGER, other numbers as REAL), booleans as 1 / 0. Objects, arrays and non-finite numbers
 * are refused. An empty array or object, like none, is no params.
 */
export function bindParams(params: unknown): BindParams | undefined {
  if (params === undefined || params === null) return undefined;
  if (Array.isArray(params)) {
    checkCount(params.length);
    return params.length === 0 ? undefined : params.map((value, i) => bindValue(value, `params.${i}`));
  }
  if (typeof params === 'object' && [Object.prototype, null].includes(Object.getPrototypeOf(params))) {
    const entries = Object.entries(params);
    checkCount(entries.length);
    return entries.length === 0 ? undefined : Object.fromEntries(entries.map(([name, value]) => [name, bindValue(value, `params.${name}`)]));
  }
  throw new SqlParamsError('params is an array (positional ? parameters) or an object (named :name parameters)');
}

function checkCount(count: number): void {
  if (count > SQL_MAX_PARAMS) throw new SqlParamsError(`a query binds at most ${SQL_MAX_PARAMS} params`);
}

function bindValue(value: unknown, param: string): BindValue {
  if (value === null || typeof value === 'string') return value;
  if (typeof value === 'boolean') return value ? 1n : 0n;
  if (typeof value === 'number' && Number.isFinite(value)) return Number.isSafeInteger(value) ? BigInt(value) : value;
  throw new SqlParamsError(`${param} must be null, a finite number, a string or a boolean`, param);
}

function toResult(raw: RawResult): SqlResult {
  const rows = raw.rows.map((values) => Object.fromEntries(raw.columns.map((column, i) => [column, values[i]])));
  return { columns: raw.columns, rows, changes: raw.changes, last_insert_rowid: raw.lastInsertRowid };
}

function fromFailure(failure: WorkerFailure): Error {
  switch (failure.kind) {
    case 'sql':
      return new SqlError(failure.message);
    case 'read_only':
      return new SqlReadOnlyError(failure.message);
    case 'missing':
      return new NamespaceMissingError(failure.message);
    case 'script_params':
      return new ScriptParamsError();
    case 'name':
      return new SqlNameError(failure.message);
    case 'internal':
      return new BackendUnavailableError('db', failure.message);
  }
}

interface Timeout {
  ms: number;
  /** The error the caller gets when the worker had to be killed. */
  error: () => Error;
}

const managementTimeout = (): Timeout => ({
  ms: MANAGEMENT_MS,
  error: () => new BackendUnavailableError('db', `the SQLite worker did not answer within ${MANAGEMENT_MS} ms`),
});

interface Job {
  request: WorkerRequest;
  timeout: Timeout;
  resolve: (value: WorkerValue) => void;
  reject: (err: Error) => void;
  id?: number;
  timer?: NodeJS.Timeout;
}

/** The worker module next to this one, in the same language (`.ts` under tsx, `.js` once built). */
const WORKER_MODULE = path.join(__dirname, `sqlite.worker${path.extname(__filename)}`);
/** `--import` of tsx by URL, so the worker loads TypeScript whatever its working directory. */
const tsxLoader = () => pathToFileURL(createRequire(__filename).resolve('tsx')).href;

/** One worker process and the requests for its tenants, sent one at a time. */
class WorkerSlot {
  private child: ChildProcess | null = null;
  private ready = false;
  private startTimer: NodeJS.Timeout | null = null;
  private current: Job | null = null;
  private readonly queue: Job[] = [];
  private nextId = 1;
  private exited: Promise<void> = Promise.resolve();

  constructor(private readonly settings: WorkerSettings) {}

  call(request: WorkerRequest, timeout: Timeout): Promise<WorkerValue> {
    return new Promise((resolve, reject) => {
      this.queue.push({ request, timeout, resolve, reject });
      this.pump();
    });
  }

  /** Runs what is queued, then has the worker close its databases and exit (killed if it does not within 5 s). */
  async close(): Promise<void> {
    if (this.child === null && this.queue.length === 0) return;
    await this.call({ op: 'close' }, { ms: CLOSE_MS, error: () => new BackendUnavailableError('db', 'the SQLite worker did not close') }).catch(
      () => undefined,
    );
    const child = this.child;
    const exited = this.exited;
    if (child && child.exitCode === null && child.signalCode === null) {
      const kill = setTimeout(() => child.kill('SIGKILL'), CLOSE_MS);
      await exited;
      clearTimeout(kill);
    }
  }

  /** Sends the next request when the worker is idle, starting one when there is none. */
  private pump(): void {
    if (this.current !== null || this.queue.length === 0) return;
    if (this.child === null) return this.start();
    if (!this.ready) return;
    const job = this.queue.shift()!;
    job.id = this.nextId++;
    job.timer = setTimeout(() => this.overrun(job), job.timeout.ms);
    this.current = job;
    this.child.send({ ...job.request, id: job.id });
  }

  private start(): void {
    const child = fork(WORKER_MODULE, [JSON.stringify(this.settings)], {
      execArgv: ['--import', tsxLoader()],
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.child = child;
    this.ready = false;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    this.startTimer = setTimeout(
      () => this.discard(child, new BackendUnavailableError('db', `the SQLite worker did not start within ${WORKER_START_MS} ms`)),
      WORKER_START_MS,
    );
    child.on('message', (message: WorkerMessage) => this.onMessage(child, message));
    child.on('exit', (code, signal) => this.onExit(child, `the SQLite worker stopped (${signal ?? `exit code ${code}`})`));
    // A spawn failure is followed by 'exit', which answers the callers.
    child.on('error', () => undefined);
  }

  private onMessage(child: ChildProcess, message: WorkerMessage): void {
    if (child !== this.child) return;
    if ('ready' in message) {
      clearTimeout(this.startTimer!);
      this.ready = true;
      return this.pump();
    }
    const job = this.current;
    if (job === null || job.id !== message.id) return;
    clearTimeout(job.timer);
    this.current = null;
    if (message.ok) job.resolve(message.value);
    else job.reject(fromFailure(message.error));
    this.pump();
  }

  /** The request ran past its limit: the worker is killed, the caller told, and a fresh worker started (it takes the queue once ready). */
  private overrun(job: Job): void {
    if (this.current !== job || this.child === null) return;
    this.current = null;
    const child = this.child;
    this.child = null;
    child.kill('SIGKILL');
    job.reject(job.timeout.error());
    this.start();
  }

  /** The worker exited on its own (crash, out of memory, killed from outside). */
  private onExit(child: ChildProcess, why: string): void {
    if (child !== this.child) return;
    clearTimeout(this.startTimer!);
    const started = this.ready;
    this.child = null;
    this.ready = false;
    const err = new BackendUnavailableError('db', why);
    if (this.current) {
      clearTimeout(this.current.timer);
      this.current.reject(err);
      this.current = null;
    }
    // One that never started would not start either for the next request: fail those waiting rather than loop.
    if (!started) for (const job of this.queue.splice(0)) job.reject(err);
    this.pump();
  }

  /** Gives up on a worker that does not start: killed, and its waiting requests failed. */
  private discard(child: ChildProcess, err: Error): void {
    if (child !== this.child) return;
    this.child = null;
    child.kill('SIGKILL');
    for (const job of this.queue.splice(0)) job.reject(err);
  }
}
