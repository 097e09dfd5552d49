/**
 * Host calls (docs/hosts.md "Synchronous calls"): the latency a provider call about a resource's
 * server gains when it is made from a process that is not that host's agent (the API), and so runs
 * as a short `hostCallWorkflow` on the host's task queue `host-<name>` with one local activity.
 *
 *   npx tsx bench/hosts.bench.ts [calls, default 300] [applies, default 30] [--temporal=memory|sqlite|both] [--samples=<file.json>]
 *
 * In one process: a fresh database, the Temporal dev server from .tools/ (in memory, or on a SQLite
 * file as scripts/dev.ts runs it: `--db-filename`; `both`, the default, runs the whole bench on each),
 * a host agent `h1` (createWorker with LB_BACKEND=haproxy, its own NativeConnection, its background
 * services and host registration) and one real HAProxy balancer placed on it, built as an order's
 * provisioning builds it from the API's process. Then, interleaved call by call, after a warm-up:
 *
 * - `lb.listeners(id)` and `lb.status(id)`: the adapter alone (no routing), the host's local path (a
 *   provider set built as createWorker builds it, placement = self: outage switch, placement lookup,
 *   adapter) and the routed path (a provider set built as the API builds it, no host:
 *   createProviders({ db, config, caller: hostCallerOf(temporal, HOST_CALL_TIMEOUT) }));
 * - a routed call the host refuses at once (`lb._noop`): the Temporal round trip with an empty local activity;
 * - `lb.apply(id, [one listener])` (weights alternate, so each is a real reload), local and routed.
 *
 * Then the server's side of the routed `listeners` calls from their histories: workflow started to
 * workflow task started on the host, the task (the local activity and its marker), completion.
 * Prints p50/p95/p99/mean/max per variant and routed minus local percentile by percentile, and
 * whether a test suite (vitest) ran beside it (looked for every 5 s). Needs PostgreSQL and HAProxy
 * (scripts/ensure-tools.sh), as root or with the right to bind a 127.202.x.0/24 address, like
 * bench/lb.bench.ts. Results: docs/benchmarks.md ("Host calls").
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { tsToMs } from '@temporalio/common/lib/time';
import { bundleWorkflowCode, DefaultLogger, NativeConnection, Runtime } from '@temporalio/worker';
import { loadConfig, type Config } from '../common/config';
import { createLogger } from '../common/logger';
import { hostStatus } from '../domain/hosts/registry';
import { LbProvisioner } from '../domain/lb/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { createProviders } from '../families';
import { hostCallerOf } from '../infra/host-calls';
import { loadKeyring } from '../infra/master-key';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import type { LbListener } from '../providers/lb.provider';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createService } from '../test/helpers/fixtures';
import { createWorker } from '../workers/worker';
import { runMain } from './children';
import { vitestRunning, watchForSuites } from './suite-watch';
import { summarize, type Summary } from './stats';
import { load, localTemporal } from './kit';

const positional = process.argv.slice(2).filter((a) => !a.startsWith('--'));
const CALLS = Number(positional[0] ?? 300);
const APPLIES = Number(positional[1] ?? 30);
const WARMUP = 20;
const APPLY_WARMUP = 3;
const HISTORIES = 100;
const HOST = 'h1';
const TEMPORAL = process.argv.find((a) => a.startsWith('--temporal='))?.slice('--temporal='.length) ?? 'both';
/** Writes every sample (ms) of each run to this JSON file, for histograms. */
const SAMPLES_FILE = process.argv.find((a) => a.startsWith('--samples='))?.slice('--samples='.length);
const allSamples: Record<string, Record<string, number[]>> = {};
if (!['memory', 'sqlite', 'both'].includes(TEMPORAL)) throw new Error(`--temporal=${TEMPORAL}: memory, sqlite or both`);

