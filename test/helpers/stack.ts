import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { HaproxyLbProvider } from '../../providers/haproxy/haproxy.adapter';
import { DbInstancesAdapter } from '../../providers/dbinstances/dbinstances.adapter';
import { stopSeaweedServer } from '../../providers/seaweedfs/seaweedfs.server';
import { loadConfig, type Config } from '../../common/config';
import { createLogger } from '../../common/logger';
import { createApi } from '../../api/bootstrap';
import { createTestDatabase, type TestDatabase } from './db';
import { restartableWorker } from './worker';
import { createDevServerEnv, createTimeSkippingEnv, workflowBundle } from './temporal';
import { httpClient, type HttpClient } from './http';
import { createAccount, createApiKey, createSession, createUser } from './fixtures';
import { ALL_SCOPES } from '../../domain/scopes';
import { protectLocalPorts } from '../../infra/webhook-targets';
import { placedFamilies, type FamilyManifest } from '../../families';
import { HostAgent, hostRegistrationOf } from '../../domain/hosts/agent';

export interface StackOptions {
  /**
   * Which Temporal server backs the stack: 'dev' (a namespace of its own on the worker's dev
   * server), 'time-skipping' (a server of its own), or 'none' for tests that need no workflow.
   */
  temporal?: 'dev' | 'time-skipping' | 'none';
  /** Start a worker on the stack's task queue (default: when there is a Temporal server). */
  worker?: boolean;
  /**
   * Environment overrides (short durations are the default here). Backends are simulated unless a
   * test about a real server asks for it: `DNS_BACKEND: 'powerdns'` (with its address, test/dns.support.ts),
   * `LB_BACKEND: 'haproxy'`, `DBAAS_BACKEND: 'instances'`.
   */
  env?: Record<string, string>;
  /** Collect every log line of the API and the worker here (at LOG_LEVEL, `trace` to see all). */
  logLines?: string[];
  /** Test-only activities registered on the worker beside the real ones. */
  extraActivities?: Record<string, (...args: any[]) => Promise<unknown>>;
  /** The families the API and the worker mount (default: every family of families/index.ts; the skeleton test adds its own). */
  families?: readonly FamilyManifest[];
}

export interface Stack {
  url: string;
  http: HttpClient;
  config: Config;
  database: TestDatabase;
  db: TestDatabase['db'];
  temporal: TestWorkflowEnvironment | null;
  taskQueue: string;
  api: Awaited<ReturnType<typeof createApi>>;
  /** A fresh account with an owner session and an all-scopes key. */
  owner: { accountId: number; userId: number; session: string; key: string; keyId: string };
  startWorker(): Promise<void>;
  stopWorker(): Promise<void>;
  close(): Promise<void>;
}

/** Short durations for tests that run on the dev server; time-skipping tests keep production values. */
export const SHORT_DURATIONS: Record<string, string> = {
  ORDER_ACTIVATION_TIMEOUT: '20s',
  RECIPE_PROGRESS_TIMEOUT: '20s',
  WEBHOOK_RETRY_DELAYS: '100ms,200ms,300ms,400ms,500ms',
  WEBHOOK_TIMEOUT: '2s',
  SIM_DELAY_SCALE: '0.01',
  TEARDOWN_SWEEP_INTERVAL: '200ms',
};

