import path from 'node:path';
import { loadConfig, type Config } from '../../common/config';
import { createLogger } from '../../common/logger';
import { createDb, type Db } from '../../db/knex';
import { loadKeyring } from '../../infra/master-key';
import { TemporalGateway } from '../../infra/temporal';
import type { KvStore } from '../../providers/kv.provider';
import { createKvStore, keepKvServer } from '../../providers/kv.store';
import { planSettingsOf } from '../../domain/serverless/plans';
import { ServerlessDataPlane } from './server';
import { SqliteEngine } from '../../providers/sqlite/sqlite.engine';
import { WorkerdRuntime } from '../../providers/workerd/runtime';

/** Where each backend of the data planes keeps its files, under SERVERLESS_DATA_DIR. */
export const serverlessDirs = (config: Pick<Config, 'SERVERLESS_DATA_DIR'>) => ({
  redis: path.join(config.SERVERLESS_DATA_DIR, 'redis'),
  db: path.join(config.SERVERLESS_DATA_DIR, 'db'),
  functions: path.join(config.SERVERLESS_DATA_DIR, 'functions'),
});

/** The kv store of a configuration: this host's Redis (started, or adopted when it runs), or PostgreSQL (KV_BACKEND=simulator). */
export const kvStoreOf = (config: Config, db: Db): Promise<KvStore> =>
  createKvStore({ backend: config.KV_BACKEND, redisDataDir: serverlessDirs(config).redis, db });

/** The data planes of a configuration, with their backends (the process below, the benchmarks). */
export async function serverlessPlaneOf(
  config: Config,
  deps: { db: Db; temporal: TemporalGateway; onError?: (err: Error) => void },
): Promise<ServerlessDataPlane> {
  const keyring = await loadKeyring(deps.db, config.CLOUD_MASTER_KEY);
  const dirs = serverlessDirs(config);
  return new ServerlessDataPlane({
    db: deps.db,
    keyring,
    temporal: deps.temporal,
    plans: planSettingsOf(config),
    allowInsecureTargets: config.WEBHOOK_ALLOW_INSECURE_TARGETS,
    kv: await kvStoreOf(config, deps.db),
    sql: new SqliteEngine({ rootDir: dirs.db, queryTimeoutMs: config.SERVERLESS_DB_QUERY_TIMEOUT }),
    functions: new WorkerdRuntime({ dataDir: dirs.functions, memoryMb: config.FUNCTIONS_MEMORY_MB, timeoutMs: config.FUNCTIONS_TIMEOUT }),
    onError: deps.onError,
  });
}

/**
 * The serverless data planes as their own process (`npm run serverless`; `npm start` runs it): makes
 * sure this host's Redis runs (daemonised: it outlives this process and a later start re-uses it;
 * `npm start` stops it on Ctrl-C), then serves cron, db, functions and kv on SERVERLESS_PORT. The
 * functions' workerd sandboxes are children of this process and end with it.
 */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'serverless');
  const db = createDb(config.DATABASE_URL);
  const temporal = new TemporalGateway({
    address: config.TEMPORAL_ADDRESS,
    namespace: config.TEMPORAL_NAMESPACE,
    taskQueue: config.TEMPORAL_TASK_QUEUE,
    useSearchAttributes: config.TEMPORAL_SEARCH_ATTRIBUTES,
  });
  const plane = await serverlessPlaneOf(config, { db, temporal, onError: (err) => logger.warn({ err: err.message }, 'serverless data plane error') });
  const url = await plane.listen(config.SERVERLESS_PORT, config.HOST);
  const stopKeeper = keepKvServer({
    backend: config.KV_BACKEND,
    redisDataDir: serverlessDirs(config).redis,
    onError: (err) => logger.warn({ err: err.message }, 'the kv server could not be started again'),
  });
  logger.info({ url }, 'serverless data planes listening');
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    stopKeeper();
    await plane.close();
    await temporal.close();
    await db.destroy();
    process.exit(0);
  };
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
}

if (require.main === module) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
