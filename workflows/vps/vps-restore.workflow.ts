import { OperationTracker, type OperationInput } from '../common/operation';
import { calls, powerTo, StepFailed, upstreamError, waits } from './vps-activities';

export interface VpsRestoreInput extends OperationInput {
  serviceId: number;
  vmid: number;
  /** Checked by the request to belong to this VPS. */
  backupId: string;
}

/**
 * `vps.restore`: powers the machine off, then overwrites its whole disk with the backup. The
 * machine is left stopped; start it with a power operation.
 */
export async function vpsRestoreWorkflow(input: VpsRestoreInput): Promise<void> {
  const op = new OperationTracker(input.operationId);
  const result = { backup_id: input.backupId, state: null as string | null };
  let step = 'power_off';
  try {
    await op.update({ status: 'running', progress: 0, result });
    result.state = await powerTo(input.vmid, 'stop', `${input.operationId}:stop`, step);
    await op.progress(30, result);
    step = 'restore';
    const task = await calls.vpsStartRestore({ vmid: input.vmid, volid: input.backupId, key: `${input.operationId}:restore` });
    await op.progress(40, result);
    const done = await waits.vpsAwaitTask({ upid: task.upid });
    if (done.status === 'error') throw new StepFailed('restore', `the restore task failed: ${done.error ?? 'no detail'}`);
    result.state = 'stopped';
  } catch (err) {
    await op.fail(upstreamError(err, step), result);
    return;
  }
  await op.succeed(result);
}
