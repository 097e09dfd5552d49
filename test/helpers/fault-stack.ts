import { Client, Connection } from '@temporalio/client';
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../../common/config';
import { createDb, type Db } from '../../db/knex';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../../domain/scopes';
import { attachVpsMachine } from '../../domain/vps/store';
import { createProviders } from '../../families';
import { createAccount, createApiKey, createService, createUser } from './fixtures';
import { createTestDatabase, type TestDatabase } from './db';
import { httpClient, type HttpClient } from './http';
import { apiReady, freePort, PostgresCluster, removeDir, scratchDir, serviceProcess, TemporalServer, until, type ManagedProcess } from './processes';
import { SHORT_DURATIONS } from './stack';

/**
 * The whole system as separate processes for fault tests: PostgreSQL (a private cluster that can be
 * stopped, or a database on the suite's server), the Temporal dev server on a file, the worker and
 * the API. The test holds a Temporal client, a database connection and an HTTP client of its own.
 */
export interface FaultStack {
  dir: string;
  db: Db;
  postgres: PostgresCluster | null;
  temporal: TemporalServer;
  client: Client;
  api: ManagedProcess;
  worker: ManagedProcess;
  apiPort: number;
  http: HttpClient;
  taskQueue: string;
  owner: { accountId: number; userId: number; key: string };
  /** Starts the API and waits for /readyz. */
  startApi(): Promise<void>;
  /** Starts the worker and waits until it polls the task queue. */
  startWorker(): Promise<void>;
  /** A VPS service with a machine on the simulated hypervisor. */
  createVps(): Promise<{ id: string; serviceId: number; vmid: number }>;
  /** The last lines of every process's log, for a failure message. */
  logs(): string;
  close(): Promise<void>;
}

export async function startFaultStack(options: { name: string; postgres: 'private' | 'shared'; env?: Record<string, string> }): Promise<FaultStack> {
  const dir = scratchDir(options.name);
  let postgres: PostgresCluster | null = null;
  let database: TestDatabase | null = null;
  let db: Db;
  let url: string;
  if (options.postgres === 'private') {
    postgres = await PostgresCluster.create(dir);
    url = postgres.url;
    db = createDb(url, 4);
    await db.migrate.latest();
  } else {
    database = await createTestDatabase();
    url = database.url;
    db = database.db;
  }
  const temporal = await TemporalServer.create(dir);
  const connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection });
  const apiPort = await freePort();
  const taskQueue = `faults-${randomBytes(4).toString('hex')}`;
  const env: Record<string, string> = {
    ...SHORT_DURATIONS,
    DATABASE_URL: url,
    DATABASE_POOL_MAX: '5',
    TEMPORAL_ADDRESS: temporal.address,
    TEMPORAL_TASK_QUEUE: taskQueue,
    PORT: String(apiPort),
    HOST: '127.0.0.1',
    OPERATION_START_TIMEOUT: '2s',
    // A worker these tests SIGKILL says nothing to Temporal: the workflows it ran wait this long on
    // its sticky queue before the replacement gets them (10 s by default).
    TEMPORAL_STICKY_TIMEOUT: '1s',
    // The fault tests order and reinstall simulated services: no PowerDNS, HAProxy or database
    // instances run beside these processes (their own tests cover those backends).
    DNS_BACKEND: 'simulator',
    LB_BACKEND: 'simulator',
    DBAAS_BACKEND: 'simulator',
    OBJECTSTORAGE_BACKEND: 'simulator',
    ...(options.env ?? {}),
  };
  const api = serviceProcess('api', dir, env);
  const worker = serviceProcess('worker', dir, env);

  const { accountId } = await createAccount(db);
  const { userId } = await createUser(db, accountId, { isOwner: true });
  const key = await createApiKey(db, accountId, userId, { scopes: ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s)) });
  const providers = createProviders({ db, config: loadConfig({ ...process.env, ...env }) });

  const stack: FaultStack = {
    dir,
    db,
    postgres,
    temporal,
    client,
    api,
    worker,
    apiPort,
    http: httpClient(`http://127.0.0.1:${apiPort}`),
    taskQueue,
    owner: { accountId, userId, key: key.token },
    async startApi() {
      api.start();
      await apiReady(apiPort);
    },
    async startWorker() {
      worker.start();
      await until(
        'the worker polling',
        async () => {
          const res = await client.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: taskQueue }, taskQueueType: 1 });
          return (res.pollers ?? []).length > 0 && worker.running;
        },
        60_000,
        250,
      );
    },
    async createVps() {
      const svc = await createService(db, accountId, { family: 'vps' });
      const row = await db('services').where({ id: svc.serviceId }).first();
      const server = await attachVpsMachine(db, providers.hypervisor, row, { type: 'qemu' });
      return { id: svc.id, serviceId: svc.serviceId, vmid: server.vmid };
    },
    logs() {
      // Every unhandled error, and the last lines.
      const tail = (text: string) => {
        const lines = text.split('\n');
        return [...lines.filter((l) => l.includes('unhandled error')).slice(0, 5), '...', ...lines.slice(-30)].join('\n');
      };
      return [api, worker, temporal.process].map((p) => `--- ${p.name}\n${tail(p.log())}`).join('\n');
    },
    async close() {
      await Promise.all([api.stop(), worker.stop()]);
      await connection.close().catch(() => undefined);
      await temporal.process.kill();
      for (const p of [api, worker, temporal.process]) p.forget();
      if (database) await database.drop();
      else {
        await db.destroy();
        await postgres?.destroy();
      }
      if (!process.env.KEEP_FAULT_LOGS) removeDir(dir);
    },
  };
  return stack;
}

/** Polls the database until `ok`, or fails with the processes' logs. */
export async function eventually<T>(stack: FaultStack, what: string, read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms (last: ${JSON.stringify(value)})\n${stack.logs()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * Starts a reinstall of `vps` and waits until the hypervisor has its task (progress 15): an operation
 * under way for a fault to hit. Returns the operation's id.
 */
export async function reinstallUnderway(
  stack: FaultStack,
  vps: { id: string },
  rootPassword: string,
  template = 'local:import/debian-12-genericcloud-amd64.qcow2',
): Promise<string> {
  const res = await stack.http.post(`/v1/vps/${vps.id}/reinstall`, { token: stack.owner.key, body: { template, root_password: rootPassword } });
  if (res.status !== 202) throw new Error(`reinstall: ${res.status} ${res.text}`);
  await eventually(
    stack,
    'the reinstall task on the hypervisor',
    () => stack.db('operations').where({ id: res.body.id }).first(),
    (row) => row.progress >= 15,
  );
  return res.body.id;
}
