import { WorkflowNotFoundError } from '@temporalio/common';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { PeriodicService } from '../common/periodic';
import { releaseOf } from '../domain/operation-releases';
import type { OperationService } from '../domain/operations';
import type { TemporalGateway } from '../domain/temporal';
import type { BackgroundService } from './background';

/**
 * No operation row without a workflow. An asynchronous POST commits its operation row, then starts
 * the workflow; if its process dies in between, or it cannot take the row back after a start that
 * timed out, the row would stay `running` for ever (and hold what its request claimed, like a VPS's
 * reinstall flag). Every OPERATION_ORPHAN_SWEEP_INTERVAL this looks at unfinished operations older
 * than OPERATION_ORPHAN_AFTER whose workflow has never reported: a running workflow is noted and
 * left alone; a workflow that does not exist, or ended without recording an outcome, gets its
 * operation failed (`not_started` / `interrupted`), its claims released, and `operation.completed`.
 * A workflow that still starts after that finds its operation closed and stops before acting.
 */
export class OrphanOperationSweeper extends PeriodicService implements BackgroundService {
  readonly name = 'orphan-operation-sweeper';

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
        const error =
          state === 'missing'
            ? { code: 'not_started', message: 'The operation was never started: the workflow engine did not take it. Nothing was changed; try again.' }
            : { code: 'interrupted', message: 'The operation stopped without recording its outcome. Check the resource before trying again.' };
        if (await this.deps.operations.abandon(op.id, error, releaseOf(op.type))) {
          this.deps.logger.warn({ operation: op.id, type: op.type, workflow: state }, 'closed an operation no workflow runs');
          closed.push(op.id);
        }
      }
    } catch (err) {
      // Temporal or PostgreSQL not answering: nothing is decided on a guess; the next pass retries.
      this.deps.logger.warn({ err: (err as Error).message }, 'orphan operation sweep failed; next pass retries');
    }
    return closed;
  }

  private async workflowState(id: string): Promise<'running' | 'closed' | 'missing'> {
    try {
      const description = await this.deps.temporal.withDeadline(5_000, () => this.deps.temporal.handle(id).describe());
      return description.status.name === 'RUNNING' ? 'running' : 'closed';
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return 'missing';
      throw err;
    }
  }
}
