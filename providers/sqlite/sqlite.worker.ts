import { closeSync, existsSync, mkdirSync, openSync, rmSync } from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { NamespaceMissingError, ScriptParamsError, SqlError, SqlNameError, SqlReadOnlyError, checkSqlNamespace, checkSqlTenant } from '../sqldb.provider';
import { NamespaceConnection, type BindParams, type RawOutcome } from './sqlite.connection';
import type { WorkerFailure, WorkerMessage, WorkerRequest, WorkerSettings, WorkerValue } from './sqlite.protocol';

/**
 * A worker process of the SQLite engine (started by providers/sqlite/sqlite.engine.ts with
 * `fork`): it owns the open databases of the tenants hashed to it and answers one request at a
 * time. node:sqlite is synchronous and cannot be interrupted (no sqlite3_interrupt nor progress
 * handler in Node 24, and Worker.terminate() does not stop a thread inside SQLite), so the engine's
 * time limit kills this process; WAL mode keeps the files consistent when that happens mid-write.
 */

const settings = JSON.parse(process.argv[2]) as WorkerSettings;

/** Open databases by `tenant/ns`, least recently used first (a Map keeps insertion order). */
const open = new Map<string, NamespaceConnection>();

const tenantDir = (tenant: string) => path.join(settings.root, tenant);
const databaseFile = (tenant: string, ns: string) => path.join(tenantDir(tenant), `${ns}.db`);
/** Every file of a namespace: the database, its WAL and shared-memory index, a rollback journal should one be left. */
const namespaceFiles = (tenant: string, ns: string) => ['', '-wal', '-shm', '-journal'].map((suffix) => databaseFile(tenant, ns) + suffix);

function checkNames(tenant: string, ns?: string): void {
  checkSqlTenant(tenant);
  if (ns !== undefined) checkSqlNamespace(ns);
}

/** The namespace's connection, opened when not kept; NamespaceMissingError when the file is not there (it is never created here). */
function connection(tenant: string, ns: string, created = false): NamespaceConnection {
  const key = `${tenant}/${ns}`;
  const kept = open.get(key);
  if (kept) {
    open.delete(key);
    open.set(key, kept);
    return kept;
  }
  const file = databaseFile(tenant, ns);
  if (!existsSync(file)) throw new NamespaceMissingError(ns);
  const made = NamespaceConnection.open(file, created);
  open.set(key, made);
  for (const [oldest, conn] of open) {
    if (open.size <= settings.maxOpen) break;
    conn.close();
    open.delete(oldest);
  }
  return made;
}

function forget(key: string): void {
  open.get(key)?.close();
  open.delete(key);
}

function createNamespace(tenant: string, ns: string): boolean {
  mkdirSync(tenantDir(tenant), { recursive: true, mode: 0o700 });
  const file = databaseFile(tenant, ns);
  try {
    // Exclusive creation: an existing namespace is left as it is.
    closeSync(openSync(file, 'wx', 0o600));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw err;
  }
  try {
    connection(tenant, ns, true);
  } catch (err) {
    rmSync(file, { force: true });
    throw err;
  }
  return true;
}

function dropNamespace(tenant: string, ns: string): boolean {
  forget(`${tenant}/${ns}`);
  const existed = existsSync(databaseFile(tenant, ns));
  for (const file of namespaceFiles(tenant, ns)) rmSync(file, { force: true });
  return existed;
}

function dropTenant(tenant: string): null {
  for (const key of [...open.keys()]) if (key.startsWith(`${tenant}/`)) forget(key);
  rmSync(tenantDir(tenant), { recursive: true, force: true });
  return null;
}

function query(tenant: string, ns: string, sql: string, params: BindParams | undefined, readOnly: boolean): RawOutcome {
  return connection(tenant, ns).query(sql, params, settings.caps, readOnly);
}

function closeAll(): null {
  for (const key of [...open.keys()]) forget(key);
  return null;
}

function handle(request: WorkerRequest): WorkerValue {
  switch (request.op) {
    case 'create':
      checkNames(request.tenant, request.ns);
      return createNamespace(request.tenant, request.ns);
    case 'drop':
      checkNames(request.tenant, request.ns);
      return dropNamespace(request.tenant, request.ns);
    case 'query':
      checkNames(request.tenant, request.ns);
      return query(request.tenant, request.ns, request.sql, request.params, request.readOnly);
    case 'dropTenant':
      checkNames(request.tenant);
      return dropTenant(request.tenant);
    case 'close':
      return closeAll();
  }
}

function failure(err: unknown): WorkerFailure {
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof SqlReadOnlyError) return { kind: 'read_only', message };
  if (err instanceof SqlError) return { kind: 'sql', message };
  if (err instanceof NamespaceMissingError) return { kind: 'missing', message: err.namespace };
  if (err instanceof ScriptParamsError) return { kind: 'script_params', message };
  if (err instanceof SqlNameError) return { kind: 'name', message };
  return { kind: 'internal', message };
}

function reply(message: WorkerMessage, then?: () => void): void {
  process.send!(message, undefined, undefined, then);
}

/**
 * Exits when the engine's process is gone, also while a query runs: a thread polls the parent's
 * pid, as the main thread may be inside SQLite. A killed engine would otherwise leave a worker
 * spinning on a runaway query.
 */
function exitWithParent(): void {
  const watch = `const { workerData } = require('node:worker_threads');
setInterval(() => { if (process.ppid !== workerData) process.kill(process.pid, 'SIGKILL'); }, 1000);`;
  new Worker(watch, { eval: true, workerData: process.ppid, execArgv: [] }).unref();
}

process.on('message', (request: WorkerRequest & { id: number }) => {
  let message: WorkerMessage;
  try {
    message = { id: request.id, ok: true, value: handle(request) };
  } catch (err) {
    message = { id: request.id, ok: false, error: failure(err) };
  }
  reply(message, request.op === 'close' ? () => process.exit(0) : undefined);
});
process.on('disconnect', () => {
  closeAll();
  process.exit(0);
});
exitWithParent();
reply({ ready: true });
