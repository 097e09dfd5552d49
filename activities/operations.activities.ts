import type { OperationService } from '../domain/operations';
import type { OperationTransition } from '../workflows/kit/operation';

/** Activities every operation workflow uses to persist its state. */
export function createOperationActivities({ operations }: { operations: OperationService }) {
  return {
    /** Persists one transition of an operation (idempotent; emits operation.completed once). */
    async recordOperationTransition(transition: OperationTransition): Promise<void> {
      await operations.recordTransition(transition);
    },
  };
}

export type OperationActivities = ReturnType<typeof createOperationActivities>;
