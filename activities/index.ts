import type { Config } from '../common/config';
import type { Keyring } from '../common/crypto';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import type { OperationService } from '../domain/operations';
import { createProvisioners } from '../domain/provisioning';
import type { TemporalGateway } from '../infra/temporal';
import type { Providers } from '../providers';
import { withBackendErrors } from './backend-errors';
import { createDbaasActivities } from './dbaas/activities';
import { createOperationActivities } from './operations.activities';
import { createOrderActivities } from './orders/activities';
import { createServiceActivities } from './services/activities';
import { createVpsActivities } from './vps/activities';
import { createWebhookActivities } from './webhooks/activities';

export interface ActivityDeps {
  config: Config;
  db: Db;
  logger: Logger;
  providers: Providers;
  operations: OperationService;
  keyring: Keyring;
  /** Client side of Temporal, for activities that start or signal other workflows. */
  temporal: TemporalGateway;
}

/**
 * Every activity the worker registers, built over its dependencies, with backend errors mapped to
 * retryable / non-retryable failures once for all (activities/backend-errors.ts). Families add their factory here.
 */
export function createActivities(deps: ActivityDeps) {
  const provisioners = createProvisioners(deps);
  return withBackendErrors({
    ...createOperationActivities(deps),
    ...createOrderActivities({ ...deps, provisioners }),
    ...createServiceActivities({ ...deps, provisioners }),
    ...createWebhookActivities(deps),
    ...createVpsActivities(deps),
    ...createDbaasActivities(deps),
  });
}

export type Activities = ReturnType<typeof createActivities>;
