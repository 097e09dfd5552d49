import type { Knex } from 'knex';
import { newUlidId, formatId } from '../common/ids';
import { iso } from '../common/time';
import { ApiError, backendUnavailable, notFound } from '../api/errors';
import type { TemporalGateway } from './temporal';
import { canSeeService, type Principal } from './principal';
import { emitEvent } from './events';
import { serviceGuard } from './services';
import { bindOperationToIdempotencyKey, idempotencyClaimed } from './idempotency';
import type { Logger } from '../common/logger';
import type { OperationError, OperationInput, OperationState, OperationStatus, OperationTransition } from '../workflows/kit/operation';
import type * as Workflows from '../workflows';
import { operationStateQuery } from '../workflows/kit/operation';
import type { OperationModel } from '../db/models';
import { isoSql, preparedQuery } from '../db/knex';
import { createHash } from 'node:crypto';
import { ReadBatcher } from '../db/read-batcher';

export interface OperationResource {
  object: string;
  id: string;
}

export interface OperationView {
  object: 'operation';
  id: string;
  type: string;
  status: OperationStatus;
  progress: number | null;
  resource: OperationResource | null;
  result: unknown;
  error: unknown;
  stale: boolean;
  created_at: string;
  completed_at: string | null;
}

type OperationRow = Pick<
  OperationModel,
  'id' | 'account_id' | 'type' | 'status' | 'progress' | 'resource_object' | 'resource_id' | 'service_id' | 'result' | 'error'
> & {
  /** Dates from the query builder, ISO strings from the prepared read (isoSql). */
  created_at: Date | string;
  completed_at: Date | string | null;
};

export const TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'failed']);

/**
 * A run reports on an operation that is not there for it: taken back because its start timed out,
 * or closed by the orphan sweeper. The run must stop without acting (a non-retryable activity failure).
 */
export class OperationGone extends Error {
  constructor(operationId: string, why: string) {
    super(`operation ${operationId} ${why}`);
    this.name = 'OperationGone';
  }
}

const FIND_VISIBLE_SQL =
  'select q.n, o.id, o.account_id, o.type, o.status, o.progress, o.resource_object, o.resource_id, o.service_id, o.result, o.error, ' +
  `${isoSql('o.created_at')} as created_at, ${isoSql('o.completed_at')} as completed_at ` +
  "from unnest(string_to_array($1, ','), string_to_array($2, ',')::bigint[]) with ordinality as q(id, account_id, n) " +
  'join operations o on o.id = q.id and o.account_id = q.account_id';

export function presentOperation(row: OperationRow, live?: OperationState, stale = false): OperationView {
  const state = live ?? row;
  return {
    object: 'operation',
    id: row.id,
    type: row.type,
    status: state.status as OperationStatus,
    progress: state.progress ?? null,
    resource: row.resource_object && row.resource_id ? { object: row.resource_object, id: row.resource_id } : null,
    result: state.result ?? null,
    error: state.error ?? null,
    stale,
    created_at: iso(row.created_at)!,
    completed_at: iso(row.completed_at),
  };
}

/** Operation types (DECISIONS "Operations"); a family adds its own here. */
export type OperationType =
  | 'vps.power'
  | 'vps.reinstall'
  | 'vps.backup'
  | 'vps.restore'
  | 'orders.create'
  | 'dbaas.backup'
  | 'dbaas.restart'
  | 'caas.deploy'
  | 'objectstorage.empty'
  | 'wordpress.backup'
  | 'wordpress.restore'
  | 'wordpress.recipe_apply';

type WorkflowModule = typeof Workflows;
/** Every workflow of workflows/index.ts whose input names its operation. */
export type OperationWorkflow = {
  [K in keyof WorkflowModule]: WorkflowModule[K] extends (input: infer I) => Promise<unknown> ? (I extends OperationInput ? K : never) : never;
}[keyof WorkflowModule];
/** A workflow's input without `operationId` (the operation service adds it). */
export type WorkflowInput<W extends OperationWorkflow> = Omit<Parameters<WorkflowModule[W]>[0], 'operationId'>;

/** The rows an operation's guards locked, by guard name (`null` where there was none). */
export type LockedRows = Record<string, Record<string, unknown> | null>;

