import { CancellationScope, workflowInfo } from '@temporalio/workflow';
import type { DbaasMoveActivities } from '../../activities/dbaas/move.activities';
import { familyActivitiesOnHost } from '../kit/hosts';
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

/**
 * `dbaasMoveWorkflow`, an operator's move of a database instance to another host (docs/hosts.md
 * "Moving"), started by `npm run hosts -- move svc_<n>` with workflow id `move-svc_<n>-to-<host>`.
 * Clients cannot reach the instance from the freeze to the switch (its sessions end at the freeze),
 * so no write is lost; afterwards they reach it at its new address, with its new host's CA.
 *
 * freeze (old host) -> dump into host_transfers (old host) -> build and restore, every database
 * checked (new host) -> switch placement and connection details -> destroy the old copy (old host,
 * waiting for it if it is down). A failure before the switch thaws the old instance and discards the
 * new copy, so the instance stays where it was, serving again.
 */
export async function dbaasMoveWorkflow(input: DbaasMoveInput): Promise<DbaasMoveResult> {
  const plan = await bookkeeping.dbaasMovePlan(input);
  const transferId = `${workflowInfo().workflowId}:${workflowInfo().runId}`;
  const from = familyActivitiesOnHost<DbaasMoveActivities>(plan.from);
  const to = familyActivitiesOnHost<DbaasMoveActivities>(plan.to);
  let built = false;
  try {
    await from.calls.dbaasFreeze({ instance: plan.instance });
    const dump = await from.waits.dbaasExport({ instance: plan.instance, transferId });
    built = true;
    const connection = await to.waits.dbaasImport({ serviceId: input.serviceId, transferId, databases: dump.databases });
    await bookkeeping.dbaasSwitchHost({ serviceId: input.serviceId, to: plan.to, connection });
    await CancellationScope.nonCancellable(() => bookkeeping.dbaasDropTransfer({ transferId }));
    await from.bookkeeping.dbaasDestroyHere({ instance: plan.instance });
    return { from: plan.from, to: plan.to, host: connection.host, port: connection.port, bytes: dump.bytes };
  } catch (err) {
    // Not switched: the instance stays on its host, serving again; the new host keeps nothing.
    await CancellationScope.nonCancellable(async () => {
      if (built) await to.bookkeeping.dbaasDiscard({ instance: plan.instance });
      await from.bookkeeping.dbaasThaw({ instance: plan.instance });
      await bookkeeping.dbaasDropTransfer({ transferId });
    });
    throw err;
  }
}
