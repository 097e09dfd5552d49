import { type NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { Client } from '@temporalio/client';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import { createActivities } from '../activities';
import { OperationService } from '../domain/operations';
import { TemporalGateway } from '../infra/temporal';
import { createProviders, type FamilyManifest } from '../families';
import { loadKeyring } from '../infra/master-key';
import { createBackgroundServices, type BackgroundService } from './background';
import { localServicePorts, protectLocalPorts } from '../infra/webhook-targets';

export interface WorkerInput {
  config: Config;
  db: Db;
  logger: Logger;
  connection: NativeConnection;
  taskQueue?: string;
  /** A pre-built bundle (tests build one per run); otherwise workflows/index.ts is bundled at start. */
  workflowBundle?: WorkerOptions['workflowBundle'];
  workflowsPath?: string;
  /**
   * The Temporal client of activities and background services (tests pass the test server's). By default a
   * client on the worker's own NativeConnection, which also lets the event dispatcher start workflows eagerly.
   */
  temporalClient?: Client;
  /** Extra activities (tests add their own beside the real ones). */
  extraActivities?: Record<string, (...args: never[]) => Promise<unknown>>;
  /** Worker options beyond the defaults (tests: a worker without a workflow cache). */
  workerOptions?: Partial<Pick<WorkerOptions, 'maxCachedWorkflows'>>;
  /** The families whose backends and activities it runs: every family (families/index.ts) unless a test mounts others. */
  families?: readonly FamilyManifest[];
}

export interface WorkerBundle {
  worker: Worker;
  /** Long-running loops that live beside the worker (e.g. the event dispatcher); start before run(). */
  background: BackgroundService[];
}

/** Builds a worker with the real activities over the real database and providers. */
export async function createWorker(input: WorkerInput): Promise<WorkerBundle> {
  const { config, db, logger } = input;
  const temporal = new TemporalGateway(
    {
      address: config.TEMPORAL_ADDRESS,
      namespace: config.TEMPORAL_NAMESPACE,
      taskQueue: input.taskQueue ?? config.TEMPORAL_TASK_QUEUE,
      useSearchAttributes: config.TEMPORAL_SEARCH_ATTRIBUTES,
    },
    input.temporalClient ?? new Client({ connection: input.connection, namespace: config.TEMPORAL_NAMESPACE }),
  );
  const operations = new OperationService(db, temporal, {
    cacheTtlMs: config.OPERATION_CACHE_TTL,
    queryTimeoutMs: config.OPERATION_QUERY_TIMEOUT,
    startTimeoutMs: config.OPERATION_START_TIMEOUT,
    logger,
  });
  // Deliveries run here: the control plane's own local services stay out of their reach.
  protectLocalPorts(localServicePorts(config));
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  const providers = createProviders({ db, config }, input.families);
  const activityDeps = { config, db, logger, keyring, providers, operations, temporal };
  const activities = {
    ...createActivities(activityDeps, input.families),
    ...(input.extraActivities ?? {}),
  };
  const worker = await Worker.create({
    connection: input.connection,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueue: input.taskQueue ?? config.TEMPORAL_TASK_QUEUE,
    activities,
    stickyQueueScheduleToStartTimeout: config.TEMPORAL_STICKY_TIMEOUT,
    ...input.workerOptions,
    ...(input.workflowBundle ? { workflowBundle: input.workflowBundle } : { workflowsPath: input.workflowsPath ?? require.resolve('../workflows') }),
  });
  return { worker, background: createBackgroundServices(activityDeps) };
}
