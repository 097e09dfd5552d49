import { patched, proxyActivities } from '@temporalio/workflow';
import type { ServiceActivities } from '../../activities/services/activities';
import { onHost, placement } from '../kit/hosts';

export interface ServiceTeardownInput {
  /** Numeric id of the terminated service (`svc_<n>`). */
  serviceId: number;
}

/** Keeps trying (a backend outage only delays a teardown) with a growing pause. */
const TEARDOWN = {
  startToCloseTimeout: '5 minutes',
  retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '5 minutes' },
} as const;
const { deprovisionService } = proxyActivities<ServiceActivities>(TEARDOWN);

/** Runs started since this patch tear a placed service down on its host (docs/hosts.md); a down host delays it until it is back. */
const TEARS_DOWN_ON_ITS_HOST = 'teardown-on-the-service-host';

/**
 * Tears down what a terminated service's provisioner built (a machine, a zone, a database
 * instance, a balancer), on the host its server lives on when it has one. Started by the worker's
 * teardown sweeper with workflow id `teardown-svc_<n>`, so an operator finds it by the service id in
 * the Temporal UI.
 */
export async function serviceTeardownWorkflow(input: ServiceTeardownInput): Promise<void> {
  if (!patched(TEARS_DOWN_ON_ITS_HOST)) {
    await deprovisionService({ serviceId: input.serviceId });
    return;
  }
  const { host } = await placement.hostOfService(input.serviceId);
  await onHost<ServiceActivities>(host, TEARDOWN).deprovisionService({ serviceId: input.serviceId });
}
