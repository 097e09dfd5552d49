import type { ActivityDeps } from '../activities';
import { EventDispatcher } from '../domain/webhooks/dispatcher';

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
  ];
}
