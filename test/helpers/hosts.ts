import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { NativeConnection } from '@temporalio/worker';
import type { Config } from '../../common/config';
import { DbInstancesAdapter } from '../../providers/dbinstances/dbinstances.adapter';
import { HaproxyLbProvider } from '../../providers/haproxy/haproxy.adapter';
import type { Stack } from './stack';
import { workflowBundle } from './temporal';
import { restartableWorker } from './worker';

/** A second host agent in the test's process: its own name, data directories and address ranges; the stack's database, namespace and queue. */
export interface HostAgentHandle {
  name: string;
  config: Config;
  /** Starts its worker (both queues) and its loops: registration, heartbeat, keepers. */
  start(): Promise<void>;
  /** Stops them, as a crash of the agent would (its servers keep running). */
  stop(): Promise<void>;
  /** Stops it and destroys its servers and directories. */
  close(): Promise<void>;
}

/** `HOST_NAME=<name> HOST_DATA_DIR=<dir> LB_BIND_ADDRESS=<range> DBAAS_ADDRESS_RANGE=<range> npm run worker`, in this process. */
export async function startHostAgent(stack: Stack, name: string, overrides: Partial<Config> = {}): Promise<HostAgentHandle> {
  const dataDir = await mkdtemp(path.join(tmpdir(), `host-${name}-`));
  // The servers' own accounts pass through it to their directories (mkdtemp makes it 0700).
  await chmod(dataDir, 0o755);
  const octet = 100 + (randomBytes(1)[0] % 100);
  const config: Config = {
    ...stack.config,
    HOST_NAME: name,
    HOST_DATA_DIR: dataDir,
    LB_DATA_DIR: path.join(dataDir, 'lb'),
    DBAAS_DATA_DIR: path.join(dataDir, 'dbaas'),
    LB_BIND_ADDRESS: `127.${octet}.${randomBytes(1)[0] % 250}.0/24`,
    DBAAS_ADDRESS_RANGE: `127.79.${randomBytes(1)[0] % 250}.0/24`,
    ...overrides,
  };
  // A connection of its own: one process may not poll a queue twice over one connection (what a
  // second machine would have anyway).
  const connection = await NativeConnection.connect({ address: stack.temporal!.address });
  const worker = restartableWorker(() => ({
    config,
    db: stack.db,
    logger: stack.api.deps.logger,
    connection,
    temporalClient: stack.temporal!.client,
    taskQueue: stack.taskQueue,
    workflowBundle: workflowBundle(),
  }));
  const handle: HostAgentHandle = {
    name,
    config,
    start: () => worker.start(),
    stop: () => worker.stop(),
    async close() {
      await handle.stop();
      await new HaproxyLbProvider({ dataDir: config.LB_DATA_DIR, bindAddress: config.LB_BIND_ADDRESS }).destroyAll();
      const instances = new DbInstancesAdapter({ rootDir: config.DBAAS_DATA_DIR!, addressRange: config.DBAAS_ADDRESS_RANGE });
      for (const instance of await instances.instanceNames()) await instances.destroyInstance(instance);
      await rm(dataDir, { recursive: true, force: true });
      await connection.close();
    },
  };
  await handle.start();
  return handle;
}
