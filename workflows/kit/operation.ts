import { defineQuery, proxyActivities, setHandler } from '@temporalio/workflow';
import type { OperationActivities } from '../../activities/operations.activities';
import type { OperationError, OperationState } from '../../domain/operations/contract';

/**
 * The contract between an operation's workflow and the control plane lives with the other
 * operation modules (domain/operations/contract.ts); the workflow kit names it for workflows.
 */
export type { OperationError, OperationInput, OperationState, OperationStatus, OperationTransition } from '../../domain/operations/contract';

export const operationStateQuery = defineQuery<OperationState>('operationState');

const { recordOperationTransition } = proxyActivities<OperationActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/**
 * Holds an operation's state inside its workflow: answers the query and persists each change.
 * Create it first thing in the workflow function (it registers the query handler).
 * Progress-only updates are persisted too; they are small and tell a poller after an outage how far
 * the run got.
 */
export class OperationTracker {
  private state: OperationState;

  constructor(
    private readonly operationId: string,
    initial: Partial<OperationState> = {},
  ) {
    this.state = { status: 'running', progress: null, result: null, error: null, ...initial };
    setHandler(operationStateQuery, () => this.state);
  }

  get current(): OperationState {
    return this.state;
  }

  async update(change: Partial<OperationState>): Promise<void> {
    this.state = { ...this.state, ...change };
    await recordOperationTransition({ operationId: this.operationId, ...change });
  }

  progress(progress: number, result?: unknown): Promise<void> {
    return this.update(result === undefined ? { progress } : { progress, result });
  }

  succeed(result: unknown = this.state.result): Promise<void> {
    return this.update({ status: 'succeeded', progress: 100, result, error: null });
  }

  fail(error: OperationError, result: unknown = this.state.result): Promise<void> {
    return this.update({ status: 'failed', error, result });
  }
}