/** Whether a test suite (vitest) runs on this machine now: from /proc, without a process of our own. */
const ms = (n: number) => `${n.toFixed(n < 100 ? 2 : 0)}`.padStart(8);
const line = (label: string, s: Summary) =>
  `  ${label.padEnd(36)} n=${String(s.n).padEnd(4)} p50 ${ms(s.p50)}  p95 ${ms(s.p95)}  p99 ${ms(s.p99)}  mean ${ms(s.mean)}  max ${ms(s.max)} ms`;
const added = (label: string, routed: Summary, local: Summary) =>
  `  ${`${label}: routed - local`.padEnd(36)}        p50 ${ms(routed.p50 - local.p50)}  p95 ${ms(routed.p95 - local.p95)}  p99 ${ms(routed.p99 - local.p99)}  mean ${ms(routed.mean - local.mean)} ms`;

async function timed(samples: number[] | null, fn: () => Promise<unknown>): Promise<void> {
  const start = process.hrtime.bigint();
  await fn();
  samples?.push(Number(process.hrtime.bigint() - start) / 1e6);
}

/**
 * Runs each variant `warmup + n` times, interleaved (the order rotates every round, so that none
 * always follows another), and returns the timed samples of each.
 */
async function interleaved(variants: Record<string, () => Promise<unknown>>, n: number, warmup: number): Promise<Record<string, number[]>> {
  const names = Object.keys(variants);
  const samples: Record<string, number[]> = Object.fromEntries(names.map((k) => [k, []]));
  for (let i = 0; i < warmup + n; i++) {
    for (let j = 0; j < names.length; j++) {
      const name = names[(i + j) % names.length];
      await timed(i < warmup ? null : samples[name], variants[name]);
    }
  }
  return samples;
}

