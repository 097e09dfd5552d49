import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import { voidOrderOfAbandonedOperation } from '../orders/orders';
import { releaseReinstall } from '../vps/store';
import { releaseDeployment } from '../caas/deployments';
import { releaseBackupClaim } from '../wordpress/backups';
import type { OperationResource } from './contract';

/*
 * The operation types (DECISIONS "Operations"), one entry each: the workflow that runs it, the
 * resource it names, and what its request claims and how that is given back. The start path
 * (start.ts) takes the workflow from here, the orphan sweeper the release; `OperationType` is this
 * table's keys. Adding an operation type is one entry here (and its workflow in workflows/index.ts).
 * The table imports no workflow code, not even its types (the workflows import the activities, which
 * record transitions, which name the types: a loop): start.ts checks that each name is a workflow.
 */

/** What a request claimed in its transaction (`inTransaction` of startOperation), and how it is given back. */
export interface OperationClaims {
  /** In words, for the docs and the log: `the VPS's reinstalling flag and the sealed root password`. */
  what: string;
  /**
   * Gives it back when the operation is closed because no workflow ran it to the end (the orphan
   * sweeper: `not_started`, `interrupted`), in the transaction that closes it. Idempotent: the
   * workflow may have given some of it back already.
   */
  release: (trx: Knex.Transaction, operationId: string) => Promise<void>;
}

export interface OperationTypeEntry {
  /**
   * The workflow that runs it (by its name in workflows/index.ts, which types its input), or null
   * for an operation that finishes inside its request (`recordCompleted`), or whose family is not
   * built yet.
   */
  workflow: string | null;
  /** The `object` of the operation's `resource`, whose id is its `CloudResourceId` in Temporal. */
  resource: string;
  /** What its request claims, when it claims anything beyond the operation row. */
  claims?: OperationClaims;
}

/**
 * In Temporal, every operation's workflow has the operation's id as its workflow id (so a second
 * start of one operation is refused, and an operator finds the run by the id the client holds), and
 * the search attributes `CloudOperationType` (the key), `CloudAccountId` (`cus_<n>`) and
 * `CloudResourceId` (the resource's id): `workflowNaming` below.
 */
export const OPERATION_TYPES = {
  'vps.power': { workflow: 'vpsPowerWorkflow', resource: 'vps' },
  'vps.reinstall': {
    workflow: 'vpsReinstallWorkflow',
    resource: 'vps',
    claims: { what: "the VPS's reinstalling flag and the sealed root password", release: releaseReinstall },
  },
  'vps.backup': { workflow: 'vpsBackupWorkflow', resource: 'vps' },
  'vps.restore': { workflow: 'vpsRestoreWorkflow', resource: 'vps' },
  'orders.create': {
    workflow: 'orderWorkflow',
    resource: 'order',
    claims: { what: 'the pending order, with its promo code use', release: voidOrderOfAbandonedOperation },
  },
  'dbaas.backup': { workflow: 'dbaasBackupWorkflow', resource: 'dbaas' },
  'dbaas.restart': { workflow: null, resource: 'dbaas' },
  'caas.deploy': {
    workflow: 'caasDeployWorkflow',
    resource: 'caas_app',
    claims: { what: 'the pending deployment (one per app at a time)', release: releaseDeployment },
  },
  // Families not built yet (DECISIONS lists their types): no workflow until they are.
  'objectstorage.empty': { workflow: 'objectStorageEmptyWorkflow', resource: 'bucket' },
  'wordpress.backup': {
    workflow: 'wordpressBackupWorkflow',
    resource: 'wordpress',
    claims: { what: 'the running backup row (one per site at a time)', release: releaseBackupClaim },
  },
  'wordpress.restore': { workflow: 'wordpressRestoreWorkflow', resource: 'wordpress' },
  'wordpress.recipe_apply': { workflow: 'wordpressRecipeApplyWorkflow', resource: 'wordpress' },
} as const satisfies Record<string, OperationTypeEntry>;

type Table = typeof OPERATION_TYPES;
export type OperationType = keyof Table;
/** The types that a workflow runs (startOperation takes only these). */
export type StartableOperationType = { [T in OperationType]: Table[T]['workflow'] extends string ? T : never }[OperationType];
/** The name of the workflow of a type that has one. */
export type WorkflowNameOf<T extends OperationType> = Table[T]['workflow'] extends infer W extends string ? W : never;

/** The entry of a type, or undefined for a type the table does not hold (a test-only type, a row from an older release). */
export function operationTypeEntry(type: string): OperationTypeEntry | undefined {
  return Object.hasOwn(OPERATION_TYPES, type) ? (OPERATION_TYPES as Record<string, OperationTypeEntry>)[type] : undefined;
}

/** How the orphan sweeper gives back what an operation's request claimed, if it claimed anything. */
export function releaseOf(type: string): ((trx: Knex.Transaction, row: { id: string }) => Promise<void>) | undefined {
  const claims = operationTypeEntry(type)?.claims;
  return claims ? (trx, row) => claims.release(trx, row.id) : undefined;
}

/** Temporal's names for one operation's run: its workflow id, search attributes and memo. */
export function workflowNaming(op: { id: string; type: string; accountId: number; resource: OperationResource | null; credentialId: string | null }) {
  const account = formatId('cus', op.accountId);
  return {
    workflowId: op.id,
    searchAttributes: { operationType: op.type, accountId: account, resourceId: op.resource?.id ?? null },
    memo: {
      operation_type: op.type,
      account,
      resource: op.resource ? `${op.resource.object} ${op.resource.id}` : null,
      credential: op.credentialId,
    },
  };
}
