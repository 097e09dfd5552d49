import { ActivityFailure, ApplicationFailure, proxyActivities, type RetryPolicy } from '@temporalio/workflow';
import type { VpsActivities } from '../../activities/vps.activities';
import type { OperationError } from '../common/operation';
import type { MachineState, PowerTaskKind } from '../../activities/vps.activities';

/**
 * What the VPS workflows share: activity proxies and the way a failed step becomes the
 * operation's `error` (`upstream_error` with the step's name).
 */
const retry: RetryPolicy = { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 10 };

/** Single calls to the hypervisor or the database. */
export const calls = proxyActivities<VpsActivities>({ startToCloseTimeout: '1 minute', retry });

/** Bookkeeping in the control plane's own database that must happen: retried until it does. */
export const bookkeeping = proxyActivities<VpsActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/** Waits that poll the hypervisor; the heartbeat hands a dead worker's wait to another worker. */
export const waits = proxyActivities<VpsActivities>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '5 seconds',
  retry: { ...retry, maximumAttempts: 5 },
});

/** A step that ended in failure on the hypervisor side. */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    message: string,
  ) {
    super(message);
    this.name = 'StepFailed';
  }
}

export function upstreamError(err: unknown, step: string): OperationError {
  if (err instanceof StepFailed) return { code: 'upstream_error', message: err.message, step: err.step };
  let message = err instanceof Error ? err.message : String(err);
  if (err instanceof ActivityFailure) {
    const cause = err.cause;
    message = cause instanceof ApplicationFailure || cause instanceof Error ? cause.message : message;
  }
  return { code: 'upstream_error', message: `The hypervisor did not complete this step: ${message}`, step };
}

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
