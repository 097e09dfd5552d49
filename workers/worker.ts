import { bundleWorkflowCode, type NativeConnection, Runtime, Worker, type WorkerOptions } from '@temporalio/worker';
import { Client } from '@temporalio/client';
import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import type { Db } from '../db/knex';
import { createActivities } from '../activities';
import { OperationService } from '../domain/operations';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';
import { createProviders, type FamilyManifest } from '../families';
import { loadKeyring } from '../infra/master-key';
import { createBackgroundServices, type BackgroundService } from './background';
import { localServicePorts, protectLocalPorts } from '../infra/webhook-targets';
import { hostCallerOf } from '../infra/host-calls';
import { hostQueue } from '../common/hosts';
import { HostAgent, hostRegistrationOf } from '../domain/hosts/agent';

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

/**
 * The Temporal workers of one worker process: one on the shared task queue, and, when it is the agent
 * of a host that runs servers (some family's real backend is placed on hosts), one on the host's own
 * queue `host-<HOST_NAME>` (docs/hosts.md). They run and stop together; if one fails the other stops.
 */
export class AgentWorkers {
  constructor(
    readonly shared: Worker,
    readonly host: Worker | null,
  ) {}

  async run(): Promise<void> {
    const runs = [this.shared, this.host].filter((w): w is Worker => w !== null).map((w) => w.run());
    try {
      await Promise.all(runs);
    } catch (err) {
      this.shutdown();
      await Promise.allSettled(runs);
      throw err;
    }
  }

  shutdown(): void {
    for (const w of [this.shared, this.host]) if (w && w.getState() === 'RUNNING') w.shutdown();
  }
}

export interface WorkerBundle {
  worker: AgentWorkers;
  /** Long-running loops that live beside the worker (e.g. the event dispatcher); start before run(). */
  background: BackgroundService[];
}

/** Builds a worker with the real activities over the real database and providers. */
export async function createWorker(input: WorkerInput): Promise<WorkerBundle> {
  const { config, db, logger } = input;
  const temporal = new TemporalGateway(
    temporalOptionsOf(config, input.taskQueue),
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
  // This process is the agent of HOST_NAME: the servers placed there run here; calls about servers
  // placed elsewhere go to their host (infra/host-calls.ts).
  const host = config.HOST_NAME;
  const providers = createProviders({ db, config, host, caller: hostCallerOf(temporal, config.HOST_CALL_TIMEOUT, keyring) }, input.families);
  const activityDeps = { config, db, logger, keyring, providers, operations, temporal };
  const activities = {
    ...createActivities(activityDeps, input.families),
    ...(input.extraActivities ?? {}),
  };
  const registration = hostRegistrationOf(
    config,
    providers.localServers.map((l) => l.family),
  );
  const serves = registration.families;
  // One bundle for both workers (bundling takes seconds).
  const workflowBundle =
    input.workflowBundle ??
    (serves.length > 0
      ? { code: (await bundleWorkflowCode({ workflowsPath: input.workflowsPath ?? require.resolve('../workflows'), logger: Runtime.instance().logger })).code }
      : undefined);
  const common = {
    connection: input.connection,
    namespace: config.TEMPORAL_NAMESPACE,
    activities,
    stickyQueueScheduleToStartTimeout: config.TEMPORAL_STICKY_TIMEOUT,
    ...input.workerOptions,
    ...(workflowBundle ? { workflowBundle } : { workflowsPath: input.workflowsPath ?? require.resolve('../workflows') }),
  };
  const shared = await Worker.create({ ...common, taskQueue: input.taskQueue ?? config.TEMPORAL_TASK_QUEUE });
  const hostWorker = serves.length > 0 ? await Worker.create({ ...common, taskQueue: hostQueue(host) }) : null;
  const agent = serves.length > 0 ? new HostAgent({ db, logger, local: providers.localServers, registration }) : null;
  // The host registers before anything else runs: placements may choose it once it polls.
  return { worker: new AgentWorkers(shared, hostWorker), background: [...(agent ? [agent] : []), ...createBackgroundServices(activityDeps, input.families)] };
}
