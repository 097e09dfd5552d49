import { iso } from '../../common/time';
import type { OperationModel } from '../../db/models';

/**
 * The contract between an operation's workflow and the control plane. Every asynchronous endpoint
 * starts a workflow whose id is the operation id; the workflow answers `operationState` and records
 * every transition in PostgreSQL (so finished operations are read without a replay, and a Temporal
 * outage still leaves the last state to serve with `stale: true`).
 */
export type OperationStatus = 'pending' | 'running' | 'succeeded' | 'failed';

export interface OperationError {
  code: string;
  message: string;
  step?: string;
  [key: string]: unknown;
}

export interface OperationState {
  status: OperationStatus;
  progress: number | null;
  result: unknown;
  error: OperationError | null;
}

export interface OperationTransition extends Partial<OperationState> {
  operationId: string;
}

/** Every operation workflow takes an input that names its operation. */
export interface OperationInput {
  operationId: string;
}

/*
 * What an operation is, for everyone who handles one (workflows, activities, stores, the API): its
 * states above, its row and its view below. This module imports none of the operations' mechanics
 * (start, read, transitions), so that nothing that uses it can close a loop through them.
 */

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

export type OperationRow = Pick<
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
