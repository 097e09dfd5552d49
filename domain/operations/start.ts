import type { Knex } from 'knex';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import { newUlidId } from '../../common/ids';
import type { Logger } from '../../common/logger';
import { preparedQuery } from '../../db/knex';
import type { TemporalGateway } from '../../infra/temporal';
import type * as Workflows from '../../workflows';
import { backendUnavailable } from '../errors';
import { bindOperationToIdempotencyKey, idempotencyClaimed } from '../idempotency';
import type { Principal } from '../principal';
import { serviceGuard } from '../services';
import { presentOperation, type OperationInput, type OperationResource, type OperationRow, type OperationView } from './contract';
import { startStatement, type LockedRows, type OperationGuard } from './guards';
import { operationTypeEntry, workflowNaming, type StartableOperationType, type WorkflowNameOf } from './types';

export type { StartableOperationType } from './types';

type WorkflowModule = typeof Workflows;
/** Every workflow of workflows/index.ts whose input names its operation. */
export type OperationWorkflow = {
  [K in keyof WorkflowModule]: WorkflowModule[K] extends (input: infer I) => Promise<unknown> ? (I extends OperationInput ? K : never) : never;
}[keyof WorkflowModule];
/** A workflow's input without `operationId` (the operation service adds it). */
export type WorkflowInput<W extends OperationWorkflow> = Omit<Parameters<WorkflowModule[W]>[0], 'operationId'>;
/**
 * The workflow of an operation type (OPERATION_TYPES names it; the table imports no workflow code,
 * so the name is tied to its function here).
 */
export type WorkflowOf<T extends StartableOperationType> = WorkflowNameOf<T> & OperationWorkflow;
/** The input of the workflow of an operation type, without `operationId`. */
export type OperationInputOf<T extends StartableOperationType> = WorkflowInput<WorkflowOf<T>>;
/** Compiles only while every workflow OPERATION_TYPES names is exported by workflows/index.ts and takes an operation's input. */
export type TableWorkflowsExist = Assert<WorkflowNameOf<StartableOperationType>, OperationWorkflow>;
type Assert<T extends U, U> = T;

/**
 * What starting an operation's workflow takes beyond the row's own columns, stored in the row
 * (`operations.workflow_start`) so that the committed row is the intent: whoever finds it without
 * its workflow starts it (OperationService.startFromRow). `input` holds no secret in clear.
 */
interface WorkflowStart {
  workflow: string;
  input: unknown;
}

function workflowStart(workflow: string, input: unknown): WorkflowStart {
  return { workflow, input };
}

/**
 * The workflow of an operation type: the table's (types.ts). Only a type the table does not hold (a
 * test-only one) names its own; naming another than the table's, or starting a type that finishes
 * inside its request, is a programming error.
 */
function workflowOf(type: string, named: string | undefined, resource: OperationResource | null | undefined): string {
  const entry = operationTypeEntry(type);
  if (!entry) {
    if (named) return named;
    throw new Error(`operation type ${type} is not in OPERATION_TYPES (domain/operations/types.ts)`);
  }
  if (!entry.workflow) throw new Error(`operation type ${type} has no workflow: it finishes inside its request (recordCompleted)`);
  if (named && named !== entry.workflow) throw new Error(`operation type ${type} runs ${entry.workflow}, not ${named}`);
  if (resource && resource.object !== entry.resource) throw new Error(`operation type ${type} is about a ${entry.resource}, not a ${resource.object}`);
  return entry.workflow;
}

/** Everything one start of an operation's workflow passes to Temporal. */
interface WorkflowStartOf {
  workflow: string;
  args: unknown;
  type: string;
  accountId: number;
  resource: OperationResource | null;
  credentialId: string | null;
}

export interface StartOperationInput<T extends StartableOperationType = StartableOperationType> {
  principal: Principal;
  /** The operation type: its workflow, and so the input's type, come from OPERATION_TYPES (types.ts). */
  type: T;
  /** Only for a test-only type, which the table does not hold: the workflow (by its name in workflows/index.ts). */
  workflow?: WorkflowOf<T>;
  /**
   * Workflow input beyond `operationId` (never secrets in clear: see docs/architecture.md), or a
   * function of the rows the guards locked, for a start that reads nothing before its statement.
   */
  input: OperationInputOf<T> | ((locked: LockedRows) => OperationInputOf<T>);
  resource?: OperationResource | null;
  serviceId?: number | null;
  /**
   * With `serviceId`, for a start that has not read the service: the service guard also checks
   * that the service is the principal's account's, of this family (404 otherwise), and that this
   * capability is true (400), before its billing status (409), as findVisibleService and
   * requireCapability would have.
   */
  serviceChecks?: { family: string; capability: string; /** What the request does, for the 409's message (`a power action`). */ action: string };
  initialStatus?: 'pending' | 'running';
  /**
   * Rows whose state must still allow the operation when its row is written: locked and checked in
   * the same statement (e.g. the VPS is not being reinstalled). The service's row (`service`) is
   * always the first of them when `serviceId` is set.
   */
  guards?: OperationGuard[];
  /** Runs inside the transaction that creates the operation row (e.g. to flag a VPS as reinstalling). */
  inTransaction?: (trx: Knex.Transaction, operationId: string) => Promise<void>;
}

/**
 * One mechanism for every asynchronous endpoint: create the operation row (its guards checked in
 * the same statement), start the workflow whose id is the operation id, answer 202 with the operation.
 */
export class OperationStarts {
  private readonly pendingStarts = new Set<Promise<void>>();

