import type { OperationInput } from '../kit/operation';
import { runOperation } from '../kit/steps';
import { HYPERVISOR, powerTo } from './steps';

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
  const result = { action: input.action, state: null as string | null };
  const first = input.action === 'reboot' ? 'stop' : input.action;
  await runOperation(input, { backend: HYPERVISOR, step: first, result }, async (run) => {
    if (input.action === 'reboot') {
      result.state = await powerTo(input.vmid, 'stop', `${input.operationId}:stop`, run.step);
      await run.progress(50);
      await run.enter('start');
      result.state = await powerTo(input.vmid, 'start', `${input.operationId}:start`, run.step);
    } else {
      result.state = await powerTo(input.vmid, input.action, `${input.operationId}:${input.action}`, run.step);
    }
  });
}
