/**
 * Webhook delivery benchmark: `npx tsx bench/webhooks.bench.ts [events=1000] [webhooks=3]
 * [--design=endpoint-workflow|dispatcher-first] [--emit-concurrency=16] [--worker-processes=N]`
 * (docs/benchmarks.md).
 *
 * Starts everything in this process on loopback: a fresh PostgreSQL database (on the server of
 * scripts/ensure-tools.sh), the Temporal dev server from .tools/, the API, the worker with its event
 * dispatcher (wired as workers/main.ts wires it: the client on the worker's NativeConnection), and
 * one local HTTP receiver that verifies every signature with the docs example. Registers the
 * webhooks through the API (subscribed to `*`), writes the events into the outbox the way the
 * platform does (emitEvent in a transaction, NOTIFY at commit), and measures until every (event,
 * webhook) pair has been received and recorded as delivered. Prints deliveries per second, latency
 * percentiles from event to receipt, CPU per delivery, and each target with pass/fail; exits
 * non-zero when a delivery is lost, unrecorded or badly signed.
 *
 * `--worker-processes=N` runs the worker as `npm start` does, in processes of its own
 * (`workers/main.ts` with WORKER_PROCESSES=N; the dispatcher in the first), instead of in this
 * process; the API, the receiver and the event writer stay here.
 *
 * `--cpu-prof` writes a V8 profile of this process's main thread from the first event to the last
 * receipt (start-up and bundling left out); summarise it with bench/cpu-profile.ts.
 *
 * `--design=dispatcher-first` measures the alternative the issue named (docs/benchmarks.md): the
 * dispatcher makes the first attempt itself (the same batch attempt code, called in its process)
 * and a workflow would be started only for retries. It is a prototype for this measurement only: it
 * has no retry path, so it fails the run if any first attempt fails.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { createApi } from '../api/bootstrap';
import { createWorker } from '../workers/worker';
import { emitEvent } from '../domain/events';
import { EventDispatcher } from '../domain/webhooks/dispatcher';
import { createWebhookActivities } from '../activities/webhooks/activities';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createUser } from '../test/helpers/fixtures';
import { verifyWebhook } from '../docs/examples/verify-webhook';
import { spawn, type ChildProcess } from 'node:child_process';
import { childPidsByName, cpuDelta, cpuSnapshot, pgBackendPids, processTree } from './cpu';
import { load } from './kit';

const positional = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const EVENTS = Number(positional[0] ?? 1000);
const WEBHOOKS = Number(positional[1] ?? 3);
const DESIGN = arg('design', 'endpoint-workflow');
const EMIT_CONCURRENCY = Number(arg('emit-concurrency', '16'));
const WORKER_PROCESSES = Number(arg('worker-processes', '0'));
const CPU_PROF = process.argv.includes('--cpu-prof');
const TARGET_PER_SECOND = 500;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main() {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  const root = path.resolve(__dirname, '..');
  const cli = path.join(root, '.tools/venv/bin/temporal');
  console.log(`webhook bench: ${EVENTS} events x ${WEBHOOKS} webhooks = ${EVENTS * WEBHOOKS} deliveries, design ${DESIGN}, load ${load()}`);

  const database = await createTestDatabase();
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: existsSync(cli) ? { type: 'existing-path', path: cli } : undefined,
      ip: '127.0.0.1',
      log: { format: 'pretty', level: 'error' },
    },
  });
  const taskQueue = `bench-${randomBytes(4).toString('hex')}`;
  // The worker runs with all its background services, as in production; their load balancers and
  // database instances live in directories of the bench's own, never in the checkout's .data/ (the
  // instance keeper would start `npm start`'s instances there).
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'webhooks-bench-'));
  process.once('exit', () => rmSync(dataDir, { recursive: true, force: true }));
  const dataDirs = { LB_DATA_DIR: path.join(dataDir, 'lb'), DBAAS_DATA_DIR: path.join(dataDir, 'dbaas') };
  const config = loadConfig({
    ...process.env,
    ...dataDirs,
    DATABASE_URL: database.url,
    DATABASE_POOL_MAX: '20',
    TEMPORAL_TASK_QUEUE: taskQueue,
    TEMPORAL_SEARCH_ATTRIBUTES: '0',
    WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
  });
  const logger = createLogger(config.LOG_LEVEL, 'bench');

  // Receiver: records each (event, webhook) pair, verifies each signature. Node's default
  // keep-alive (5 s), as a typical receiver has.
  const secrets = new Map<string, string>(); // path -> secret
  const received = new Map<string, number>(); // `${event id} ${path}` -> count
  const latencies: number[] = [];
  let bad = 0;
  let lastAt = 0;
  let connections = 0;
  const emittedAt = new Map<string, number>();
  const receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const v = verifyWebhook(body, req.headers['cloud-signature'] as string, secrets.get(req.url ?? '') ?? '');
      if (!v.ok) {
        bad++;
        res.writeHead(400).end();
        return;
      }
      const key = `${v.event.id} ${req.url}`;
      received.set(key, (received.get(key) ?? 0) + 1);
      const now = performance.now();
      lastAt = now;
      const at = emittedAt.get(v.event.id);
      if (at !== undefined) latencies.push(now - at);
      res.writeHead(204).end();
    });
  });
  receiver.on('connection', () => connections++);
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const receiverPort = (receiver.address() as AddressInfo).port;

  const api = await createApi(config, { db: database.db, temporalClient: env.client, logger });
  const server = await new Promise<http.Server>((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  console.log('bundling workflows and starting the worker...');
  let workerProcesses: ChildProcess | null = null;
  let stopInProcessWorker = async () => undefined as void;
  if (WORKER_PROCESSES > 0) {
    if (DESIGN !== 'endpoint-workflow') throw new Error('--worker-processes measures the endpoint-workflow design');
    workerProcesses = spawn(path.join(root, 'node_modules/.bin/tsx'), ['workers/main.ts'], {
      cwd: root,
      env: {
        ...process.env,
        ...dataDirs,
        DATABASE_URL: database.url,
        DATABASE_POOL_MAX: '20',
        TEMPORAL_ADDRESS: env.address,
        TEMPORAL_TASK_QUEUE: taskQueue,
        TEMPORAL_SEARCH_ATTRIBUTES: '0',
        WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
        NODE_ENV: 'test',
        LOG_LEVEL: process.env.BENCH_WORKER_LOG_LEVEL ?? 'warn',
        WORKER_PROCESSES: String(WORKER_PROCESSES),
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    // Ready when every process polls the task queue.
    for (const until = Date.now() + 180_000; ;) {
      const { pollers } = await env.client.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: taskQueue }, taskQueueType: 1 });
      if ((pollers ?? []).length >= WORKER_PROCESSES) break;
      if (Date.now() > until) throw new Error('the worker processes did not start polling');
      await new Promise((r) => setTimeout(r, 500));
    }
  } else {
    const { worker, background } = await createWorker({ config, db: database.db, logger, connection: env.nativeConnection, taskQueue });
    if (DESIGN === 'dispatcher-first') {
      // The prototype: the dispatcher's hand-off makes the first attempts itself, in its process.
      const dispatcher = background.findIndex((s) => s instanceof EventDispatcher);
      const acts = createWebhookActivities({ db: database.db, keyring: api.deps.keyring, config, logger, temporal: api.deps.temporal });
      background[dispatcher] = new EventDispatcher(
        { db: database.db, config, logger, temporal: api.deps.temporal },
        {
          handOff: async (endpoint, deliveries) => {
            const results = await acts.attemptWebhookBatch({
              webhookId: endpoint.webhookId,
              timeoutMs: config.WEBHOOK_TIMEOUT,
              concurrency: config.WEBHOOK_ENDPOINT_CONCURRENCY,
              send: true,
              circuitOpenAfter: null,
              deliveries: deliveries.map((d) => ({ id: d.id, attempt: 1, nextDelayMs: config.WEBHOOK_RETRY_DELAYS[0] })),
            });
            if (results.some((r) => r.outcome !== 'delivered')) throw new Error('dispatcher-first prototype: a first attempt failed and it has no retry path');
          },
        },
      );
    } else if (DESIGN !== 'endpoint-workflow') throw new Error(`unknown --design=${DESIGN}`);
    for (const s of background) await s.start();
    const running = worker.run();
    stopInProcessWorker = async () => {
      worker.shutdown();
      await running;
      for (const s of background) await s.stop();
    };
  }

  const { accountId } = await createAccount(database.db);
  const { userId } = await createUser(database.db, accountId, { isOwner: true });
  const { token } = await createApiKey(database.db, accountId, userId, { scopes: ['account:read', 'account:write'] });
  for (let i = 0; i < WEBHOOKS; i++) {
    const hookPath = `/hook/${i}`;
    const res = await fetch(`${apiUrl}/v1/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: `http://localhost:${receiverPort}${hookPath}`, events: ['*'] }),
    });
    const body = (await res.json()) as { secret: string };
    if (res.status !== 201) throw new Error(`webhook create failed: ${res.status} ${JSON.stringify(body)}`);
    secrets.set(hookPath, body.secret);
  }
  await new Promise((r) => setTimeout(r, 50));

  // CPU of this process (API, worker, dispatcher, receiver, event writer), the Temporal server and
  // our PostgreSQL backends, from the first event to the last receipt.
  const temporalPids = childPidsByName('temporal');
  const pgPids = await pgBackendPids(database.db);
  const workerPids = workerProcesses ? processTree(workerProcesses.pid!) : [];
  const groups = { bench_process: () => [process.pid], worker_processes: () => workerPids, temporal_server: () => temporalPids, postgres_ours: () => pgPids };
  const profiler = CPU_PROF ? new Session() : null;
  if (profiler) {
    profiler.connect();
    await profiler.post('Profiler.enable');
    await profiler.post('Profiler.start');
  }
  const loadBefore = load();
  const cpuBefore = cpuSnapshot(groups);

  // Emit: one transaction per event, as a state change would, EMIT_CONCURRENCY at a time.
  const expected = EVENTS * WEBHOOKS;
  const t0 = performance.now();
  const progress = setInterval(() => {
    void (async () => {
      const [u, d] = await Promise.all([
        database.db('events').whereNull('dispatched_at').count('* as n').first(),
        database.db('webhook_deliveries').where({ status: 'delivered' }).count('* as n').first(),
      ]);
      if (process.env.BENCH_PROGRESS)
        console.log(
          `t=${((performance.now() - t0) / 1000).toFixed(1)}s emitted=${emittedAt.size} undispatched=${(u as any).n} received=${received.size} recorded=${(d as any).n}`,
        );
    })();
  }, 1_000);
  let next = 0;
  await Promise.all(
    Array.from({ length: EMIT_CONCURRENCY }, async () => {
      while (next < EVENTS) {
        const n = next++;
        await database.db.transaction(async (trx) => {
          const e = await emitEvent(trx, {
            accountId,
            type: 'service.suspended',
            data: { object: 'service', id: `svc_${n + 1}`, family: 'vps', status: 'suspended', name: 'Bench VPS', label: `bench-${n}` },
          });
          emittedAt.set(e.id, performance.now());
        });
      }
    }),
  );
  const emitMs = performance.now() - t0;

  const deadline = Date.now() + 10 * 60_000;
  while (received.size < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  const receivedMs = lastAt - t0;
  const cores = cpuDelta(cpuBefore, cpuSnapshot(groups), receivedMs / 1000);
  const loadAfter = load();
  if (profiler) {
    const { profile } = await profiler.post('Profiler.stop');
    const file = path.join(os.tmpdir(), `webhooks-bench-${Date.now()}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    console.log(`CPU profile of the measured window: ${file}`);
  }
  // Every delivery also recorded as delivered in PostgreSQL.
  let recorded = 0;
  while (Date.now() < deadline) {
    const row = (await database.db('webhook_deliveries').where({ status: 'delivered' }).count('* as n').first()) as { n: string };
    recorded = Number(row.n);
    if (recorded >= expected) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const recordedMs = performance.now() - t0;
  clearInterval(progress);

  // What the Temporal server did for it: runs, signals, activities, workflow tasks.
  const temporalWork = { workflow_runs: 0, signals: 0, activities: 0, workflow_tasks: 0, timers: 0 };
  for await (const wf of env.client.workflow.list()) {
    temporalWork.workflow_runs++;
    const history = await env.client.workflow.getHandle(wf.workflowId, wf.runId).fetchHistory();
    for (const e of history.events ?? []) {
      if (e.workflowExecutionSignaledEventAttributes) temporalWork.signals++;
      if (e.activityTaskScheduledEventAttributes) temporalWork.activities++;
      if (e.workflowTaskCompletedEventAttributes) temporalWork.workflow_tasks++;
      if (e.timerStartedEventAttributes) temporalWork.timers++;
    }
  }

  const duplicates = [...received.values()].filter((c) => c > 1).length;
  const rows = (await database.db('webhook_deliveries').count('* as n').first()) as { n: string };
  const undispatched = (await database.db('events').whereNull('dispatched_at').count('* as n').first()) as { n: string };
  latencies.sort((a, b) => a - b);
  const perSecond = Math.round(received.size / (receivedMs / 1000));
  const ourCores = cores.bench_process + cores.worker_processes + cores.temporal_server + cores.postgres_ours;
  const result = {
    design: DESIGN,
    worker_processes: WORKER_PROCESSES,
    events: EVENTS,
    webhooks: WEBHOOKS,
    expected_deliveries: expected,
    received_unique: received.size,
    lost: expected - received.size,
    duplicates,
    bad_signatures: bad,
    delivery_rows: Number(rows.n),
    recorded_delivered: recorded,
    undispatched_events: Number(undispatched.n),
    receiver_connections: connections,
    emit_seconds: +(emitMs / 1000).toFixed(2),
    seconds_to_last_receipt: +(receivedMs / 1000).toFixed(2),
    seconds_to_all_recorded: +(recordedMs / 1000).toFixed(2),
    deliveries_per_second_received: perSecond,
    deliveries_per_second_recorded: Math.round(recorded / (recordedMs / 1000)),
    latency_ms: {
      p50: Math.round(percentile(latencies, 50)),
      p95: Math.round(percentile(latencies, 95)),
      p99: Math.round(percentile(latencies, 99)),
      max: Math.round(latencies.at(-1) ?? 0),
    },
    temporal: temporalWork,
    cores,
    cpu_ms_per_delivery: {
      bench_process: +((cores.bench_process * receivedMs) / expected).toFixed(3),
      worker_processes: +((cores.worker_processes * receivedMs) / expected).toFixed(3),
      temporal_server: +((cores.temporal_server * receivedMs) / expected).toFixed(3),
      postgres_ours: +((cores.postgres_ours * receivedMs) / expected).toFixed(3),
      total: +((ourCores * receivedMs) / expected).toFixed(3),
    },
    load_before: loadBefore,
    load_after: loadAfter,
  };
  console.log(JSON.stringify(result, null, 2));

  const ok = result.lost === 0 && bad === 0 && recorded >= expected;
  const line = (name: string, pass: boolean, detail: string) => console.log(`  target ${name}: ${detail} -> ${pass ? 'PASS' : 'FAIL'}`);
  line(`>= ${TARGET_PER_SECOND} deliveries/s end to end`, perSecond >= TARGET_PER_SECOND, `${perSecond}/s (p95 event to receipt ${result.latency_ms.p95} ms)`);
  line('none lost, every delivery recorded', result.lost === 0 && recorded >= expected, `${result.lost} lost, ${recorded} of ${expected} recorded delivered`);
  line('none badly signed', bad === 0, `${bad} bad signatures`);
  console.log(`RESULT_JSON ${JSON.stringify({ ...result, ok, target_met: ok && perSecond >= TARGET_PER_SECOND })}`);

  await stopInProcessWorker();
  if (workerProcesses) {
    const exited = new Promise((r) => workerProcesses!.once('exit', r));
    workerProcesses.kill('SIGTERM');
    await exited;
  }
  await new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  });
  await new Promise<void>((r) => {
    receiver.close(() => r());
    receiver.closeAllConnections();
  });
  await api.close();
  await env.teardown();
  await database.drop();
  if (!ok) {
    console.error('FAILED: deliveries lost, unrecorded or badly signed');
    process.exit(1);
  }
  process.exit(0);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