async function runOn(kind: 'memory' | 'sqlite', workflowBundle: { code: string }): Promise<void> {
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'hosts-bench-'));
  const database = await createTestDatabase();
  const env = await localTemporal(kind === 'sqlite' ? { dbFilename: path.join(scratch, 'temporal.db') } : {});
  // Until the rest is up, a SIGINT undoes what is (replaced by `undo` below).
  cleanUp = async () => {
    await env.teardown();
    await database.drop();
    rmSync(scratch, { recursive: true, force: true });
  };
  const backend = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  const backendPort = (backend.address() as AddressInfo).port;
  const taskQueue = `bench-${randomBytes(4).toString('hex')}`;
  const common = {
    ...process.env,
    DATABASE_URL: database.url,
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TEMPORAL_TASK_QUEUE: taskQueue,
    TEMPORAL_SEARCH_ATTRIBUTES: '1',
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
    LB_BACKEND: 'haproxy',
    DBAAS_BACKEND: 'simulator',
    DNS_BACKEND: 'simulator',
    OBJECTSTORAGE_BACKEND: 'simulator',
    WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
  };
  const lbBindAddress = `127.202.${randomBytes(1)[0] % 250}.0/24`;
  // The host agent: HOST_NAME=h1 HOST_DATA_DIR=<scratch>/h1 LB_BIND_ADDRESS=<range> npm run worker.
  const hostConfig: Config = loadConfig({ ...common, HOST_NAME: HOST, HOST_DATA_DIR: path.join(scratch, HOST), LB_BIND_ADDRESS: lbBindAddress });
  // The API: no host; its own (unused) balancer directory, never the checkout's .data/.
  const apiConfig: Config = loadConfig({ ...common, LB_DATA_DIR: path.join(scratch, 'api-lb'), LB_BIND_ADDRESS: lbBindAddress });
  const logger = createLogger(hostConfig.LOG_LEVEL, 'bench');

  const connection = await NativeConnection.connect({ address: env.address });
  const { worker, background } = await createWorker({ config: hostConfig, db: database.db, logger, connection, taskQueue, workflowBundle });
  for (const service of background) await service.start();
  const running = worker.run();
  const apiTemporal = new TemporalGateway(temporalOptionsOf(apiConfig, taskQueue));
  const hostTemporal = new TemporalGateway({ address: env.address, namespace: 'default', taskQueue, useSearchAttributes: true }, env.client);
  const keyring = await loadKeyring(database.db, apiConfig.CLOUD_MASTER_KEY);
  const caller = hostCallerOf(apiTemporal, apiConfig.HOST_CALL_TIMEOUT, keyring);
  const api = createProviders({ db: database.db, config: apiConfig, caller });
  // The host's own provider set, as createWorker builds it (placement = self: calls run here).
  const local = createProviders({ db: database.db, config: hostConfig, host: HOST, caller: hostCallerOf(hostTemporal, hostConfig.HOST_CALL_TIMEOUT, keyring) });
  const adapter = new HaproxyLbProvider({ dataDir: hostConfig.LB_DATA_DIR, bindAddress: lbBindAddress });
  // Undone once: at the end of this run, or on SIGINT/SIGTERM (runMain).
  let undone: Promise<void> | null = null;
  const undo = () =>
    (undone ??= (async () => {
      worker.shutdown();
      await running.catch((err: unknown) => console.error(err));
      for (const service of background) await service.stop();
      await adapter.destroyAll();
      await apiTemporal.close();
      await connection.close();
      await env.teardown();
      backend.close();
      await database.drop();
      rmSync(scratch, { recursive: true, force: true });
    })());
  cleanUp = undo;
  try {
    if ((await hostStatus(database.db, HOST))?.status !== 'up') throw new Error(`host ${HOST} is not registered up`);
    // One balancer, placed on h1 and built there from the API's process (what an order's provisioning does).
    const { accountId } = await createAccount(database.db);
    const { serviceId } = await createService(database.db, accountId, { family: 'lb', product: 'lb-s', label: 'bench' });
    await new LbProvisioner(database.db, api.lb, api.hosts).provision((await provisionTargetOf(database.db, serviceId))!);
    const placed = await api.hosts.locate(serviceId);
    if (placed?.host !== HOST) throw new Error(`svc_${serviceId} placed on ${placed?.host}, not ${HOST}`);
    const listener = (weight: number): LbListener => ({
      name: 'web',
      protocol: 'http',
      port: 18_080,
      algorithm: 'roundrobin',
      health_check: null,
      backends: [{ ip: '127.0.0.1', port: backendPort, weight }],
    });
    await api.lb.apply(serviceId, [listener(1)]);

    const watch = watchForSuites();
    console.log(`\nTemporal dev server ${kind === 'memory' ? 'in memory' : 'on a SQLite file (--db-filename)'}: svc_${serviceId} on ${HOST}, load ${load()}`);
    const reads = await interleaved(
      {
        listenersAdapter: () => adapter.listeners(serviceId),
        listenersLocal: () => local.lb.listeners(serviceId),
        listenersRouted: () => api.lb.listeners(serviceId),
        statusAdapter: () => adapter.status(serviceId),
        statusLocal: () => local.lb.status(serviceId),
        statusRouted: () => api.lb.status(serviceId),
        emptyRouted: () =>
          caller.call(HOST, { family: 'lb', key: 'lb', method: '_noop', args: [], serviceId }).then(
            () => {
              throw new Error('lb._noop was taken');
            },
            (err: Error) => {
              if (!/not a call this host takes/.test(err.message)) throw err;
            },
          ),
      },
      CALLS,
      WARMUP,
    );
    let weight = 1;
    const applies = await interleaved(
      {
        applyLocal: () => local.lb.apply(serviceId, [listener((weight = 3 - weight))]),
        applyRouted: () => api.lb.apply(serviceId, [listener((weight = 3 - weight))]),
      },
      APPLIES,
      APPLY_WARMUP,
    );
    allSamples[kind] = { ...reads, ...applies };
    const s = Object.fromEntries(Object.entries({ ...reads, ...applies }).map(([k, v]) => [k, summarize(v)]));
    console.log(line('lb.listeners, adapter alone', s.listenersAdapter));
    console.log(line('lb.listeners, local (host = self)', s.listenersLocal));
    console.log(line('lb.listeners, routed (API)', s.listenersRouted));
    console.log(line('lb.status, adapter alone', s.statusAdapter));
    console.log(line('lb.status, local (host = self)', s.statusLocal));
    console.log(line('lb.status, routed (API)', s.statusRouted));
    console.log(line('empty call, routed (refused on host)', s.emptyRouted));
    console.log(line('lb.apply, one listener, local', s.applyLocal));
    console.log(line('lb.apply, one listener, routed', s.applyRouted));
    console.log(added('lb.listeners', s.listenersRouted, s.listenersLocal));
    console.log(added('lb.status', s.statusRouted, s.statusLocal));
    console.log(added('lb.apply', s.applyRouted, s.applyLocal));

    // The server's side of the routed listeners calls, from their histories (server timestamps, ms).
    const startToTask: number[] = [];
    const task: number[] = [];
    const taskToClosed: number[] = [];
    const span: number[] = [];
    let events = 0;
    const runs = env.client.workflow.list({ query: `WorkflowId STARTS_WITH "host-call-${HOST}-lb.listeners-svc_${serviceId}-"` });
    for await (const run of runs) {
      if (span.length >= HISTORIES) break;
      const history = await env.client.workflow.getHandle(run.workflowId, run.runId).fetchHistory();
      const list = history.events ?? [];
      const at = (has: (e: (typeof list)[number]) => unknown) => {
        const e = list.find((x) => has(x));
        return e?.eventTime ? tsToMs(e.eventTime) : NaN;
      };
      const started = at((e) => e.workflowExecutionStartedEventAttributes);
      const taskStarted = at((e) => e.workflowTaskStartedEventAttributes);
      const taskCompleted = at((e) => e.workflowTaskCompletedEventAttributes);
      const closed = at((e) => e.workflowExecutionCompletedEventAttributes);
      startToTask.push(taskStarted - started);
      task.push(taskCompleted - taskStarted);
      taskToClosed.push(closed - taskCompleted);
      span.push(closed - started);
      events += list.length;
    }
    console.log(
      `  server side of ${span.length} routed lb.listeners calls (history timestamps, ms resolution; ${(events / span.length).toFixed(1)} events each):`,
    );
    console.log(line('  started -> task started on host', summarize(startToTask)));
    console.log(line('  task started -> completed', summarize(task)));
    console.log(line('  task completed -> closed', summarize(taskToClosed)));
    console.log(line('  started -> closed', summarize(span)));
    allSamples[kind].serverStartToTask = startToTask;
    allSamples[kind].serverTask = task;
    console.log(`  load ${load()}; ${watch.stop()}`);
  } finally {
    await undo();
  }
}

/** What the run in progress started, undone once (runOn sets it). */
let cleanUp: () => Promise<void> = async () => undefined;

async function main() {
  Runtime.install({ logger: new DefaultLogger('ERROR') });
  console.log(
    `hosts bench: ${CALLS} calls per read variant, ${APPLIES} applies per path (warm-up ${WARMUP} and ${APPLY_WARMUP}), ${os.cpus().length} x ${os.cpus()[0]?.model}, Node ${process.version}, load ${load()}, vitest running: ${(await vitestRunning()) ? 'yes' : 'no'}`,
  );
  const workflowBundle = { code: (await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: Runtime.instance().logger })).code };
  for (const kind of TEMPORAL === 'both' ? (['memory', 'sqlite'] as const) : [TEMPORAL as 'memory' | 'sqlite']) await runOn(kind, workflowBundle);
  if (SAMPLES_FILE) writeFileSync(SAMPLES_FILE, JSON.stringify(allSamples));
}

runMain(main, () => cleanUp());
