import { proxyActivities } from '@temporalio/workflow';
import type { ServiceActivities } from '../../activities/services/activities';

export interface ServiceTeardownInput {
  /** Numeric id of the terminated service (`svc_<n>`). */
  serviceId: number;
}

/** Keeps trying (a backend outage only delays a teardown) with a growing pause. */
const { deprovisionService } = proxyActivities<ServiceActivities>({
  startToCloseTimeout: '5 minutes',
  retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '5 minutes' },
});

/**
 * Tears down what a terminated service's provisioner built (a machine, a zone, a database
 * instance, a balancer). Started by the worker's teardown sweeper with workflow id
 * `teardown-svc_<n>`, so an operator finds it by the service id in the Temporal UI.
 */
export async function serviceTeardownWorkflow(input: ServiceTeardownInput): Promise<void> {
  await deprovisionService({ serviceId: input.serviceId });
}
