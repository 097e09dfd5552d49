import { patched } from '@temporalio/workflow';
import type { DbaasActivities } from '../../activities/dbaas/activities';
import { familyActivitiesOnHost, placement, whenHostAnswers, type HostWait } from '../kit/hosts';
import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { calls, DATABASE_INSTANCE, waits } from './steps';

const BACKS_UP_ON_ITS_HOST = 'dbaas-backup-on-the-instance-host';

export interface DbaasBackupInput extends OperationInput {
  serviceId: number;
  /** The provider's name of the service's instance. */
  instance: string;
}

/**
 * `dbaas.backup`: starts a dump with the engine's own tool and resolves when the backup is on the
 * instance's list as completed (with its size), not when the dump is accepted.
 */
export async function dbaasBackupWorkflow(input: DbaasBackupInput): Promise<void> {
  const result: Record<string, unknown> = { backup_id: null };
  await runOperation(input, { backend: DATABASE_INSTANCE, step: 'backup', result }, async (run) => {
    // The dump runs on the instance's host (docs/hosts.md); runs from before this patch ran it anywhere.
    const host = patched(BACKS_UP_ON_ITS_HOST) ? (await placement.hostOfService(input.serviceId)).host : null;
    const on = host ? familyActivitiesOnHost<DbaasActivities>(host) : { calls, waits };
    const tell = (wait: HostWait | null) => run.tracker.update({ result: wait ? { ...run.result, waiting: wait } : run.result });
    const started = await whenHostAnswers(host, tell, () => on.calls.dbaasStartBackup({ instance: input.instance, key: `${input.operationId}:backup` }));
    run.result = { ...run.result, backup_id: started.backup_id };
    await run.progress(20);
    const done = await whenHostAnswers(host, tell, () => on.waits.dbaasAwaitBackup({ instance: input.instance, backupId: started.backup_id }));
    if (done.status !== 'completed') throw new StepFailed('backup', `the dump of backup ${started.backup_id} did not complete`);
    return { backup_id: done.backup_id, size_bytes: done.size_bytes, created_at: done.created_at };
  });
}
