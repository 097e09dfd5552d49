import { WorkflowNotFoundError } from '@temporalio/common';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { PeriodicService } from '../common/periodic';
import type { OperationService } from '../domain/operations';
import { releaseOf } from '../domain/operations/types';
import type { TemporalGateway } from '../infra/temporal';
import type { BackgroundService } from './background';

/** Seen, unfinished operations checked per pass. */
const SEEN_BATCH = 100;

/** The public message of an operation whose workflow was ended from outside, by how it ended. */
const ENDED_FROM_OUTSIDE: Record<string, string> = {
  TERMINATED: 'The operation was stopped by an operator (its workflow was terminated) before it recorded its outcome. Check the resource before trying again.',
  CANCELLED: 'The operation was cancelled from outside (its workflow was cancelled) before it recorded its outcome. Check the resource before trying again.',
  TIMED_OUT: 'The operation ran out of time (its workflow timed out) before it recorded its outcome. Check the resource before trying again.',
  OTHER: 'The operation stopped without recording its outcome. Check the resource before trying again.',
};

/**
 * No operation row without a workflow. An asynchronous POST commits its operation row, then starts
 * the workflow; if its process dies in between, or it cannot take the row back after a start that
 * timed out, the row would stay `running` for ever (and hold what its request claimed, like a VPS's
 * reinstall flag). The committed row is the intent: a client may have been told 202 (a retry with
 * the same Idempotency-Key answers with that operation). Every OPERATION_ORPHAN_SWEEP_INTERVAL this
 * looks at unfinished operations older than OPERATION_ORPHAN_AFTER whose workflow has never
 * reported: a running workflow is noted and left alone; a workflow that does not exist is started
 * from the row (`workflow_start`; the workflow id is the operation id, so a start that raced this
 * one is not repeated). Only a row that cannot say how to start it (written before that column, or
 * by a process that died before it knew its input, when no client was told anything), or whose
 * workflow ended without recording an outcome, gets its operation failed (`not_started` /
 * `interrupted`), its claims released, and `operation.completed`. A workflow that still starts
 * after that finds its operation closed and stops before acting.
 *
 * A workflow can also end from outside after it was seen (`temporal workflow terminate`, a cancel
 * from the Temporal UI, a run timeout): nothing then records an outcome, and the operation would
 * stay `running` for ever. So each pass also walks, a batch at a time, the unfinished operations
 * whose workflow was seen and has not reported for OPERATION_ORPHAN_AFTER, and closes those whose
 * workflow is no longer running the same way (`interrupted`, with a message naming how it ended).
 */
export class OrphanOperationSweeper extends PeriodicService implements BackgroundService {
  readonly name = 'orphan-operation-sweeper';
  /** Where the walk over seen, unfinished operations goes on next pass ('' starts over). */
  private seenCursor = '';

  constructor(private readonly deps: { config: Config; logger: Logger; temporal: TemporalGateway; operations: OperationService }) {
    super({ intervalMs: deps.config.OPERATION_ORPHAN_SWEEP_INTERVAL });
  }

  protected pass() {
    return this.sweep();
  }

  /** One pass; returns the ids it closed. */
  async sweep(): Promise<string[]> {
    const closed: string[] = [];
    try {
      for (const op of await this.deps.operations.unconfirmed(this.deps.config.OPERATION_ORPHAN_AFTER)) {
        const state = await this.workflowState(op.id);
        if (state === 'running') {
          await this.deps.operations.markWorkflowSeen(op.id);
          continue;
        }
        if (state === 'missing' && (await this.deps.operations.startFromRow(op.id))) {
          // Seen on a later pass (running, or its first transition), like any other workflow.
          this.deps.logger.warn({ operation: op.id, type: op.type }, 'started the workflow of an operation its request did not start');
          continue;
        }
        const error =
          state === 'missing'
            ? { code: 'not_started', message: 'The operation was never started: the workflow engine did not take it. Nothing was changed; try again.' }
            : { code: 'interrupted', message: 'The operation stopped without recording its outcome. Check the resource before trying again.' };
        if (await this.deps.operations.abandon(op.id, error, releaseOf(op.type))) {
          this.deps.logger.warn({ operation: op.id, type: op.type, workflow: state }, 'closed an operation no workflow runs');
          closed.push(op.id);
        }
      }
      closed.push(...(await this.sweepSeen()));
    } catch (err) {
      // Temporal or PostgreSQL not answering: nothing is decided on a guess; the next pass retries.
      this.deps.logger.warn({ err: (err as Error).message }, 'orphan operation sweep failed; next pass retries');
    }
    return closed;
  }

  /** One batch of the walk over operations whose workflow was seen: closes those it no longer runs. */
  private async sweepSeen(): Promise<string[]> {
    const closed: string[] = [];
    const batch = await this.deps.operations.seenUnfinished(this.deps.config.OPERATION_ORPHAN_AFTER, this.seenCursor, SEEN_BATCH);
    this.seenCursor = batch.length === SEEN_BATCH ? batch[batch.length - 1].id : '';
    for (const op of batch) {
      const status = await this.workflowStatus(op.id);
      if (status === 'RUNNING') continue;
      // Ended without recording an outcome: the workflow records it before it completes, and a
      // row that became terminal meanwhile is left alone by abandon().
      const error = { code: 'interrupted', message: ENDED_FROM_OUTSIDE[status] ?? ENDED_FROM_OUTSIDE.OTHER };
      if (await this.deps.operations.abandon(op.id, error, releaseOf(op.type))) {
        this.deps.logger.warn({ operation: op.id, type: op.type, workflow: status }, 'closed an operation whose workflow ended without an outcome');
        closed.push(op.id);
      }
    }
    return closed;
  }

  private async workflowState(id: string): Promise<'running' | 'closed' | 'missing'> {
    const status = await this.workflowStatus(id);
    return status === 'RUNNING' ? 'running' : status === 'MISSING' ? 'missing' : 'closed';
  }

  /** The workflow's status as Temporal names it (`RUNNING`, `TERMINATED`, ...), or `MISSING`. */
  private async workflowStatus(id: string): Promise<string> {
    try {
      const description = await this.deps.temporal.withDeadline(5_000, () => this.deps.temporal.handle(id).describe());
      return description.status.name;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return 'MISSING';
      throw err;
    }
  }
}
