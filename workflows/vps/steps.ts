import type { MachineState, PowerTaskKind, VpsActivities } from '../../activities/vps/activities';
import { familyActivities } from '../kit/proxies';
import { StepFailed } from '../kit/steps';

/** What the VPS workflows share: their activity proxies, the backend's name, and the power step. */
export const { calls, bookkeeping, waits } = familyActivities<VpsActivities>();

/** Named in failure messages ("The hypervisor did not complete this step: ..."). */
export const HYPERVISOR = 'hypervisor';

/**
 * Orders a start or stop and resolves once the machine really is in the target state, not when
 * the order is accepted. `key` makes the order idempotent.
 */
export async function powerTo(vmid: number, action: PowerTaskKind, key: string, step: string): Promise<MachineState> {
  const task = await calls.vpsIssuePower({ vmid, action, key });
  const done = await waits.vpsAwaitTask({ upid: task.upid });
  if (done.status === 'error') throw new StepFailed(step, `the ${action} task failed: ${done.error ?? 'no detail'}`);
  const target = action === 'start' ? 'running' : 'stopped';
  const state = await waits.vpsAwaitState({ vmid, state: target });
  if (state !== target) throw new StepFailed(step, `the machine is ${state}, not ${target}: another action changed it meanwhile`);
  return state;
}
