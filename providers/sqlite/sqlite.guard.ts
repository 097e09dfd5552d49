import { constants as C } from 'node:sqlite';

/**
 * What a tenant's SQL may do on its own database file, as an SQLite authorizer (research
 * docs/research/serverless-backends.md §2: without one, ATTACH read another tenant's file and
 * VACUUM INTO wrote a copy anywhere). SQLite asks the authorizer about every action while it
 * compiles a statement, including the actions of the triggers and views it expands, and again when
 * it recompiles one after a schema change; VACUUM asks at run time for the database it attaches.
 *
 * Denied:
 * - ATTACH and DETACH, so also both VACUUMs (each attaches a database; VACUUM INTO names any path).
 *   The connection's attach limit is 0 as well, so SQLite refuses them even without this check.
 * - BEGIN / COMMIT / ROLLBACK / SAVEPOINT: a transaction left open would outlive the request on a
 *   connection the engine keeps; a script is the way to run statements atomically.
 * - Every PRAGMA but the schema introspection ones (any argument) and a few settings read without a
 *   value; `defer_foreign_keys` may be set (transaction-scoped, used to load related rows).
 * - The functions that reach files or native code: load_extension (also off on the connection),
 *   readfile, writefile, fts3_tokenizer.
 * The engine's own statements (its pragmas, the script's BEGIN / COMMIT / ROLLBACK) run with
 * `internal` set and are not checked.
 */

/** PRAGMAs that only describe the schema or check the file; any argument. */
const INTROSPECTION_PRAGMAS = new Set([
  'table_info',
  'table_xinfo',
  'table_list',
  'index_list',
  'index_info',
  'index_xinfo',
  'foreign_key_list',
  'foreign_key_check',
  'integrity_check',
  'quick_check',
]);
/** Settings a tenant may read (no value); journal_mode and the like stay out, read or set. */
const READABLE_PRAGMAS = new Set([
  'foreign_keys',
  'user_version',
  'application_id',
  'page_count',
  'page_size',
  'freelist_count',
  'data_version',
  'schema_version',
  'encoding',
]);
/** Settings a tenant may also set. */
const SETTABLE_PRAGMAS = new Set(['defer_foreign_keys']);
const DENIED_FUNCTIONS = new Set(['load_extension', 'readfile', 'writefile', 'fts3_tokenizer']);

export class SqlGuard {
  /** The engine's own statements run unchecked. */
  internal = false;
  /** Set while a tenant's statement is compiled (not when SQLite recompiles one, nor at run time). */
  private preparing = false;
  /** Why the last action was denied, for the error message (SQLite only says "not authorized"). */
  private denial: string | null = null;
  /** The statement being compiled inserts into a table of the tenant's (not from a trigger). */
  insertsRow = false;

  /** Compiles with the checks on and the statement's facts reset. */
  compile<T>(prepare: () => T): T {
    this.preparing = true;
    this.denial = null;
    this.insertsRow = false;
    try {
      return prepare();
    } finally {
      this.preparing = false;
    }
  }

  /** Runs the engine's own SQL unchecked. */
  asEngine<T>(run: () => T): T {
    this.internal = true;
    try {
      return run();
    } finally {
      this.internal = false;
    }
  }

  /** The reason of the last denial, once (null when nothing was denied since). */
  takeDenial(): string | null {
    const denial = this.denial;
    this.denial = null;
    return denial;
  }

  /** The callback for DatabaseSync.setAuthorizer. */
  readonly authorize = (action: number, arg1: string | null, arg2: string | null, _db: string | null, trigger: string | null): number => {
    if (this.internal) return C.SQLITE_OK;
    if (this.preparing && action === C.SQLITE_INSERT && trigger === null && arg1 !== null && !arg1.startsWith('sqlite_')) this.insertsRow = true;
    const denial = this.refusal(action, arg1, arg2);
    if (denial === null) return C.SQLITE_OK;
    this.denial = denial;
    return C.SQLITE_DENY;
  };

  private refusal(action: number, arg1: string | null, arg2: string | null): string | null {
    switch (action) {
      case C.SQLITE_ATTACH:
      case C.SQLITE_DETACH:
        // At compile time it is the tenant's ATTACH; at run time, VACUUM attaching its target.
        return this.preparing ? 'ATTACH and DETACH are not allowed' : 'VACUUM is not available (the file gives back free pages by itself: auto_vacuum)';
      case C.SQLITE_TRANSACTION:
      case C.SQLITE_SAVEPOINT:
        return 'BEGIN, COMMIT, ROLLBACK and SAVEPOINT are not allowed: send the statements together as one script, which runs in one transaction';
      case C.SQLITE_PRAGMA:
        return pragmaRefusal(String(arg1).toLowerCase(), arg2);
      case C.SQLITE_FUNCTION:
        return DENIED_FUNCTIONS.has(String(arg2).toLowerCase()) ? `the function ${String(arg2).toLowerCase()} is not allowed` : null;
      default:
        return null;
    }
  }
}

function pragmaRefusal(name: string, value: string | null): string | null {
  if (INTROSPECTION_PRAGMAS.has(name) || SETTABLE_PRAGMAS.has(name)) return null;
  if (READABLE_PRAGMAS.has(name)) return value === null ? null : `PRAGMA ${name} can be read but not set`;
  return `PRAGMA ${name} is not allowed (allowed: the schema ones such as table_info, index_list, foreign_key_list, and reading foreign_keys or user_version)`;
}
