import { proxyLocalActivities } from '@temporalio/workflow';
import type { HostActivities } from '../../activities/hosts/activities';
import type { SealedHostCall } from '../../providers/host-routing';
import type { WireOutcome } from '../../providers/host-wire';

/**
 * One synchronous provider call on a resource's host (docs/hosts.md "Synchronous calls"): started on
 * the host's task queue `host-<name>` by the caller (infra/host-calls.ts), with an id that names the
 * host, the call and the service. A local activity, so the call runs in the workflow task's worker,
 * on that host, without a second round trip through the server.
 */
export async function hostCallWorkflow(call: SealedHostCall): Promise<WireOutcome> {
  // One attempt, within the caller's bound: the caller waits for this call (a request is open) and
  // decides what a failure means.
  const { hostProviderCall } = proxyLocalActivities<HostActivities>({ startToCloseTimeout: call.timeoutMs, retry: { maximumAttempts: 1 } });
  return hostProviderCall(call);
}
