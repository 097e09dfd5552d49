import { DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { createDb } from '../db/knex';
import { isSupervisor, processIndex, superviseProcesses } from '../common/processes';
import { createWorker } from './worker';

/**
 * The worker: `tsx workers/main.ts`, WORKER_PROCESSES processes (node:cluster). Each waits for
 * Temporal, then polls the task queue until SIGINT/SIGTERM; the first one (CLOUD_PROCESS_INDEX 0)
 * also runs the background loops (event dispatcher, sweepers, simulated billing).
 */
async function connectWithRetry(address: string, logger: ReturnType<typeof createLogger>): Promise<NativeConnection> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await NativeConnection.connect({ address });
    } catch (err) {
      if (attempt >= 60) throw err;
      if (attempt === 1 || attempt % 10 === 0) logger.info({ address }, 'waiting for Temporal');
      await new Promise((r) => setTimeout(r, 1_000));
    }
  }
}

async function main() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'worker');
  if (isSupervisor(config.WORKER_PROCESSES)) {
    superviseProcesses(config.WORKER_PROCESSES, 'worker', logger);
    return;
  }
  // The SDK's own logs (bundling, state changes) only at warn, unless debugging.
  const sdkLevel = config.LOG_LEVEL === 'debug' || config.LOG_LEVEL === 'trace' ? 'DEBUG' : 'WARN';
  Runtime.install({ logger: new DefaultLogger(sdkLevel) });
  const db = createDb(config.DATABASE_URL, config.DATABASE_POOL_MAX);
  const connection = await connectWithRetry(config.TEMPORAL_ADDRESS, logger);
  const { worker, background: loops } = await createWorker({
    config,
    db,
    logger,
    connection,
    workflowBundle: config.WORKFLOW_BUNDLE_PATH ? { codePath: config.WORKFLOW_BUNDLE_PATH } : undefined,
  });
  // The loops run in one process: the first worker process.
  const background = processIndex() === 0 ? loops : [];
  for (const service of background) await service.start();
  logger.info({ taskQueue: config.TEMPORAL_TASK_QUEUE, host: worker.host ? config.HOST_NAME : null }, 'worker running');
  const stop = () => worker.shutdown();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  await worker.run();
  for (const service of background) await service.stop();
  await connection.close();
  await db.destroy();
  logger.info('worker stopped');
  // A cluster worker's channel to its supervisor would keep it alive: let go of it to exit.
  if (process.connected) process.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