export interface StartOperationInput<W extends OperationWorkflow = OperationWorkflow> {
  principal: Principal;
  type: OperationType;
  /** The workflow function (by its name in workflows/index.ts); its input type follows. */
  workflow: W;
  /**
   * Workflow input beyond `operationId` (never secrets in clear: see docs/architecture.md), or a
   * function of the rows the guards locked, for a start that reads nothing before its statement.
   */
  input: WorkflowInput<W> | ((locked: LockedRows) => WorkflowInput<W>);
  resource?: OperationResource | null;
  serviceId?: number | null;
  /**
   * With `serviceId`, for a start that has not read the service: the service guard also checks
   * that the service is the principal's account's, of this family (404 otherwise), and that this
   * capability is true (400), before its billing status (409), as findVisibleService and
   * requireCapability would have.
   */
  serviceChecks?: { family: string; capability: string; /** What the request does, for the 409's message (`a power action`). */ action: string };
  initialStatus?: 'pending' | 'running';
  /**
   * Rows whose state must still allow the operation when its row is written: locked and checked in
   * the same statement (e.g. the VPS is not being reinstalled). The service's row (`service`) is
   * always the first of them when `serviceId` is set.
   */
  guards?: OperationGuard[];
  /** Runs inside the transaction that creates the operation row (e.g. to flag a VPS as reinstalling). */
  inTransaction?: (trx: Knex.Transaction, operationId: string) => Promise<void>;
}

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

/** `$1`..`$8` of the start statement: the operation row's values. */
const ROW_PARAMETERS = 8;

/**
 * The one statement that writes an operation's row: its guards' rows are locked (in their order)
 * and the row is inserted only when all of them allow it. Every guard's row comes back for the
 * refusal and the input, and the inserted row as JSON (null when refused). Its text depends only on
 * the guards' shapes, so it is prepared once per connection like the hot reads.
 */
