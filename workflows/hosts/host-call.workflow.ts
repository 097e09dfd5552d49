import { proxyLocalActivities } from '@temporalio/workflow';
import type { HostActivities } from '../../activities/hosts/activities';
import type { HostCallRequest } from '../../providers/host-routing';
import type { WireOutcome } from '../../providers/host-wire';

// One attempt: the caller waits for this call (a request is open) and decides what a failure means.
const { hostProviderCall } = proxyLocalActivities<HostActivities>({ startToCloseTimeout: '5 minutes', retry: { maximumAttempts: 1 } });

/**
 * One synchronous provider call on a resource's host (docs/hosts.md "Synchronous calls"): started on
 * the host's task queue `host-<name>` by the caller (infra/host-calls.ts), with an id that names the
 * host, the call and the service. A local activity, so the call runs in the workflow task's worker,
 * on that host, without a second round trip through the server.
 */
export async function hostCallWorkflow(request: HostCallRequest): Promise<WireOutcome> {
  return hostProviderCall(request);
}
