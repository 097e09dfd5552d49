import type { Knex } from 'knex';
import type { OperationType } from './operations/contract';
import { voidOrderOfAbandonedOperation } from './orders/orders';
import { releaseReinstall } from './vps/store';

/**
 * What the request of an operation type claimed in its transaction (`inTransaction` of
 * startOperation: a lock, a held secret, a record), to give back when the operation is closed
 * because no workflow ever ran it (workers/orphan-operation-sweeper.ts). A family whose request
 * claims something there registers its release here, so nothing stays locked by such an operation.
 */
export const OPERATION_RELEASES: Partial<Record<OperationType, (trx: Knex.Transaction, operationId: string) => Promise<void>>> = {
  'vps.reinstall': releaseReinstall,
  'orders.create': voidOrderOfAbandonedOperation,
};

export function releaseOf(type: string): ((trx: Knex.Transaction, row: { id: string }) => Promise<void>) | undefined {
  const release = OPERATION_RELEASES[type as OperationType];
  return release ? (trx, row) => release(trx, row.id) : undefined;
}
