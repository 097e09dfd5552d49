import type { ActivityDeps } from '../activities';

/**
 * Loops that run in the worker process beside the Temporal worker (started before it polls, stopped
 * after it drains). Families add theirs here.
 */
export interface BackgroundService {
  name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function createBackgroundServices(_deps: ActivityDeps): BackgroundService[] {
  return [];
}
