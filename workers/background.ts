import type { ActivityDeps } from '../activities';
import type { BackgroundService } from '../common/periodic';
import { families as allFamilies, type FamilyManifest } from '../families';
import { EventDispatcher } from '../domain/webhooks/dispatcher';
import { simulatorLoops } from '../providers';
import { TeardownSweeper } from './teardown-sweeper';
import { terminateDueServices } from '../domain/orders/store';
import { RetentionSweeper } from './retention-sweeper';
import { OrphanOperationSweeper } from './orphan-operation-sweeper';

export type { BackgroundService } from '../common/periodic';

/**
 * Loops that run in the worker process beside the Temporal worker (started before it polls, stopped
 * after it drains): the platform's, then each family's keepers (its manifest's `keepers`).
 */
export function createBackgroundServices(deps: ActivityDeps, families: readonly FamilyManifest[] = allFamilies): BackgroundService[] {
  return [
    // Webhooks: LISTEN cloud_events + periodic sweep, fans events out to delivery workflows.
    new EventDispatcher(deps),
    // Terminated services: a teardown workflow each, until their resources are gone.
    new TeardownSweeper(deps),
    // Records whose time is up: ended sign-in throttle windows, expired idempotency keys.
    new RetentionSweeper(deps),
    // Operations whose workflow does not exist: failed, with what their request claimed released.
    new OrphanOperationSweeper(deps),
    // The servers of each family that should run, run (after a host restart, after a crash).
    ...families.flatMap((family) => family.keepers?.(deps) ?? []),
    // What simulated backends do on their own (billing carries out due cancellations).
    ...simulatorLoops(deps.providers, deps, { carryOutCancellations: (today) => terminateDueServices(deps.db, deps.providers.billing, today) }),
  ];
}
