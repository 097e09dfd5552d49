import type { Knex } from 'knex';
import { newUlidId } from '../../common/ids';
import { emitEvent } from '../events';
import { bindOperationToIdempotencyKey } from '../idempotency';
import type { Principal } from '../principal';
import {
  OperationGone,
  presentOperation,
  TERMINAL,
  type OperationError,
  type OperationResource,
  type OperationRow,
  type OperationTransition,
  type OperationView,
} from './contract';
import type { OperationType } from './types';

/**
 * Every change of an operation's row after its start: what its workflow reports (through an
 * activity), an operation that finished inside its request, and what the orphan sweeper closes.
 * `forget` drops what the reads cached of an operation whose row changed here.
 */
export class OperationTransitions {
  constructor(
    private readonly db: Knex,
    private readonly forget: (operationId: string) => void = () => {},
  ) {}

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
}
