import type { Knex } from 'knex';
import { newUlidId, formatId } from '../common/ids';
import { iso } from '../common/time';
import { ApiError, backendUnavailable, notFound } from '../api/errors';
import type { TemporalGateway } from './temporal';
import { canSeeService, type Principal } from './principal';
import { emitEvent } from './events';
import { lockActionable } from './services';
import { bindOperationToIdempotencyKey } from './idempotency';
import type { Logger } from '../common/logger';
import type { OperationError, OperationInput, OperationState, OperationStatus, OperationTransition } from '../workflows/kit/operation';
import type * as Workflows from '../workflows';
import { operationStateQuery } from '../workflows/kit/operation';
import type { OperationModel } from '../db/models';
import { isoSql, preparedQuery } from '../db/knex';
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
  'from unnest($1::text[], $2::bigint[]) with ordinality as q(id, account_id, n) join operations o on o.id = q.id and o.account_id = q.account_id';

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

export interface StartOperationInput<W extends OperationWorkflow = OperationWorkflow> {
  principal: Principal;
  type: OperationType;
  /** The workflow function (by its name in workflows/index.ts); its input type follows. */
  workflow: W;
  /** Workflow input beyond `operationId` (never secrets in clear: see docs/architecture.md). */
  input: WorkflowInput<W>;
  resource?: OperationResource | null;
  serviceId?: number | null;
  initialStatus?: 'pending' | 'running';
  /** Runs inside the transaction that creates the operation row (e.g. to flag a VPS as reinstalling). */
  inTransaction?: (trx: Knex.Transaction, operationId: string) => Promise<void>;
}

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

  private readonly rows = new ReadBatcher<{ id: string; accountId: number }, OperationRow>(async (keys) => {
    const rows = await preparedQuery<OperationRow & { n: string | number }>(this.db, 'operations-find-visible', FIND_VISIBLE_SQL, [
      keys.map((k) => k.id),
      keys.map((k) => k.accountId),
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
    const status = input.initialStatus ?? 'pending';
    const row = await this.db.transaction(async (trx) => {
      const [inserted] = await trx('operations')
        .insert({
          id,
          account_id: input.principal.accountId,
          type: input.type,
          status,
          progress: null,
          resource_object: input.resource?.object ?? null,
          resource_id: input.resource?.id ?? null,
          service_id: input.serviceId ?? null,
          credential_id: input.principal.credentialId,
        })
        .returning('*');
      if (input.serviceId) await lockActionable(trx, input.serviceId, `a ${input.type} operation`);
      await bindOperationToIdempotencyKey(trx, id);
      if (input.inTransaction) await input.inTransaction(trx, id);
      return inserted as OperationRow;
    });
    try {
      await this.startWorkflow(id, input);
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
  private async startWorkflow<W extends OperationWorkflow>(id: string, input: StartOperationInput<W>): Promise<void> {
    const ms = this.opts.startTimeoutMs;
    const start = this.temporal.withDeadline(ms, () =>
      this.temporal.client.workflow.start(input.workflow, {
        workflowId: id,
        taskQueue: this.temporal.taskQueue,
        args: [{ operationId: id, ...(input.input as object) }],
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
    this.cache.delete(t.operationId);
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
    this.cache.delete(id);
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
      const state = await this.temporal.withDeadline(this.opts.queryTimeoutMs, () => this.temporal.handle(id).query(operationStateQuery));
      this.cache.set(id, { at: Date.now(), state });
      this.pruneCache();
      return presentOperation(row, state);
    } catch (err) {
      if (err instanceof ApiError) throw err;
      // A workflow that has just closed answers from PostgreSQL, which it updated before closing.
      const fresh = await this.db('operations').where({ id }).first();
      if (fresh && TERMINAL.has(fresh.status)) return presentOperation(fresh);
      this.opts.logger.warn({ operation: id, err: (err as Error).message }, 'operation query failed; serving stored state');
      return presentOperation(fresh ?? row, undefined, true);
    }
  }

  private pruneCache(): void {
    if (this.cache.size < 10_000) return;
    const cutoff = Date.now() - this.opts.cacheTtlMs;
    for (const [key, entry] of this.cache) if (entry.at < cutoff) this.cache.delete(key);
  }
}
