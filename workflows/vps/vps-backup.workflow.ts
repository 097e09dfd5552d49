import type { BackupMode } from '../../activities/vps/activities';
import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { calls, HYPERVISOR, waits } from './steps';

export interface VpsBackupInput extends OperationInput {
  serviceId: number;
  vmid: number;
  mode: BackupMode;
}

/**
 * `vps.backup`: queues the backup task and resolves when the new backup appears in the machine's
 * backup list (with its final size), not when the task is accepted.
 */
export async function vpsBackupWorkflow(input: VpsBackupInput): Promise<void> {
  const result: Record<string, unknown> = { backup_id: null, mode: input.mode };
  await runOperation(input, { backend: HYPERVISOR, step: 'backup', result }, async (run) => {
    const task = await calls.vpsStartBackup({ vmid: input.vmid, mode: input.mode, key: `${input.operationId}:backup` });
    run.result = { ...run.result, backup_id: task.volid };
    await run.progress(20);
    const done = await waits.vpsAwaitTask({ upid: task.upid });
    if (done.status === 'error') throw new StepFailed('backup', `the backup task failed: ${done.error ?? 'no detail'}`);
    await run.progress(80);
    const listed = await waits.vpsAwaitBackupListed({ vmid: input.vmid, volid: task.volid });
    return { ...run.result, ...listed };
  });
}
