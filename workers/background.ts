import type { ActivityDeps } from '../activities';
import { EventDispatcher } from '../domain/webhooks/dispatcher';
import { SimulatedBillingClock } from '../providers/simulator/billing-clock';
import { BillingSimulator } from '../providers/simulator/billing.simulator';

/**
 * Loops that run in the worker process beside the Temporal worker (started before it polls, stopped
 * after it drains). Families add theirs here.
 */
export interface BackgroundService {
  name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createBackgroundServices(deps: ActivityDeps): BackgroundService[] {
  return [
    // Webhooks: LISTEN cloud_events + periodic sweep, fans events out to delivery workflows.
    new EventDispatcher(deps),
    // Billing (simulator only; a real billing system runs its own): carries out due cancellations.
    ...(deps.providers.billing instanceof BillingSimulator
      ? [new SimulatedBillingClock(deps.providers.billing, deps.config.SIM_BILLING_INTERVAL, deps.logger)]
      : []),
  ];
}