  constructor(
    private readonly db: Knex,
    private readonly temporal: TemporalGateway,
    private readonly opts: { startTimeoutMs: number; logger: Logger },
  ) {}

  async start<T extends StartableOperationType>(input: StartOperationInput<T>): Promise<OperationView> {
    const id = newUlidId('op');
    const workflow = workflowOf(input.type, input.workflow, input.resource);
    const guards = [
      ...(input.serviceId
        ? [
            serviceGuard(
              input.serviceId,
              input.serviceChecks?.action ?? `a ${input.type} operation`,
              input.serviceChecks && { accountId: input.principal.accountId, ...input.serviceChecks },
            ),
          ]
        : []),
      ...(input.guards ?? []),
    ];
    const statement = startStatement(guards);
    const values = [
      id,
      input.principal.accountId,
      input.type,
      input.initialStatus ?? 'pending',
      input.resource?.object ?? null,
      input.resource?.id ?? null,
      input.serviceId ?? null,
      input.principal.credentialId,
      // The row is the intent: what starting its workflow takes goes in with it (a function of the
      // locked rows is written as soon as it is known, below).
      typeof input.input === 'function' ? null : JSON.stringify(workflowStart(workflow, input.input)),
      ...statement.values,
    ];
    let args = input.input as OperationInputOf<T>;
    const insert = async (conn?: Knex.Transaction): Promise<OperationRow> => {
      const [result] = await preparedQuery<Record<string, unknown>>(conn ?? this.db, statement.name, statement.text, values);
      const rows = guards.map((_, i) => (result[`g${i}`] as Record<string, unknown> | null) ?? null);
      if (!result.op) {
        guards.forEach((g, i) => g.refuse(rows[i]));
        throw new Error(`operation ${id} was refused by its guards, and none said why`);
      }
      // (A function that throws here leaves an orphan row at worst, which the orphan sweeper closes.)
      if (typeof input.input === 'function') {
        args = input.input(Object.fromEntries(guards.map((g, i) => [g.name, rows[i]])));
        // Outside a transaction, a process that dies before this leaves a row without it, that no
        // client was told about: the orphan sweeper closes it (`not_started`).
        await (conn ?? this.db)('operations')
          .where({ id })
          .update({ workflow_start: JSON.stringify(workflowStart(workflow, args)) });
      }
      return result.op as OperationRow;
    };
    // Without a hook or an Idempotency-Key to bind, the row is one statement on its own; otherwise
    // the same statement opens the transaction that the binding and the hook share.
    const row =
      !input.inTransaction && !idempotencyClaimed()
        ? await insert()
        : await this.db.transaction(async (trx) => {
            const inserted = await insert(trx);
            await bindOperationToIdempotencyKey(trx, id);
            if (input.inTransaction) await input.inTransaction(trx, id);
            return inserted;
          });
    try {
      await this.startWorkflow(id, {
        workflow,
        args,
        type: input.type,
        accountId: input.principal.accountId,
        resource: input.resource ?? null,
        credentialId: input.principal.credentialId,
      });
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
  private async startWorkflow(id: string, start: WorkflowStartOf): Promise<void> {
    const ms = this.opts.startTimeoutMs;
    const naming = workflowNaming({ id, type: start.type, accountId: start.accountId, resource: start.resource, credentialId: start.credentialId });
    const started = this.temporal.withDeadline(ms, () =>
      this.temporal.client.workflow.start(start.workflow, {
        workflowId: naming.workflowId,
        taskQueue: this.temporal.taskQueue,
        args: [{ operationId: id, ...(start.args as object) }],
        // The operation's id names one run, ever: a start from its row after one that ran (and was
        // purged from its row's view) is refused rather than run twice.
        workflowIdReusePolicy: 'REJECT_DUPLICATE',
        typedSearchAttributes: this.temporal.searchAttributes(naming.searchAttributes),
        memo: naming.memo,
      }),
    );
    // Settled below, or left behind when the timer wins: kept until it settles, so that closing the
    // connection (drain) does not pull it out from under the client's pending retries.
    const settled = started.then(
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
      await Promise.race([started, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Starts the workflow of an unfinished operation from its row, for whoever finds the row without
   * its workflow (the orphan sweeper, after a process died between commit and start). The workflow
   * id is the operation id, so a start that happened meanwhile is not repeated: Temporal refuses the
   * second (WorkflowExecutionAlreadyStartedError), which counts as started. False when the row
   * cannot say how to start (written before `workflow_start`, or by a process that died before its
   * input was known) or is no longer unfinished: such a row is closed instead.
   */
  async startFromRow(id: string): Promise<boolean> {
    const row = await this.db('operations')
      .where({ id })
      .whereIn('status', ['pending', 'running'])
      .first('type', 'account_id', 'resource_object', 'resource_id', 'credential_id', 'workflow_start');
    const start = row?.workflow_start as WorkflowStart | null | undefined;
    if (!row || !start?.workflow) return false;
    try {
      await this.startWorkflow(id, {
        workflow: start.workflow,
        args: start.input,
        type: row.type,
        accountId: Number(row.account_id),
        resource: row.resource_object && row.resource_id ? { object: row.resource_object, id: row.resource_id } : null,
        credentialId: row.credential_id,
      });
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError)) throw err;
    }
    return true;
  }

  /** Waits (at most `maxMs`) for workflow starts still in flight, before the Temporal connection closes. */
  async drain(maxMs = 10_000): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(this.pendingStarts), new Promise((resolve) => (timer = setTimeout(resolve, maxMs)))]);
    clearTimeout(timer);
  }
}
