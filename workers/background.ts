import type { ActivityDeps } from '../activities';
import { EventDispatcher } from '../domain/webhooks/dispatcher';
import { simulatorLoops } from '../providers';
import { TeardownSweeper } from './teardown-sweeper';
import { RetentionSweeper } from './retention-sweeper';
import { OrphanOperationSweeper } from './orphan-operation-sweeper';

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
    // Terminated services: a teardown workflow each, until their resources are gone.
    new TeardownSweeper(deps),
    // Records whose time is up: ended sign-in throttle windows, expired idempotency keys.
    new RetentionSweeper(deps),
    // Operations whose workflow does not exist: failed, with what their request claimed released.
    new OrphanOperationSweeper(deps),
    // What simulated backends do on their own (billing carries out due cancellations).
    ...simulatorLoops(deps.providers, deps),
  ];
}
