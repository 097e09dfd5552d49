import type { Config } from '../common/config';
import type { Keyring } from '../common/crypto';
import type { TemporalGateway } from '../domain/temporal';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import type { OperationService } from '../domain/operations';
import type { Providers } from '../providers';
import { createOperationActivities } from './operations.activities';
import { createOrderActivities } from './orders.activities';
import { createWebhookActivities } from './webhooks.activities';
import { createVpsActivities } from './vps.activities';

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
 * Every activity the worker registers, built over its dependencies. Families add their factory here.
 */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createOperationActivities(deps),
    ...createOrderActivities(deps),
    ...createWebhookActivities(deps),
    ...createVpsActivities(deps),
  };
}

export type Activities = ReturnType<typeof createActivities>;
