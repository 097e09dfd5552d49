import { createHash } from 'node:crypto';
import { isoSql } from '../../db/knex';

/** The rows an operation's guards locked, by guard name (`null` where there was none). */
export type LockedRows = Record<string, Record<string, unknown> | null>;

/**
 * A row locked with the insert of an operation's row, in the same statement, whose state decides
 * whether the operation may start. `allows` (SQL over `columns`) and `refuse` (the request's error)
 * state one rule twice, side by side where the rule lives: the statement inserts only when every
 * guard allows, and `refuse` runs on the locked row of the first guard that did not.
 * Table, columns and SQL are code, never input: values go in as parameters (the key's, and those
 * `allows` asks for with `param`).
 */
export interface OperationGuard {
  /** Names the locked row for `input` (`service` is the service guard's). */
  name: string;
  table: string;
  key: { column: string; value: number | string };
  /**
   * More conditions on the row, applied before it is locked: a row the request may not see (another
   * account's) is neither locked nor waited for, as if it did not exist.
   */
  scope?: (param: (value: unknown) => string) => string;
  lock: 'share' | 'update';
  columns: string[];
  allows: string | ((param: (value: unknown) => string) => string);
  whenMissing: 'allows' | 'refuses';
  /** Throws the refusal for the locked row (`null` when there is none). */
  refuse(row: Record<string, unknown> | null): void;
}

const INSERTED_COLUMNS =
  'id, account_id, type, status, progress, resource_object, resource_id, service_id, result, error, ' +
  `${isoSql('created_at')} as created_at, null::text as completed_at`;

/** `$1`..`$9` of the start statement: the operation row's values. */
const ROW_PARAMETERS = 9;

/**
 * The one statement that writes an operation's row: its guards' rows are locked (in their order)
 * and the row is inserted only when all of them allow it. Every guard's row comes back for the
 * refusal and the input, and the inserted row as JSON (null when refused). Its text depends only on
 * the guards' shapes, so it is prepared once per connection like the hot reads.
 */
export function startStatement(guards: OperationGuard[]): { name: string; text: string; values: unknown[] } {
  const values: unknown[] = [];
  const param = (value: unknown) => `$${ROW_PARAMETERS + values.push(value)}`;
  if (new Set(guards.map((g) => g.name)).size !== guards.length) throw new Error(`two guards share a name: ${guards.map((g) => g.name).join(', ')}`);
  const ctes = guards.map(
    (g, i) =>
      `g${i} as (select ${g.columns.join(', ')} from ${g.table} where ${g.key.column} = ${param(g.key.value)}` +
      `${g.scope ? ` and ${g.scope(param)}` : ''} for ${g.lock})`,
  );
  // A rule that evaluates to null refuses; only a missing row takes `whenMissing`.
  const allowed =
    guards
      .map(
        (g, i) => `coalesce((select coalesce(${typeof g.allows === 'string' ? g.allows : g.allows(param)}, false) from g${i}), ${g.whenMissing === 'allows'})`,
      )
      .join(' and ') || 'true';
  ctes.push(
    'ins as (insert into operations (id, account_id, type, status, resource_object, resource_id, service_id, credential_id, workflow_start) ' +
      `select $1::text, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::text, $9::jsonb where ${allowed} returning ${INSERTED_COLUMNS})`,
  );
  const text =
    `with ${ctes.join(', ')} select ` +
    [...guards.map((_, i) => `(select row_to_json(g${i}) from g${i}) as g${i}`), '(select row_to_json(ins) from ins) as op'].join(', ');
  let name = startStatementNames.get(text);
  if (!name) {
    name = `operations-start-${createHash('md5').update(text).digest('hex').slice(0, 12)}`;
    if (startStatementNames.size < 1_000) startStatementNames.set(text, name);
  }
  return { name, text, values };
}

/** The start statement's name by text: the routes use a handful of guard shapes, each hashed once. */
const startStatementNames = new Map<string, string>();
