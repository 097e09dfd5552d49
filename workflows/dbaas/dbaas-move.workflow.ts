import { CancellationScope, workflowInfo } from '@temporalio/workflow';
import type { DbaasMoveActivities, DbaasMovePlan } from '../../activities/dbaas/move.activities';
import { familyActivitiesOnHost, onHost, placement } from '../kit/hosts';
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
/** The copy and the build: long, beating, retried a few times. */
const COPY = {
  startToCloseTimeout: '6 hours',
  heartbeatTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 3 },
} as const;

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
  const transferId = `${workflowInfo().workflowId}:${workflowInfo().runId}`;
  let plan: DbaasMovePlan | null = null;
  let switched = false;
  try {
    // Marks the service moving: from here on, whatever happens, the move ends (switched, or undone).
    plan = await bookkeeping.dbaasMovePlan(input);
    const { from, to, instance } = plan;
    const onFrom = familyActivitiesOnHost<DbaasMoveActivities>(from);
    const onTo = onHost<DbaasMoveActivities>(to, { ...COPY, scheduleToStartTimeout: TARGET_TAKES_WORK_WITHIN });
    const databases = await onFrom.calls.dbaasDatabasesHere({ instance });
    // The copy and the build are not cut short by a cancel: the undo must not run beside them.
    const copied = await CancellationScope.nonCancellable(() => onHost<DbaasMoveActivities>(from, COPY).dbaasExport({ instance, transferId }));
    const connection = await CancellationScope.nonCancellable(() => onTo.dbaasImport({ serviceId: input.serviceId, transferId, databases }));
    await CancellationScope.nonCancellable(async () => {
      await bookkeeping.dbaasSwitchHost({ serviceId: input.serviceId, to, connection });
      switched = true;
      await bookkeeping.dbaasDropTransfer({ transferId });
      await onFrom.bookkeeping.dbaasDestroyHere({ instance });
    });
    return { from, to, host: connection.host, port: connection.port, bytes: copied.bytes };
  } catch (err) {
    if (!switched && plan) {
      const { from, to, instance } = plan;
      // Calls about it are taken again first, then it serves again where it was; then what the new
      // host may hold, and the transfer.
      await CancellationScope.nonCancellable(async () => {
        await placement.endServiceMove({ serviceId: input.serviceId });
        await familyActivitiesOnHost<DbaasMoveActivities>(from).bookkeeping.dbaasRestartHere({ instance });
        await bookkeeping.dbaasDropTransfer({ transferId });
        await familyActivitiesOnHost<DbaasMoveActivities>(to).bookkeeping.dbaasDiscard({ instance });
      });
    }
    throw err;
  }
}
