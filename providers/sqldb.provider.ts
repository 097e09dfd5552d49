/**
 * The db primitive's engine (SPEC "Serverless", DECISIONS "Serverless": db, modelled on Cloudflare
 * D1): one SQLite database per tenant and namespace, queried with SQL text and parameters.
 *
 * The engine is providers/sqlite/sqlite.engine.ts (node:sqlite in worker processes, each connection
 * under an authorizer: docs/research/serverless-backends.md §2). What a query may be, and how its
 * answer is shaped:
 * - A single statement with optional `params` answers one SqlResult. Several statements with no
 *   params are a script: they run in one transaction (all or nothing) and answer `results: []`.
 *   A script with params is refused before anything runs (ScriptParamsError).
 * - Params are a positional array (`?`, `?1`) or an object of named ones (`:name`, `@name`, `$name`,
 *   the key with or without its prefix). A param is null, a finite number, a string or a boolean
 *   (bound as 1 / 0); anything else is refused (SqlParamsError). An empty array or object is no params.
 * - Values come back as JSON: NULL → null, TEXT → string, REAL → number (an infinite one → null),
 *   INTEGER → number, or a decimal string beyond ±(2^53 - 1) so no digit is lost, BLOB → base64 string.
 *   Rows are objects keyed by column name (a name given twice keeps the last value, as in D1).
 */

export interface SqlResult {
  /** Column names in order: also given for a SELECT that returns no rows. */
  columns: string[];
  rows: Array<Record<string, unknown>>;
  /** Rows inserted, updated or deleted by the statement itself (sqlite3_changes; 0 for a reader or DDL). */
  changes: number;
  /**
   * The rowid of the row an INSERT made, when the statement inserted one; null otherwise. A rowid
   * beyond 2^53 (only reachable by inserting such a rowid explicitly) loses precision, as in D1.
   */
  last_insert_rowid: number | null;
}

export interface QueryOutcome {
  /** One result for a single statement; [] for a script. */
  results: SqlResult[];
  /**
   * Rows returned to the caller: this is how rows read are counted (rows returned, not rows
   * scanned: node:sqlite exposes no scan counters, and a costly scan is bounded by the time limit
   * instead). A script returns no rows, so it reads 0.
   */
  rowsRead: number;
  /**
   * Rows written: the growth of sqlite3_total_changes over the query, so the rows a trigger or an
   * `INSERT … RETURNING` changes count too, and a reader or DDL counts 0; a script's total.
   */
  rowsWritten: number;
}

export interface QueryOptions {
  /**
   * Reads only (a plan at its hard quota): a statement that would change the database fails with
   * SqlReadOnlyError, and a script that holds one rolls back (SQLite's `query_only`).
   */
  readOnly?: boolean;
}

/** The db primitive's storage (DECISIONS "Serverless": db). Tenants match SQL_TENANT_PATTERN, namespaces SQL_NAMESPACE_PATTERN. */
export interface SqlDbEngine {
  /** true when it was made, false when it existed. */
  createNamespace(tenant: string, ns: string): Promise<boolean>;
  /** true when it existed (its files are gone after). */
  dropNamespace(tenant: string, ns: string): Promise<boolean>;
  /**
   * Runs SQL in the namespace. Throws SqlError (the engine's message, or a limit of ours),
   * NamespaceMissingError, ScriptParamsError / SqlParamsError, SqlNameError; BackendUnavailableError
   * when the engine's worker failed (not the query's fault).
   */
  query(tenant: string, ns: string, sql: string, params?: unknown[] | Record<string, unknown>, options?: QueryOptions): Promise<QueryOutcome>;
  /** Bytes on disk of the tenant's databases (db + wal files). */
  storedBytes(tenant: string): Promise<number>;
  /** Drops every namespace of the tenant (termination). */
  dropTenant(tenant: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * Tenant handles: made by the control plane, never a customer's string. Only lower-case letters and
 * digits, so a handle names a folder without escaping (no `.`, `/` or `..` by construction).
 */
export const SQL_TENANT_PATTERN = /^[a-z0-9]{1,32}$/;
/** Namespaces name a file `<ns>.db` in the tenant's folder: no `.` or `/`, never empty. */
export const SQL_NAMESPACE_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** SQLite refused or failed the SQL (syntax, constraint, not authorized, a limit): the engine's message, for 400 sql_error. */
export class SqlError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SqlError';
  }
}

/** A write refused because the query was read-only (QueryOptions.readOnly): SQLite's message, "attempt to write a readonly database". */
export class SqlReadOnlyError extends SqlError {
  constructor(message: string) {
    super(message);
    this.name = 'SqlReadOnlyError';
  }
}

/** The namespace does not exist (never made, or dropped): 404. */
export class NamespaceMissingError extends Error {
  constructor(readonly namespace: string) {
    super(`no database namespace ${namespace}`);
    this.name = 'NamespaceMissingError';
  }
}

/** Params the engine cannot bind (an object, an array, a non-finite number): 400 validation_failed on `param`. */
export class SqlParamsError extends Error {
  constructor(
    message: string,
    /** The request field: `params`, `params.2`, `params.name`. */
    readonly param = 'params',
  ) {
    super(message);
    this.name = 'SqlParamsError';
  }
}

/** Several statements sent with params: refused before anything runs (400 validation_failed on `params`). */
export class ScriptParamsError extends SqlParamsError {
  constructor() {
    super('params can only be given with a single statement; the SQL holds several statements (a script), which takes no params');
    this.name = 'ScriptParamsError';
  }
}

/**
 * A tenant or namespace name that breaks the rules above. The data plane checks names before they
 * reach the engine (and answers 400 in its own words); one that reaches it anyway is a bug or an
 * attack, so the engine refuses rather than putting it in a path. The message names the rule, not the value.
 */
export class SqlNameError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SqlNameError';
  }
}

export function checkSqlTenant(tenant: string): void {
  if (typeof tenant !== 'string' || !SQL_TENANT_PATTERN.test(tenant)) throw new SqlNameError('a db tenant is 1 to 32 lower-case letters or digits');
}

export function checkSqlNamespace(ns: string): void {
  if (typeof ns !== 'string' || !SQL_NAMESPACE_PATTERN.test(ns)) {
    throw new SqlNameError('a db namespace is 1 to 63 lower-case letters, digits or hyphens, starting with a letter or digit');
  }
}
