import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite';
import { ScriptParamsError, SqlError, SqlReadOnlyError } from '../sqldb.provider';
import { SqlGuard } from './sqlite.guard';

/**
 * One tenant namespace's open database, inside a worker process (providers/sqlite/sqlite.worker.ts):
 * the connection settings, the authorizer, and how a query runs and is measured.
 *
 * Single statement or script: node:sqlite's `prepare()` compiles the first statement of the text and
 * ignores the rest, and `sourceSQL` (sqlite3_sql) is the text it consumed. When what follows holds
 * anything but whitespace, comments and empty statements, the query is a script. So SQLite's own
 * tokenizer finds the statement's end: semicolons in string literals, quoted names, comments and
 * CREATE TRIGGER bodies need no SQL parser of ours. A script then runs statement by statement the
 * same way (each compiled once the previous one ran, as a later statement may use a table an earlier
 * one made), inside BEGIN … COMMIT, with ROLLBACK when any fails (deferred: the namespace has this one
 * connection, and a read-only query may run a script of reads).
 */

/** A value as the engine binds it: checked and converted by the engine (booleans 1 / 0, safe integers as bigint so they bind as INTEGER). */
export type BindValue = null | string | number | bigint;
export type BindParams = BindValue[] | Record<string, BindValue>;

/** Rows as arrays of JSON values (the engine makes the objects); the IPC message is smaller so. */
export interface RawResult {
  columns: string[];
  rows: unknown[][];
  changes: number;
  lastInsertRowid: number | null;
}

export interface RawOutcome {
  results: RawResult[];
  rowsRead: number;
  rowsWritten: number;
}

export interface ResultCaps {
  /** Rows one answer may hold. */
  maxRows: number;
  /** Estimated JSON bytes one answer may hold. */
  maxBytes: number;
}

/** Limits of every connection (sqlite3_limit), bounding what one statement can allocate or bind. */
export const CONNECTION_LIMITS = {
  /** A string, BLOB or row: 2 MB, as D1. Also bounds what randomblob(), printf() or group_concat() can allocate. */
  length: 2_000_000,
  /** One statement's text: 100 kB, as D1 (a script's statements each). */
  sqlLength: 100_000,
  /** Parameters of one statement (`?100` at most), as D1. */
  variableNumber: 100,
  /** No database but the namespace's own: a second lock on ATTACH and VACUUM behind the authorizer. */
  attach: 0,
};

/** A freed page is given back to the file system at each commit, so stored bytes follow the data (there is no VACUUM). */
const NEW_DATABASE_PRAGMAS = 'PRAGMA auto_vacuum = FULL';
/**
 * WAL keeps the file consistent when a worker is killed mid-transaction (the engine's time limit);
 * NORMAL syncs at checkpoints only (a crash of the host may lose the last commits, never corrupt);
 * the WAL file is cut back to 4 MiB after a checkpoint, so a big transaction is not billed forever.
 */
const CONNECTION_PRAGMAS = 'PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = 4194304';

export class NamespaceConnection {
  private readonly guard = new SqlGuard();
  /** Connection-wide counters read around each query (sqlite3_total_changes, sqlite3_changes, sqlite3_last_insert_rowid). */
  private readonly countersStatement: StatementSync;
  /** The connection's `PRAGMA query_only`, set per query (QueryOptions.readOnly). */
  private queryOnly = false;

  private constructor(private readonly db: DatabaseSync) {
    db.enableDefensive(true);
    db.setAuthorizer(this.guard.authorize);
    this.countersStatement = this.guard.asEngine(() => db.prepare('SELECT total_changes(), changes(), last_insert_rowid()'));
    this.countersStatement.setReturnArrays(true);
    this.countersStatement.setReadBigInts(true);
  }

  /** Opens an existing database file; `created` when the engine just made it (empty), to set what only a new file can take. */
  static open(file: string, created: boolean): NamespaceConnection {
    const db = new DatabaseSync(file, { allowExtension: false, enableForeignKeyConstraints: true, timeout: 1000, limits: CONNECTION_LIMITS });
    try {
      if (created) db.exec(NEW_DATABASE_PRAGMAS);
      db.exec(CONNECTION_PRAGMAS);
      return new NamespaceConnection(db);
    } catch (err) {
      db.close();
      throw err;
    }
  }

  close(): void {
    if (this.db.isOpen) this.db.close();
  }

  /** Runs one statement (with params) or a script (without). Throws SqlError (SqlReadOnlyError) or ScriptParamsError. */
  query(sql: string, params: BindParams | undefined, caps: ResultCaps, readOnly = false): RawOutcome {
    this.setQueryOnly(readOnly);
    const first = this.compile(sql);
    const rest = sql.slice(first.sourceSQL.length);
    if (onlyTrivia(rest)) return this.single(first, params, caps);
    if (params !== undefined) throw new ScriptParamsError();
    return this.script(first, rest);
  }

  private setQueryOnly(on: boolean): void {
    if (on === this.queryOnly) return;
    this.guard.asEngine(() => this.db.exec(`PRAGMA query_only = ${on ? 1 : 0}`));
    this.queryOnly = on;
  }

  private compile(sql: string): StatementSync {
    try {
      const statement = this.guard.compile(() => this.db.prepare(sql));
      statement.setReadBigInts(true);
      return statement;
    } catch (err) {
      throw this.sqlError(err);
    }
  }

