import type { Config } from '../common/config';
import type { Keyring } from '../common/crypto';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import type { AuditWriter } from '../infra/audit';
import type { CredentialResolver } from '../domain/credentials';
import type { LoginThrottle } from '../domain/login-throttle';
import type { OperationService } from '../domain/operations';
import type { ProvisionerRegistry } from '../domain/provisioning';
import type { RateLimiter } from '../infra/rate-limit';
import type { TemporalGateway } from '../infra/temporal';
import type { Providers } from '../providers';
import type { Cursors } from './pagination';

/** What route handlers may use. Built once per process by api/bootstrap.ts (and by tests). */
export interface AppDeps {
  config: Config;
  db: Db;
  logger: Logger;
  keyring: Keyring;
  cursors: Cursors;
  temporal: TemporalGateway;
  providers: Providers;
  credentials: CredentialResolver;
  audit: AuditWriter;
  rateLimiter: RateLimiter;
  loginThrottle: LoginThrottle;
  operations: OperationService;
  /** Every family's provisioner (its order hooks, for the API). */
  provisioners: ProvisionerRegistry;
}
