import { CancellationScope, workflowInfo } from '@temporalio/workflow';
import type { DbaasMoveActivities } from '../../activities/dbaas/move.activities';
import { familyActivitiesOnHost, onHost } from '../kit/hosts';
import { familyActivities } from '../kit/proxies';

export interface DbaasMoveInput {
  serviceId: number;
  /** The host to move to; the one placement would choose (its own host left out) when absent. */
  to?: string | null;
}

export interface DbaasMoveResult {
  from: string;
  to: string;
  /** Where clients reach the instance now (its new host's range). */
  host: string;
  port: number;
  bytes: number;
}

const { bookkeeping } = familyActivities<DbaasMoveActivities>();
/** The new host must take its work within this, or the move is undone (the instance is stopped meanwhile). */
const TARGET_TAKES_WORK_WITHIN = '2 minutes';

/**
 * `dbaasMoveWorkflow`, an operator's move of a database instance to another host (docs/hosts.md
 * "Moving"), started by `npm run hosts -- move svc_<n>` with workflow id `move-svc_<n>`.
 *
 * mark moving (calls about it answer 503) -> list its databases, stop it and copy its files (data
 * and backups) into host_transfers (old host) -> build the same instance there and put the files in,
 * every database checked (new host) -> switch placement and connection details -> destroy the old
 * copy (old host, waiting for it if it is down). Clients cannot reach the instance from the stop to
 * the switch, so no write is lost; afterwards they reach it at its new address with its new host's CA.
 * A failure (or a cancel) before the switch starts it again where it was and discards the new copy;
 * after the switch nothing is undone.
 */
export async function dbaasMoveWorkflow(input: DbaasMoveInput): Promise<DbaasMoveResult> {
  const plan = await bookkeeping.dbaasMovePlan(input);
  const transferId = `${workflowInfo().workflowId}:${workflowInfo().runId}`;
  const from = familyActivitiesOnHost<DbaasMoveActivities>(plan.from);
  const toCalls = onHost<DbaasMoveActivities>(plan.to, {
    startToCloseTimeout: '6 hours',
    heartbeatTimeout: '30 seconds',
    scheduleToStartTimeout: TARGET_TAKES_WORK_WITHIN,
    retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 3 },
  });
  const to = familyActivitiesOnHost<DbaasMoveActivities>(plan.to);
  let switched = false;
  try {
    const databases = await from.calls.dbaasDatabasesHere({ instance: plan.instance });
    const copied = await onHost<DbaasMoveActivities>(plan.from, {
      startToCloseTimeout: '6 hours',
      heartbeatTimeout: '30 seconds',
      retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 3 },
    }).dbaasExport({ instance: plan.instance, transferId });
    const connection = await toCalls.dbaasImport({ serviceId: input.serviceId, transferId, databases });
    await bookkeeping.dbaasSwitchHost({ serviceId: input.serviceId, to: plan.to, connection });
    switched = true;
    await CancellationScope.nonCancellable(async () => {
      await bookkeeping.dbaasDropTransfer({ transferId });
      await from.bookkeeping.dbaasDestroyHere({ instance: plan.instance });
    });
    return { from: plan.from, to: plan.to, host: connection.host, port: connection.port, bytes: copied.bytes };
  } catch (err) {
    if (!switched) {
      // Serving again where it was first; then what the new host may hold, and the transfer.
      await CancellationScope.nonCancellable(async () => {
        await from.bookkeeping.dbaasRestartHere({ instance: plan.instance });
        await bookkeeping.dbaasEndMove({ serviceId: input.serviceId });
        await bookkeeping.dbaasDropTransfer({ transferId });
        await to.bookkeeping.dbaasDiscard({ instance: plan.instance });
      });
    }
    throw err;
  }
}
