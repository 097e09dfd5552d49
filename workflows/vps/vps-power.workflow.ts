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
    // The first step's progress (0) is the one recorded with `running`.
    result.state = await run.step(first, null, () => powerTo(input.vmid, first, `${input.operationId}:${first}`, first));
    if (input.action === 'reboot') result.state = await run.step('start', 50, () => powerTo(input.vmid, 'start', `${input.operationId}:start`, 'start'));
  });
}
