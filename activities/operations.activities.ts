import { ApplicationFailure } from '@temporalio/activity';
import { OperationGone, type OperationTransition } from '../domain/operations/contract';
import type { OperationTransitions } from '../domain/operations/transitions';

/** Activities every operation workflow uses to persist its state. */
export function createOperationActivities({ operations }: { operations: Pick<OperationTransitions, 'recordTransition'> }) {
  return {
    /**
     * Persists one transition of an operation (idempotent; emits operation.completed once). An
     * operation that is not there for this run (OperationGone) fails the activity for good, so the
     * workflow stops before its first step acts.
     */
    async recordOperationTransition(transition: OperationTransition): Promise<void> {
      try {
        await operations.recordTransition(transition);
      } catch (err) {
        if (err instanceof OperationGone) throw ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: true });
        throw err;
      }
    },
  };
}

export type OperationActivities = ReturnType<typeof createOperationActivities>;