function startStatement(guards: OperationGuard[]): { name: string; text: string; values: unknown[] } {
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
    'ins as (insert into operations (id, account_id, type, status, resource_object, resource_id, service_id, credential_id) ' +
      `select $1::text, $2::bigint, $3::text, $4::text, $5::text, $6::text, $7::bigint, $8::text where ${allowed} returning ${INSERTED_COLUMNS})`,
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

interface CacheEntry {
  at: number;
  state: OperationState;
}

/**
 * One mechanism for every asynchronous endpoint: create the operation row, start the workflow whose
 * id is the operation id, answer 202 with the operation. Reads come from PostgreSQL for finished
 * operations and from a (cached) workflow query for running ones.
 */
export class OperationService {
  private readonly cache = new Map<string, CacheEntry>();
  private readonly pendingStarts = new Set<Promise<void>>();
  /** Workflow queries out, by operation id (queryState). */
  private readonly queries = new Map<string, Promise<OperationState>>();

  private readonly rows = new ReadBatcher<{ id: string; accountId: number }, OperationRow>(async (keys) => {
    // The keys as comma-separated text, not arrays: the driver escapes every element of an array
    // parameter, and these need none (`op_` and a ULID; account numbers).
    const rows = await preparedQuery<OperationRow & { n: string | number }>(this.db, 'operations-find-visible', FIND_VISIBLE_SQL, [
      keys.map((k) => k.id).join(','),
      keys.map((k) => k.accountId).join(','),
    ]);
    return rows.map(({ n, ...row }) => ({ n: Number(n) - 1, row }));
  });

  constructor(
    private readonly db: Knex,
    private readonly temporal: TemporalGateway,
    private readonly opts: { cacheTtlMs: number; queryTimeoutMs: number; startTimeoutMs: number; logger: Logger },
  ) {}

  async start<W extends OperationWorkflow>(input: StartOperationInput<W>): Promise<OperationView> {
    const id = newUlidId('op');
    const guards = [
      ...(input.serviceId
        ? [
            serviceGuard(
              input.serviceId,
              input.serviceChecks?.action ?? `a ${input.type} operation`,
              input.serviceChecks && { accountId: input.principal.accountId, ...input.serviceChecks },
            ),
          ]
        : []),
      ...(input.guards ?? []),
    ];
    const statement = startStatement(guards);
    const values = [
      id,
      input.principal.accountId,
      input.type,
      input.initialStatus ?? 'pending',
      input.resource?.object ?? null,
      input.resource?.id ?? null,
      input.serviceId ?? null,
      input.principal.credentialId,
      ...statement.values,
    ];
    let args = input.input as WorkflowInput<W>;
    const insert = async (conn?: Knex.Transaction): Promise<OperationRow> => {
      const [result] = await preparedQuery<Record<string, unknown>>(conn ?? this.db, statement.name, statement.text, values);
      const rows = guards.map((_, i) => (result[`g${i}`] as Record<string, unknown> | null) ?? null);
      if (!result.op) {
        guards.forEach((g, i) => g.refuse(rows[i]));
        throw new Error(`operation ${id} was refused by its guards, and none said why`);
      }
      // (A function that throws here leaves an orphan row at worst, which the orphan sweeper closes.)
      if (typeof input.input === 'function') args = input.input(Object.fromEntries(guards.map((g, i) => [g.name, rows[i]])));
      return result.op as OperationRow;
    };
    // Without a hook or an Idempotency-Key to bind, the row is one statement on its own; otherwise
    // the same statement opens the transaction that the binding and the hook share.
    const row =
      !input.inTransaction && !idempotencyClaimed()
        ? await insert()
        : await this.db.transaction(async (trx) => {
            const inserted = await insert(trx);
            await bindOperationToIdempotencyKey(trx, id);
            if (input.inTransaction) await input.inTransaction(trx, id);
            return inserted;
          });
    try {
      await this.startWorkflow(id, input, args);
    } catch (err) {
      // Temporal did not take the workflow within the deadline (frozen, down, slow). Whether or not
      // the start still reaches it later, nothing may run: the row is taken back (with what the
      // transaction hook claimed, by its foreign keys), so a workflow that starts anyway finds no
      // operation and stops before acting (OperationGone). If the database refuses the delete too,
      // the orphan sweeper closes the row (workers/orphan-operation-sweeper.ts).
      this.opts.logger.error({ err: (err as Error).message, operation: id }, 'could not start workflow');
      await this.db('operations')
        .where({ id })
        .delete()
        .catch((e: Error) => this.opts.logger.error({ err: e.message, operation: id }, 'could not take the operation back; the orphan sweeper will close it'));
      throw backendUnavailable('operations');
    }
    return presentOperation(row);
  }

  /**
   * Starts the operation's workflow within OPERATION_START_TIMEOUT: the gRPC deadline bounds the
   * call and its retries, and a timer bounds a connection that never completes its handshake.
   */
  private async startWorkflow<W extends OperationWorkflow>(id: string, input: StartOperationInput<W>, args: WorkflowInput<W>): Promise<void> {
    const ms = this.opts.startTimeoutMs;
    const start = this.temporal.withDeadline(ms, () =>
      this.temporal.client.workflow.start(input.workflow, {
        workflowId: id,
        taskQueue: this.temporal.taskQueue,
        args: [{ operationId: id, ...(args as object) }],
        typedSearchAttributes: this.temporal.searchAttributes({
          operationType: input.type,
          accountId: formatId('cus', input.principal.accountId),
          resourceId: input.resource?.id ?? null,
        }),
        memo: {
          operation_type: input.type,
          account: formatId('cus', input.principal.accountId),
          resource: input.resource ? `${input.resource.object} ${input.resource.id}` : null,
          credential: input.principal.credentialId,
        },
      }),
    );
    // Settled below, or left behind when the timer wins: kept until it settles, so that closing the
    // connection (drain) does not pull it out from under the client's pending retries.
    const settled = start.then(
      () => undefined,
      () => undefined,
    );
    this.pendingStarts.add(settled);
    void settled.then(() => this.pendingStarts.delete(settled));
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`Temporal did not accept the workflow within ${ms} ms`)), ms + 250);
    });
    try {
      await Promise.race([start, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits (at most `maxMs`) for workflow starts still in flight, before the Temporal connection closes. */
  async drain(maxMs = 10_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.pendingStarts), new Promise((resolve) => (timer = setTimeout(resolve, maxMs)))]);
    clearTimeout(timer);
  }

  /** An operation that finishes inside the request (SPEC: "including those that finish inside the request"). */
  async recordCompleted(input: {
    principal: Principal;
    type: OperationType;
    resource?: OperationResource | null;
    serviceId?: number | null;
    status: 'succeeded' | 'failed';
    result?: unknown;
    error?: OperationError | null;
  }): Promise<OperationView> {
    return this.db.transaction(async (trx) => {
      const [row] = await trx('operations')
        .insert({
          id: newUlidId('op'),
          account_id: input.principal.accountId,
          type: input.type,
          status: input.status,
          progress: 100,
          resource_object: input.resource?.object ?? null,
          resource_id: input.resource?.id ?? null,
          service_id: input.serviceId ?? null,
          result: JSON.stringify(input.result ?? null),
          error: JSON.stringify(input.error ?? null),
          credential_id: input.principal.credentialId,
          completed_at: trx.fn.now(),
        })
        .returning('*');
      await bindOperationToIdempotencyKey(trx, row.id);
      const view = presentOperation(row);
      await emitEvent(trx, { accountId: row.account_id, type: 'operation.completed', data: view, serviceId: row.service_id });
      return view;
    });
  }

  /**
   * Applies a transition reported by a workflow. Idempotent (activities retry): once a row is
   * terminal it no longer changes, so `operation.completed` is emitted exactly once.
   */
  async recordTransition(t: OperationTransition): Promise<void> {
    await this.db.transaction(async (trx) => {
      const row = await trx('operations').where({ id: t.operationId }).forUpdate().first();
      // Taken back after its start timed out: the run must not act (its caller was told 503).
      if (!row) throw new OperationGone(t.operationId, 'does not exist: its start was given up');
      if (TERMINAL.has(row.status)) {
        if (t.status !== undefined && TERMINAL.has(t.status)) return; // a retried final transition
        // Closed by the orphan sweeper (it saw no workflow): a run that starts now must not act.
        throw new OperationGone(t.operationId, `was closed (${row.status}) before this run reported`);
      }
      // Any transition proves the workflow exists: the orphan sweeper need not look for it.
      const patch: Record<string, unknown> = { updated_at: trx.fn.now(), workflow_seen_at: trx.raw('coalesce(workflow_seen_at, now())') };
      if (t.status !== undefined) patch.status = t.status;
      if (t.progress !== undefined) patch.progress = t.progress;
      if (t.result !== undefined) patch.result = JSON.stringify(t.result);
      if (t.error !== undefined) patch.error = JSON.stringify(t.error);
      const terminal = t.status !== undefined && TERMINAL.has(t.status);
      if (terminal) patch.completed_at = trx.fn.now();
      const [updated] = await trx('operations').where({ id: t.operationId }).update(patch).returning('*');
      if (terminal) {
        await emitEvent(trx, { accountId: updated.account_id, type: 'operation.completed', data: presentOperation(updated), serviceId: updated.service_id });
      }
    });
    this.forget(t.operationId);
  }

  /**
   * Closes an operation that no workflow runs (its workflow does not exist, or ended without
   * recording an outcome): `failed` with `error`, what its request claimed given back (`release`),
   * and `operation.completed` emitted, all in one transaction. False when it was already terminal.
   */
  async abandon(id: string, error: OperationError, release?: (trx: Knex.Transaction, row: OperationRow) => Promise<void>): Promise<boolean> {
    const closed = await this.db.transaction(async (trx) => {
      const row = await trx('operations').where({ id }).forUpdate().first();
      if (!row || TERMINAL.has(row.status)) return false;
      const [updated] = await trx('operations')
        .where({ id })
        .update({ status: 'failed', error: JSON.stringify(error), completed_at: trx.fn.now(), updated_at: trx.fn.now() })
        .returning('*');
      if (release) await release(trx, updated);
      await emitEvent(trx, { accountId: updated.account_id, type: 'operation.completed', data: presentOperation(updated), serviceId: updated.service_id });
      return true;
    });
    this.forget(id);
    return closed;
  }

  /** Not terminal, older than `olderThanMs`, and no workflow seen yet: the orphan sweeper's candidates (oldest first). */
  async unconfirmed(olderThanMs: number, limit = 100): Promise<Array<Pick<OperationRow, 'id' | 'type'>>> {
    return this.db('operations')
      .whereIn('status', ['pending', 'running'])
      .whereNull('workflow_seen_at')
      .where('created_at', '<', this.db.raw(`now() - ?::interval`, [`${olderThanMs} milliseconds`]))
      .orderBy('created_at')
      .limit(limit)
      .select('id', 'type');
  }

  /**
   * Unfinished operations whose workflow has been seen but has not reported for `quietForMs`, in
   * id order after `afterId` (the sweeper walks them a batch per pass): the candidates whose
   * workflow may have been closed from outside (terminated, cancelled, timed out) without an outcome.
   */
  async seenUnfinished(quietForMs: number, afterId: string, limit = 100): Promise<Array<Pick<OperationRow, 'id' | 'type'>>> {
    return this.db('operations')
      .whereIn('status', ['pending', 'running'])
      .whereNotNull('workflow_seen_at')
      .where('id', '>', afterId)
      .where('updated_at', '<', this.db.raw(`now() - ?::interval`, [`${quietForMs} milliseconds`]))
      .orderBy('id')
      .limit(limit)
      .select('id', 'type');
  }

  async markWorkflowSeen(id: string): Promise<void> {
    await this.db('operations').where({ id }).whereNull('workflow_seen_at').update({ workflow_seen_at: this.db.fn.now() });
  }

  /**
   * The operation of an order takes the service the order created: from then on, its visibility
   * follows that service's like any other operation's (docs/security.md).
   */
  async attachService(operationId: string, serviceId: number): Promise<void> {
    await this.db('operations').where({ id: operationId }).whereNull('service_id').update({ service_id: serviceId });
  }

  /** Loads a row the principal may see, or throws 404. */
  async findVisible(principal: Principal, id: string): Promise<OperationRow> {
    // The batch sends its keys comma-separated (FIND_VISIBLE_SQL): an id with a comma is none of ours.
    if (id.includes(',')) throw notFound('operation');
    // Every GET /v1/operations/{id} reads this row: one prepared statement for the concurrent ones.
    const [row] = await this.rows.load({ id, accountId: principal.accountId });
    if (!row || (row.service_id !== null && !canSeeService(principal, row.service_id))) throw notFound('operation');
    return row;
  }

  async get(principal: Principal, id: string): Promise<OperationView> {
    const row = await this.findVisible(principal, id);
    if (TERMINAL.has(row.status)) return presentOperation(row);
    const cached = this.cache.get(id);
    if (cached && Date.now() - cached.at < this.opts.cacheTtlMs) return presentOperation(row, cached.state);
    try {
      return presentOperation(row, await this.queryState(id));
    } catch (err) {
      if (err instanceof ApiError) throw err;
      // A workflow that has just closed answers from PostgreSQL, which it updated before closing.
      const fresh = await this.db('operations').where({ id }).first();
      if (fresh && TERMINAL.has(fresh.status)) return presentOperation(fresh);
      this.opts.logger.warn({ operation: id, err: (err as Error).message }, 'operation query failed; serving stored state');
      return presentOperation(fresh ?? row, undefined, true);
    }
  }

  /**
   * The running workflow's state by query, one query per operation at a time: the requests that
   * find the cached state expired while a query is out wait for that query's answer (or failure)
   * instead of sending their own (under load, every in-flight request did).
   */
  private queryState(id: string): Promise<OperationState> {
    const pending = this.queries.get(id);
    if (pending) return pending;
    // An answer is cached only if nothing forgot this operation's state while it was out (forget).
    const query: Promise<OperationState> = this.temporal
      .withDeadline(this.opts.queryTimeoutMs, () => this.temporal.handle(id).query(operationStateQuery))
      .then((state) => {
        if (this.queries.get(id) === query) {
          this.cache.set(id, { at: Date.now(), state });
          this.pruneCache();
        }
        return state;
      })
      .finally(() => {
        if (this.queries.get(id) === query) this.queries.delete(id);
      });
    this.queries.set(id, query);
    return query;
  }

  /** Drops the cached state of an operation whose row changed here, and any query out for it. */
  private forget(id: string): void {
    this.cache.delete(id);
    this.queries.delete(id);
  }

  private pruneCache(): void {
    if (this.cache.size < 10_000) return;
    const cutoff = Date.now() - this.opts.cacheTtlMs;
    for (const [key, entry] of this.cache) if (entry.at < cutoff) this.cache.delete(key);
  }
}
