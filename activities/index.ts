import { createProvisioners } from '../domain/provisioning';
import { families as allFamilies, type FamilyManifest } from '../families';
import { withBackendErrors } from './backend-errors';
import type { ActivityDeps } from './deps';
import { createOperationActivities } from './operations.activities';
import { createServiceActivities } from './services/activities';

export type { ActivityDeps } from './deps';

/**
 * Every activity the worker registers, built over its dependencies: the platform's (operation
 * transitions, service teardown) and each family's (its manifest's `activities`), with backend
 * errors mapped to retryable / non-retryable failures once for all (activities/backend-errors.ts).
 * `families` are every family (families/index.ts) unless a test mounts others.
 */
export function createActivities(deps: ActivityDeps, families: readonly FamilyManifest[] = allFamilies) {
  const provisioners = createProvisioners(deps, families);
  const activities: Record<string, unknown> = {
    ...createOperationActivities(deps),
    ...createServiceActivities({ ...deps, provisioners }),
  };
  for (const family of families) {
    for (const [name, fn] of Object.entries(family.activities?.({ ...deps, provisioners }) ?? {})) {
      // Temporal finds an activity by its name alone: two with one name would silently shadow each other.
      if (name in activities) throw new Error(`Activity ${name} of family ${family.name} is already registered`);
      activities[name] = fn;
    }
  }
  return withBackendErrors(activities);
}
