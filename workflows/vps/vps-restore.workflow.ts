import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { calls, HYPERVISOR, powerTo, waits } from './steps';

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
  const result = { backup_id: input.backupId, state: null as string | null };
  await runOperation(input, { backend: HYPERVISOR, step: 'power_off', result }, async (run) => {
    result.state = await run.step('power_off', null, () => powerTo(input.vmid, 'stop', `${input.operationId}:stop`, 'power_off'));
    await run.step('restore', 30, async () => {
      const task = await calls.vpsStartRestore({ vmid: input.vmid, volid: input.backupId, key: `${input.operationId}:restore` });
      await run.progress(40);
      const done = await waits.vpsAwaitTask({ upid: task.upid });
      if (done.status === 'error') throw new StepFailed('restore', `the restore task failed: ${done.error ?? 'no detail'}`);
    });
    result.state = 'stopped';
  });
}
