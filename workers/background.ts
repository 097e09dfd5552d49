import type { ActivityDeps } from '../activities';
import { EventDispatcher } from '../domain/webhooks/dispatcher';
import { simulatorLoops } from '../providers';
import { TeardownSweeper } from './teardown-sweeper';
import { terminateDueServices } from '../domain/orders/store';
import { BalancerKeeper } from '../domain/lb/keeper';
import { InstanceKeeper } from '../domain/dbaas/keeper';
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
    // Load balancers: every balancer of a live service runs (after a host restart, after a crash).
    new BalancerKeeper({
      db: deps.db,
      lb: deps.providers.lb,
      logger: deps.logger,
      intervalMs: deps.config.LB_KEEPER_INTERVAL,
      targets: deps.providers.lbTargets,
      ...(deps.providers.hosts.places('lb') && deps.providers.hosts.self ? { host: deps.providers.hosts.self } : {}),
    }),
    // Records whose time is up: ended sign-in throttle windows, expired idempotency keys.
    new RetentionSweeper(deps),
    // Operations whose workflow does not exist: failed, with what their request claimed released.
    new OrphanOperationSweeper(deps),
    // What simulated backends do on their own (billing carries out due cancellations).
    // Database instances: every one that should run runs (after a host restart, after a crash).
    new InstanceKeeper({ dbaas: deps.providers.dbaas, logger: deps.logger, intervalMs: deps.config.DBAAS_KEEPER_INTERVAL }),
    ...simulatorLoops(deps.providers, deps, { carryOutCancellations: (today) => terminateDueServices(deps.db, deps.providers.billing, today) }),
  ];
}