  private single(statement: StatementSync, params: BindParams | undefined, caps: ResultCaps): RawOutcome {
    const insertsRow = this.guard.insertsRow;
    const before = this.counters();
    const columns = statement.columns().map((column) => column.name);
    let rows: unknown[][] = [];
    try {
      if (columns.length > 0) rows = readRows(statement, params, columns, caps);
      else execute(statement, params);
    } catch (err) {
      throw this.sqlError(err);
    }
    const after = this.counters();
    const written = after.total - before.total;
    // sqlite3_changes keeps the last INSERT/UPDATE/DELETE's count: only this statement's when it wrote.
    const changes = written > 0 ? after.changes : 0;
    const lastInsertRowid = insertsRow && changes > 0 ? after.lastInsertRowid : null;
    return { results: [{ columns, rows, changes, lastInsertRowid }], rowsRead: rows.length, rowsWritten: written };
  }

  private script(first: StatementSync, afterFirst: string): RawOutcome {
    const before = this.counters().total;
    this.guard.asEngine(() => this.db.exec('BEGIN'));
    try {
      let statement = first;
      let rest = afterFirst;
      for (;;) {
        drain(statement);
        if (onlyTrivia(rest)) break;
        statement = this.compile(rest);
        if (statement.sourceSQL.length === 0) throw new SqlError('the script could not be split into statements');
        rest = rest.slice(statement.sourceSQL.length);
      }
      this.guard.asEngine(() => this.db.exec('COMMIT'));
    } catch (err) {
      if (this.db.isTransaction) this.guard.asEngine(() => this.db.exec('ROLLBACK'));
      throw this.sqlError(err);
    }
    return { results: [], rowsRead: 0, rowsWritten: this.counters().total - before };
  }

  private counters(): { total: number; changes: number; lastInsertRowid: number } {
    const [total, changes, lastInsertRowid] = this.guard.asEngine(() => this.countersStatement.get()) as unknown as [bigint, bigint, bigint];
    return { total: Number(total), changes: Number(changes), lastInsertRowid: Number(lastInsertRowid) };
  }

  /** SQLite's message, or the authorizer's reason when it was a denial (SQLite only says "not authorized"). */
  private sqlError(err: unknown): SqlError | ScriptParamsError {
    if (err instanceof SqlError || err instanceof ScriptParamsError) return err;
    const denial = this.guard.takeDenial();
    const code = (err as { errcode?: number }).errcode;
    if (denial !== null && code === SQLITE_AUTH) return new SqlError(`not authorized: ${denial}`);
    const message = err instanceof Error ? err.message : String(err);
    if (this.queryOnly && code !== undefined && (code & 0xff) === SQLITE_READONLY) return new SqlReadOnlyError(message);
    return new SqlError(message);
  }
}

const SQLITE_AUTH = 23;
const SQLITE_READONLY = 8;

/** What may follow a statement without making a script: SQLite's whitespace, `--` and block comments, empty statements. */
export function onlyTrivia(text: string): boolean {
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === ';' || c === ' ' || c === '\t' || c === '\n' || c === '\f' || c === '\r') i++;
    else if (text.startsWith('--', i)) {
      const end = text.indexOf('\n', i);
      if (end < 0) return true;
      i = end + 1;
    } else if (text.startsWith('/*', i)) {
      // An unclosed block comment runs to the end, as in SQLite's tokenizer.
      const end = text.indexOf('*/', i + 2);
      if (end < 0) return true;
      i = end + 2;
    } else return false;
  }
  return true;
}

function bind(params: BindParams | undefined): SQLInputValue[] | [Record<string, SQLInputValue>] {
  if (params === undefined) return [];
  return Array.isArray(params) ? params : [params];
}

function execute(statement: StatementSync, params: BindParams | undefined): void {
  (statement.run as (...args: unknown[]) => unknown)(...bind(params));
}

/** Runs a statement of a script to its end; a reader's rows are not returned (a script answers no results). */
function drain(statement: StatementSync): void {
  if (statement.columns().length === 0) statement.run();
  else
    for (const _row of statement.iterate()) {
      // Stepped through, not kept.
    }
}

/** The rows as arrays of JSON values, refusing an answer beyond the caps (the statement is reset when the loop stops). */
function readRows(statement: StatementSync, params: BindParams | undefined, columns: string[], caps: ResultCaps): unknown[][] {
  statement.setReturnArrays(true);
  const rows: unknown[][] = [];
  const perRow = columns.reduce((sum, name) => sum + name.length + 4, 2);
  let bytes = 2;
  for (const raw of (statement.iterate as (...args: unknown[]) => Iterable<unknown[]>)(...bind(params))) {
    const row = raw.map(jsonValue);
    rows.push(row);
    bytes += perRow + row.reduce<number>((sum, value) => sum + valueBytes(value), 0);
    if (rows.length > caps.maxRows) throw new SqlError(`the result has more than ${caps.maxRows} rows and was not returned: ask for fewer (LIMIT, OFFSET)`);
    if (bytes > caps.maxBytes) throw new SqlError(`the result is larger than ${caps.maxBytes} bytes and was not returned: ask for fewer rows or columns`);
  }
  return rows;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** An SQLite value as JSON: integers beyond 2^53 as decimal strings, BLOBs as base64, an infinite REAL as null. */
export function jsonValue(value: unknown): unknown {
  if (typeof value === 'bigint') return value <= MAX_SAFE && value >= -MAX_SAFE ? Number(value) : value.toString();
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('base64');
  return value;
}

/** A value's size in the answer's JSON, roughly (strings counted in UTF-16 units, not escaped). */
function valueBytes(value: unknown): number {
  if (typeof value === 'string') return value.length + 2;
  if (typeof value === 'number') return 24;
  return 4;
}
