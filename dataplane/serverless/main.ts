import { fork } from 'node:child_process';
import path from 'node:path';
import { loadConfig, type Config } from '../../common/config';
import { createLogger } from '../../common/logger';
import { createDb, type Db } from '../../db/knex';
import { loadKeyring } from '../../infra/master-key';
import { TemporalGateway, temporalOptionsOf } from '../../infra/temporal';
import type { KvStore } from '../../providers/kv.provider';
import { createKvStore, keepKvServer } from '../../providers/kv.store';
import { planSettingsOf } from '../../domain/serverless/plans';
import { KvHelperPool } from './processes';
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
 * Serves the plane on SERVERLESS_PORT, with SERVERLESS_KV_PROCESSES - 1 kv helper processes
 * (processes.ts): this file again with `--kv-helper`, under the same Node options (tsx), which stop
 * with the plane. Returns its URL. The process below and the benchmarks.
 */
export async function listenServerless(config: Config, plane: ServerlessDataPlane, onError?: (err: Error) => void): Promise<string> {
  const helpers = config.SERVERLESS_KV_PROCESSES - 1;
  const url = await plane.listen(config.SERVERLESS_PORT, config.HOST, {
    kvHelpers:
      helpers > 0
        ? (forwardTo) =>
            new KvHelperPool({
              count: helpers,
              spawn: () =>
                fork(__filename, ['--kv-helper'], {
                  env: { ...process.env, SERVERLESS_FORWARD_TO: forwardTo },
                  execArgv: process.execArgv,
                  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
                }),
              onError,
            })
        : undefined,
  });
  await plane.helpersReady();
  return url;
}

/**
 * A kv helper (`--kv-helper`, started by listenServerless): the kv plane only, on this host's Redis,
 * serving the connections the main process hands over and passing requests for the other
 * primitives to it (SERVERLESS_FORWARD_TO). Goes when the main process goes or says `stop`.
 */
async function kvHelper() {
  const config = loadConfig();
  const logger = createLogger(config.LOG_LEVEL, 'serverless-kv');
  const db = createDb(config.DATABASE_URL);
  const temporal = new TemporalGateway(temporalOptionsOf(config));
  const forwardTo = process.env.SERVERLESS_FORWARD_TO;
  if (!forwardTo) throw new Error('--kv-helper needs SERVERLESS_FORWARD_TO (listenServerless starts it)');
  const plane = new ServerlessDataPlane({
    db,
    keyring: await loadKeyring(db, config.CLOUD_MASTER_KEY),
    temporal,
    plans: planSettingsOf(config),
    allowInsecureTargets: config.WEBHOOK_ALLOW_INSECURE_TARGETS,
    kv: await kvStoreOf(config, db),
    reap: false,
    forwardTo,
    onError: (err) => logger.warn({ err: err.message }, 'serverless kv helper error'),
  });
  await plane.adoptConnections();
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    await plane.close();
    await temporal.close();
    await db.destroy();
    process.exit(0);
  };
  process.on('disconnect', () => void stop());
  process.on('message', (m: { type?: string }) => {
    if (m?.type === 'stop') void stop();
  });
  process.on('SIGINT', () => void stop());
  process.on('SIGTERM', () => void stop());
  process.send!({ type: 'ready' });
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
  const temporal = new TemporalGateway(temporalOptionsOf(config));
  const onError = (err: Error) => logger.warn({ err: err.message }, 'serverless data plane error');
  const plane = await serverlessPlaneOf(config, { db, temporal, onError });
  const url = await listenServerless(config, plane, onError);
  const stopKeeper = keepKvServer({
    backend: config.KV_BACKEND,
    redisDataDir: serverlessDirs(config).redis,
    onError: (err) => logger.warn({ err: err.message }, 'the kv server could not be started again'),
  });
  logger.info({ url, kvProcesses: config.SERVERLESS_KV_PROCESSES }, 'serverless data planes listening');
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
  (process.argv.includes('--kv-helper') ? kvHelper() : main()).catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
