import { OperationTracker, type OperationInput } from '../common/operation';
import type { BackupMode } from '../../activities/vps.activities';
import { calls, StepFailed, upstreamError, waits } from './vps-activities';

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
  const op = new OperationTracker(input.operationId);
  let result: Record<string, unknown> = { backup_id: null, mode: input.mode };
  try {
    await op.update({ status: 'running', progress: 0, result });
    const task = await calls.vpsStartBackup({ vmid: input.vmid, mode: input.mode, key: `${input.operationId}:backup` });
    result = { ...result, backup_id: task.volid };
    await op.progress(20, result);
    const done = await waits.vpsAwaitTask({ upid: task.upid });
    if (done.status === 'error') throw new StepFailed('backup', `the backup task failed: ${done.error ?? 'no detail'}`);
    await op.progress(80, result);
    const listed = await waits.vpsAwaitBackupListed({ vmid: input.vmid, volid: task.volid });
    result = { ...result, ...listed };
  } catch (err) {
    await op.fail(upstreamError(err, 'backup'), result);
    return;
  }
  await op.succeed(result);
}
