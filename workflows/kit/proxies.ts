import { proxyActivities, type ActivityInterfaceFor, type RetryPolicy } from '@temporalio/workflow';

/**
 * The three kinds of activity call a family's workflows make, with the same timeouts and retries
 * everywhere. Activities are imported as types only: `familyActivities<VpsActivities>()`.
 */
const retry: RetryPolicy = { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 10 };

export function familyActivities<A extends object>(
  /** Another task queue than the workflow's: a host's (`hostQueue(name)`, workflows/kit/hosts.ts). */
  where: { taskQueue?: string } = {},
): {
  /** Single calls to the backend or the database: retried a bounded number of times. */
  calls: ActivityInterfaceFor<A>;
  /** Bookkeeping in the control plane's own database that must happen: retried until it does. */
  bookkeeping: ActivityInterfaceFor<A>;
  /** Waits that poll the backend; the heartbeat hands a dead worker's wait to another worker. */
  waits: ActivityInterfaceFor<A>;
} {
  return {
    calls: proxyActivities<A>({ ...where, startToCloseTimeout: '1 minute', retry }),
    bookkeeping: proxyActivities<A>({ ...where, startToCloseTimeout: '30 seconds', retry: { initialInterval: '1 second', maximumInterval: '30 seconds' } }),
    waits: proxyActivities<A>({ ...where, startToCloseTimeout: '15 minutes', heartbeatTimeout: '5 seconds', retry: { ...retry, maximumAttempts: 5 } }),
  };
}
