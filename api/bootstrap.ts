import type { Client } from '@temporalio/client';
import type { Config } from '../common/config';
import { createLogger, type Logger } from '../common/logger';
import { createDb, type Db } from '../db/knex';
import { AuditWriter } from '../infra/audit';
import { CredentialResolver } from '../domain/credentials';
import { loadKeyring } from '../infra/master-key';
import { LoginThrottle } from '../domain/login-throttle';
import { OperationService } from '../domain/operations';
import { postgresCounters, RateLimiter } from '../infra/rate-limit';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';
import { hostCallerOf } from '../infra/host-calls';
import { createProviders, families as allFamilies, type FamilyManifest } from '../families';
import { createProvisioners } from '../domain/provisioning';
import { localServicePorts, protectLocalPorts } from '../infra/webhook-targets';
import { mountMcp } from '../mcp/http';
import { version as packageVersion } from '../package.json';
import { createApp } from './app';
import type { AppDeps } from './deps';
import { Cursors } from './pagination';
import { buildRouteTable } from './routes';

/**
 * Wires the API process: database, Temporal client, providers, and the Express app. `families` are
 * every family (families/index.ts) unless a test mounts others.
 */
export async function createApi(
  config: Config,
  options: {
    db?: Db;
    temporalClient?: Client;
    logger?: Logger;
    families?: readonly FamilyManifest[];
    /** Tests without Temporal (hence without a worker): this process is also the agent of that host, and runs its servers itself. */
    host?: string;
  } = {},
) {
  const families = options.families ?? allFamilies;
  const logger = options.logger ?? createLogger(config.LOG_LEVEL, 'api');
  const db = options.db ?? createDb(config.DATABASE_URL, config.DATABASE_POOL_MAX);
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  const temporal = new TemporalGateway(temporalOptionsOf(config), options.temporalClient);
  // The API is no host: calls about a server go to its host (docs/hosts.md).
  const providers = createProviders({ db, config, host: options.host, caller: hostCallerOf(temporal, config.HOST_CALL_TIMEOUT, keyring) }, families);
  const deps: AppDeps = {
    config,
    db,
    logger,
    keyring,
    cursors: new Cursors(keyring),
    temporal,
    providers,
    credentials: new CredentialResolver(db, config.CREDENTIAL_CACHE_TTL),
    audit: new AuditWriter(db, logger, config.AUDIT_FLUSH_INTERVAL, 500, config.AUDIT_QUEUE_MAX),
    rateLimiter: new RateLimiter(
      {
        default: { per_key: config.RATE_LIMIT_DEFAULT_PER_KEY, per_account: config.RATE_LIMIT_DEFAULT_PER_ACCOUNT },
        mutations: { per_key: config.RATE_LIMIT_MUTATIONS_PER_KEY, per_account: config.RATE_LIMIT_MUTATIONS_PER_ACCOUNT },
      },
      config.RATE_LIMIT_WINDOW,
      postgresCounters(db),
    ),
    loginThrottle: new LoginThrottle(db, {
      perEmail: config.LOGIN_MAX_ATTEMPTS_PER_EMAIL,
      perIp: config.LOGIN_MAX_ATTEMPTS_PER_IP,
      windowMs: config.LOGIN_THROTTLE_WINDOW,
    }),
    operations: new OperationService(db, temporal, {
      cacheTtlMs: config.OPERATION_CACHE_TTL,
      queryTimeoutMs: config.OPERATION_QUERY_TIMEOUT,
      startTimeoutMs: config.OPERATION_START_TIMEOUT,
      logger,
    }),
    provisioners: createProvisioners({ db, providers, keyring, config }, families),
  };
  protectLocalPorts(localServicePorts(config));
  const routes = buildRouteTable({ devEndpoints: config.CLOUD_DEV_ENDPOINTS, families });
  // The MCP endpoint is mounted beside /v1 through this hook, so api/app.ts imports no client of the API.
  const app = createApp(deps, routes, [(server, appDeps, table) => mountMcp(server, appDeps, table, packageVersion)]);

  /** Drains the audit queue; closes what this function opened. */
  async function close(): Promise<void> {
    await deps.audit.close();
    await deps.operations.drain();
    if (!options.temporalClient) await temporal.close();
    if (!options.db) await db.destroy();
  }

  return { app, deps, routes, close };
}
