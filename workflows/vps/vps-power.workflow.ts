import { OperationTracker, type OperationInput } from '../common/operation';
import { powerTo, upstreamError } from './vps-activities';

export type VpsPowerAction = 'start' | 'stop' | 'reboot';

export interface VpsPowerInput extends OperationInput {
  serviceId: number;
  vmid: number;
  action: VpsPowerAction;
}

/**
 * `vps.power`: resolves when the machine reaches the requested state. `reboot` is stop, wait until
 * stopped, start, and ends `running` (the guest also picks up a pending qemu rename then).
 */
export async function vpsPowerWorkflow(input: VpsPowerInput): Promise<void> {
  const op = new OperationTracker(input.operationId);
  const result = { action: input.action, state: null as string | null };
  let step: string = input.action === 'reboot' ? 'stop' : input.action;
  try {
    await op.update({ status: 'running', progress: 0, result });
    if (input.action === 'reboot') {
      result.state = await powerTo(input.vmid, 'stop', `${input.operationId}:stop`, step);
      await op.progress(50, result);
      step = 'start';
      result.state = await powerTo(input.vmid, 'start', `${input.operationId}:start`, step);
    } else {
      result.state = await powerTo(input.vmid, input.action, `${input.operationId}:${input.action}`, step);
    }
  } catch (err) {
    await op.fail(upstreamError(err, step), result);
    return;
  }
  await op.succeed(result);
}