/**
 * The whole system in one process for a test file: a fresh database, a Temporal namespace (or
 * time-skipping server), a worker on a task queue of its own, simulated backends, and the API
 * listening on an ephemeral loopback port.
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const temporalKind = options.temporal ?? 'dev';
  const database = await createTestDatabase();
  const temporal = temporalKind === 'dev' ? await createDevServerEnv() : temporalKind === 'time-skipping' ? await createTimeSkippingEnv() : null;
  const taskQueue = `test-${randomBytes(4).toString('hex')}`;
  // Load balancers and database instances, when a test asks for the real ones: this stack's own
  // directories and loopback range.
  const lbDataDir = await mkdtemp(path.join(tmpdir(), 'stack-lb-'));
  const dbaasDataDir = await mkdtemp(path.join(tmpdir(), 'stack-dbaas-'));
  const objectStorageDataDir = await mkdtemp(path.join(tmpdir(), 'stack-s3-'));
  const lbBindAddress = `127.${100 + (randomBytes(1)[0] % 100)}.${randomBytes(1)[0] % 250}.0/24`;
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    ...(temporal ? { TEMPORAL_ADDRESS: temporal.address, TEMPORAL_NAMESPACE: temporal.namespace ?? 'default' } : {}),
    TEMPORAL_TASK_QUEUE: taskQueue,
    TEMPORAL_SEARCH_ATTRIBUTES: temporalKind === 'dev' ? '1' : '0',
    CLOUD_DEV_ENDPOINTS: '1',
    WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    NODE_ENV: 'test',
    LB_DATA_DIR: lbDataDir,
    LB_BIND_ADDRESS: lbBindAddress,
    // Database instances of this stack, if a test makes any (never the checkout's .data/).
    DBAAS_DATA_DIR: dbaasDataDir,
    // The SeaweedFS of this stack, when a test asks for the real server.
    OBJECTSTORAGE_DATA_DIR: objectStorageDataDir,
    // Simulated backends: most tests are not about the backend, and a real server per stack costs
    // seconds. The tests about PowerDNS, HAProxy and database instances ask for them (options.env).
    DNS_BACKEND: 'simulator',
    LB_BACKEND: 'simulator',
    DBAAS_BACKEND: 'simulator',
    OBJECTSTORAGE_BACKEND: 'simulator',
    CAAS_BACKEND: 'simulator',
    WORDPRESS_BACKEND: 'simulator',
    ...(temporalKind === 'time-skipping' ? {} : SHORT_DURATIONS),
    ...(options.env ?? {}),
  });
  const logLines = options.logLines;
  const logger = createLogger(config.LOG_LEVEL, 'test', logLines ? { write: (line: string) => void logLines.push(line) } : undefined);
  // Without Temporal there is no worker, so no host agent: the API process stands in for this
  // machine's host (registered here), and runs the real servers a test asks for itself.
  const host = temporal ? undefined : config.HOST_NAME;
  const api = await createApi(config, { db: database.db, temporalClient: temporal?.client, logger, families: options.families, host });
  const registration = hostRegistrationOf(config, [...placedFamilies(config, options.families).keys()]);
  const standIn =
    host && registration.families.length > 0 ? new HostAgent({ db: database.db, logger, local: api.deps.providers.localServers, registration }) : null;
  await standIn?.start();
  const server: Server = await new Promise((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  // The API listens on a port of its own, and the Temporal server too: webhook targets may not reach them.
  protectLocalPorts([(server.address() as AddressInfo).port, ...(temporal ? [Number(temporal.address.split(':').pop())] : [])]);

  const worker = restartableWorker(() => ({
    config,
    db: database.db,
    logger,
    connection: temporal!.nativeConnection,
    temporalClient: temporal!.client,
    taskQueue,
    workflowBundle: workflowBundle(),
    extraActivities: options.extraActivities,
    families: options.families,
  }));
  const startWorker = async () => (temporal ? worker.start() : undefined);
  const stopWorker = () => worker.stop();
  if (temporal && options.worker !== false) await startWorker();

  const { accountId } = await createAccount(database.db);
  const { userId } = await createUser(database.db, accountId, { isOwner: true });
  const session = await createSession(database.db, accountId, userId);
  const key = await createApiKey(database.db, accountId, userId, {
    scopes: ALL_SCOPES.filter((s) => !s.startsWith('apikeys:') && !s.startsWith('users:')),
  });

  return {
    url,
    http: httpClient(url),
    config,
    database,
    db: database.db,
    temporal,
    taskQueue,
    api,
    owner: { accountId, userId, session: session.token, key: key.token, keyId: key.id },
    startWorker,
    stopWorker,
    async close() {
      await new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections();
      });
      await stopWorker();
      await standIn?.stop();
      await api.close();
      await temporal?.teardown();
      await new HaproxyLbProvider({ dataDir: config.LB_DATA_DIR, bindAddress: config.LB_BIND_ADDRESS }).destroyAll();
      await rm(lbDataDir, { recursive: true, force: true });
      await stopSeaweedServer(config.OBJECTSTORAGE_DATA_DIR);
      await rm(objectStorageDataDir, { recursive: true, force: true });
      const instances = new DbInstancesAdapter({ rootDir: config.DBAAS_DATA_DIR ?? dbaasDataDir });
      for (const name of await instances.instanceNames()) await instances.destroyInstance(name);
      await rm(dbaasDataDir, { recursive: true, force: true });
      await database.drop();
    },
  };
}

/** The `audit_logs` row of an answer (by its X-Request-Id), once the API's audit queue is written. */
export async function auditRowOf(stack: Pick<Stack, 'api' | 'db'>, res: { headers: Headers }): Promise<any> {
  await stack.api.deps.audit.flush();
  return stack
    .db('audit_logs')
    .where({ request_id: res.headers.get('x-request-id') })
    .first();
}
