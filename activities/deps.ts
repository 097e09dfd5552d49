import type { Config } from '../common/config';
import type { Keyring } from '../common/crypto';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import type { OperationService } from '../domain/operations';
import type { TemporalGateway } from '../infra/temporal';
import type { Providers } from '../providers';

/** What the worker's activities (and the loops beside them) are built over. */
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
