/**
 * Serverless primitives (issue #27): kv requests/s through the data plane against redis-benchmark on
 * the same Redis, function invocation latency through the data plane against the tenant's workerd
 * socket, and cron firing lateness.
 *
 *   npx tsx bench/serverless.bench.ts [--parts=kv,functions,cron] [--duration=5] [--warmup=1] [--rounds=3]
 *       [--connections=50] [--keys=10000] [--kv-ops=get,put] [--kv-processes=1,2] [--busy-cores=0.15] [--busy-retries=3]
 *       [--fn-concurrency=1,10] [--schedules=10] [--interval=60] [--cron-seconds=300] [--cron-rounds=1]
 *   npx tsx bench/serverless.bench.ts --parts=kv --duration=2 --rounds=1     # a quick look
 *   npx tsx bench/serverless.bench.ts --parts=functions --cpu-prof=/tmp/prof  # a V8 profile of the plane (bench/cpu-profile.ts)
 *   npx tsx bench/serverless.bench.ts --parts=cron --interval=1 --schedules=1 --cron-seconds=120   # one schedule every second, firing by firing
 *   BENCH_DUMP_SCHEDULER=1 npx tsx bench/serverless.bench.ts --parts=cron --interval=2 --cron-seconds=10   # ... and its scheduler workflow's events
 *
 * Set-up, without vitest: a fresh database (createTestDatabase); one account per primitive with a
 * serverless service (`services` row family `other`, product `serverless-<primitive>` (the paid
 * plans: no hard cap, so no quota read per request), product_family `serverless`) built by
 * `ServerlessProvisioner`, and a data-plane token (`rotateTokens`). The data plane runs in a process
 * of its own: this file with `--child=plane`, which wires and serves it as `npm run serverless` does
 * (`serverlessPlaneOf` and `listenServerless` of dataplane/serverless/main.ts: Redis started
 * daemonised in SERVERLESS_DATA_DIR/redis, workerd sandboxes under bubblewrap, its children, and
 * SERVERLESS_KV_PROCESSES - 1 kv helper processes) on a temporary SERVERLESS_DATA_DIR, and answers
 * `inspect` over IPC with the workerd process of a tenant (`WorkerdRuntime.inspect`) and `pids` with
 * its processes. The load comes from `wrk` (Debian; one thread, keep-alive, a Lua script that prints
 * wrk's own summary as JSON) and `redis-benchmark`, processes of their own: a Node load generator
 * costs as much CPU as the plane on these 2 cores (docs/research/serverless-backends.md).
 *
 * 1. kv: `GET` and `PUT /kv/v1/ns/bench/keys/k<n>` (Bearer kvt_), n uniform over `--keys` names, 64-byte
 *    values (every key written beforehand), `wrk -t1 -c<connections>`, against
 *    `redis-benchmark -t get|set -c <connections> -d 64 -r <keys>` logged in as the admin user
 *    (`adminConnection()`) on the same Redis: the same concurrency on both sides, one request in
 *    flight per connection (neither pipelines). `--warmup` s then `--duration` s per wrk window;
 *    redis-benchmark's request count is set from a warm-up run so that it lasts about as long. For
 *    each of `--kv-processes` (the plane's SERVERLESS_KV_PROCESSES, a fresh plane each, the same
 *    Redis and data) `--rounds` rounds whose order rotates; the median round counts. A window in
 *    which the machine's other processes used more than `--busy-cores` is run again, up to
 *    `--busy-retries` times (each window prints its "others"). Target: the plane >= 50 % of
 *    redis-benchmark, GET against GET and PUT against SET.
 * 2. functions: a hello-world module deployed with `PUT /functions/v1/functions/hello`, invoked at its
 *    public URL `/functions/run/<handle>/hello` and directly on the tenant's workerd socket
 *    (`inspect(handle).port`) with the header the runtime adds (`cf-fn-name: hello`, which the router
 *    worker dispatches on; providers/workerd/config.ts, proxy.ts), `wrk -t1 -c<n>` for each of
 *    `--fn-concurrency`, same windows and rounds, on the plane the kv part left (its last
 *    SERVERLESS_KV_PROCESSES). Target: < 2 ms added at p50 (median rounds).
 * 3. cron: the data plane again (a fresh child) with a Temporal dev server (.tools/, in memory) and the
 *    worker as `npm run worker` runs it (`workers/main.ts`, its own process, simulated backends, the
 *    same CLOUD_MASTER_KEY), CRON_MIN_INTERVAL=1 and ALLOW_INSECURE_TARGETS=1. `--schedules`
 *    schedules of one tenant, `POST /cron/v1/schedules {interval_seconds: <--interval>}` (by default
 *    60, the product's minimum), each POSTing to its own path of a node:http receiver in this
 *    process, for `--cron-seconds`, then deleted (`--cron-rounds` times). From 10 s intervals on, the
 *    schedules are made 2 s after a firing time and deleted half an interval after the last firing
 *    counted. Lateness = arrival (wall clock) - the run's `serverless_cron_runs.scheduled_at`
 *    (Temporal's TemporalScheduledStartTime: interval schedules fire on whole multiples of the
 *    interval since the epoch, checked), arrivals matched to delivered runs per schedule
 *    (`Cloud-Schedule` header) in order. Where it goes: `started_at` (the claim's transaction start,
 *    in the activity) splits it in two; the workflow histories of up to `--histories` runs split the
 *    first part at their events; and the first schedule's own scheduler workflow
 *    (`temporal-sys-scheduler:serverless-cron:<id>`) gives how long its timers asked to sleep and how
 *    long they slept. Target: p99 < 1 s, over the firings of every round.
 *
 * CPU per request from /proc: the plane, Redis, workerd, the load generator (this process's reaped
 * children). Whether a test suite ran beside the bench is printed (looked for every 5 s). The
 * database, the temporary directory, Redis, the sandboxes and every process started are removed at
 * the end, and on SIGINT/SIGTERM. Needs PostgreSQL (scripts/ensure-tools.sh), wrk and
 * redis-benchmark (Debian). Results: docs/benchmarks.md ("Serverless primitives").
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import type { Knex } from 'knex';
import { loadConfig } from '../common/config';
import { createDb } from '../db/knex';
import { listenServerless, serverlessDirs, serverlessPlaneOf } from '../dataplane/serverless/main';
import type { Primitive } from '../domain/serverless/plans';
import { ServerlessProvisioner } from '../domain/serverless/provisioner';
import { rotateTokens } from '../domain/serverless/manage';
import { temporalScheduleId } from '../domain/serverless/cron';
import { findTenant } from '../domain/serverless/store';
import { provisionTargetOf } from '../domain/provisioning';
import { TemporalGateway, temporalOptionsOf } from '../infra/temporal';
import { freeLoopbackPort } from '../providers/local-server';
import { RedisServer, redisAdminConnection, stopRedisServer } from '../providers/redis/redis.server';
import { WorkerdRuntime } from '../providers/workerd/runtime';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createService } from '../test/helpers/fixtures';
import { ask, exitWithParent, runMain, startChild, type Child, type ChildMessage } from './children';
import { childPidsByName, cpuDelta, cpuSnapshot, pgBackendPids, procCpuSeconds, processTree } from './cpu';
import { median, summarize, type Summary } from './stats';
import { vitestRunning, watchForSuites } from './suite-watch';
import { load, now, sleep, verdict, localTemporal } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const list = (s: string) => s.split(',').filter(Boolean);
const PARTS = list(arg('parts', 'kv,functions,cron'));
const DURATION_S = Math.max(1, Math.round(Number(arg('duration', '5'))));
const WARMUP_S = Math.round(Number(arg('warmup', '1')));
const ROUNDS = Number(arg('rounds', '3'));
const CONNECTIONS = Number(arg('connections', '50'));
const KEYS = Number(arg('keys', '10000'));
/** Which kv operations: `get` (GET against redis-benchmark's GET), `put` (PUT against SET). */
const KV_OPS = list(arg('kv-ops', 'get,put'));
/** The plane's SERVERLESS_KV_PROCESSES, one kv measurement each (the functions part runs with the last). */
const KV_PROCESSES = list(arg('kv-processes', '1,2')).map(Number);
/** A load window in which the machine's other processes used more cores than this is run again (at most BUSY_RETRIES times). */
const BUSY_CORES = Number(arg('busy-cores', '0.15'));
const BUSY_RETRIES = Number(arg('busy-retries', '3'));
const VALUE_BYTES = 64;
const FN_CONCURRENCY = list(arg('fn-concurrency', '1,10')).map(Number);
const SCHEDULES = Number(arg('schedules', '10'));
const CRON_SECONDS = Number(arg('cron-seconds', '300'));
const CRON_ROUNDS = Number(arg('cron-rounds', '1'));
/** The schedules' `interval_seconds`: by default the product's minimum (CRON_MIN_INTERVAL, DECISIONS: 60). */
const INTERVAL_S = Number(arg('interval', '60'));
/** Runs per cron round whose Temporal history is read, for the split of the lateness. */
const HISTORIES = Number(arg('histories', '40'));
const CHILD = arg('child', '');
/** A directory for a V8 CPU profile of the data plane (written when its child stops). */
const CPU_PROF = arg('cpu-prof', '');
/** `--perf-map`: the plane writes /tmp/perf-<pid>.map, so `perf record` names its JavaScript functions. */
const PERF_MAP = process.argv.includes('--perf-map');
const KV_TARGET = 0.5;
const FN_TARGET_MS = 2;
const CRON_TARGET_MS = 1_000;
const root = path.resolve(__dirname, '..');

/** Wall clock with sub-millisecond resolution, comparable with PostgreSQL's and Temporal's clocks on this machine. */
const wall = () => performance.timeOrigin + performance.now();
const f = (n: number, width = 8) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0) : '-').padStart(width);
const int = (n: number) => Math.round(n).toLocaleString('en-US');
const pct = (ratio: number) => `${(ratio * 100).toFixed(1)} %`;

/** CPU seconds of this process's children that have exited and been waited for (wrk, redis-benchmark). */
function reapedChildrenCpuSeconds(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[13]) + Number(fields[14])) / 100; // cutime + cstime
}

// --- the load generators ------------------------------------------------------------------------

/** Every process the bench started that may still run (killed on SIGINT). */
const running = new Set<ChildProcess>();

function runTool(command: string, args: string[]): Promise<{ stdout: string; stderr: string; code: number | null }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    running.add(child);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    child.once('error', (err) => {
      running.delete(child);
      reject(err);
    });
    child.once('close', (code) => {
      running.delete(child);
      resolve({ stdout, stderr, code });
    });
  });
}

/** A wrk run: answers/s, latency in ms (wrk's own histogram), errors. */
interface WrkResult {
  rate: number;
  requests: number;
  seconds: number;
  p50: number;
  p99: number;
  mean: number;
  max: number;
  /** Non-2xx/3xx answers (wrk: status > 399) and socket errors. */
  status: number;
  socket: number;
}

/** The Lua every wrk run loads: its `done` prints wrk's summary as one JSON line (latencies in µs). */
const WRK_DONE = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRK {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,"p50":%d,"p99":%d,"mean":%.3f,"max":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
`;

function wrkScript(dir: string, name: string, body: string): string {
  const file = path.join(dir, `${name}.lua`);
  writeFileSync(file, `${body}\n${WRK_DONE}`);
  return file;
}

async function wrk(url: string, script: string, connections: number, seconds: number): Promise<WrkResult> {
  const out = await runTool('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '5s', '-s', script, url]);
  const line = out.stdout.split('\n').find((l) => l.startsWith('WRK '));
  if (out.code !== 0 || !line) throw new Error(`wrk ${url} exited ${out.code}: ${out.stderr || out.stdout}`);
  const r = JSON.parse(line.slice(4)) as Record<string, number>;
  const secs = r.duration_us / 1e6;
  return {
    rate: r.requests / secs,
    requests: r.requests,
    seconds: secs,
    p50: r.p50 / 1000,
    p99: r.p99 / 1000,
    mean: r.mean / 1000,
    max: r.max / 1000,
    status: r.status,
    socket: r.connect + r.read + r.write + r.timeout,
  };
}

interface RbResult {
  rate: number;
  requests: number;
  seconds: number;
  p50: number;
  p99: number;
}

/** redis-benchmark, one test, logged in as the admin user; its CSV line. */
async function redisBenchmark(
  admin: { host: string; port: number; username: string; password: string },
  test: 'get' | 'set',
  requests: number,
): Promise<RbResult> {
  const out = await runTool('redis-benchmark', [
    '-h',
    admin.host,
    '-p',
    String(admin.port),
    '--user',
    admin.username,
    '-a',
    admin.password,
    '-t',
    test,
    '-c',
    String(CONNECTIONS),
    '-d',
    String(VALUE_BYTES),
    '-r',
    String(KEYS),
    '-n',
    String(requests),
    '--csv',
  ]);
  const line = out.stdout.split('\n').find((l) => l.startsWith(`"${test.toUpperCase()}"`));
  if (out.code !== 0 || !line) throw new Error(`redis-benchmark -t ${test} exited ${out.code}: ${out.stderr || out.stdout}`);
  const cells = line.split(',').map((c) => Number(c.replace(/"/g, '')));
  // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  return { rate: cells[1], requests, seconds: requests / cells[1], p50: cells[4], p99: cells[6] };
}

// --- the data plane's child: this file with --child=plane ------------------------------------------

/** `--child=plane`: the data planes wired as dataplane/serverless/main.ts wires them; answers `inspect` with a tenant's workerd process. */
async function planeChild(): Promise<void> {
  const config = loadConfig();
  const db = createDb(config.DATABASE_URL);
  const temporal = new TemporalGateway(temporalOptionsOf(config));
  let errors = 0;
  const plane = await serverlessPlaneOf(config, {
    db,
    temporal,
    onError: (err) => {
      if (errors++ < 5) console.error(`plane error: ${err.message}`);
    },
  });
  // As `npm run serverless` serves it: SERVERLESS_KV_PROCESSES - 1 kv helpers beside this process.
  const url = await listenServerless(config, plane, (err) => console.error(`plane: ${err.message}`));
  // The runtime serverlessPlaneOf made (the plane keeps it private): for `inspect`, nothing else.
  const runtime = (plane.functions as unknown as { deps: { runtime: unknown } } | null)?.deps.runtime;
  if (!(runtime instanceof WorkerdRuntime)) throw new Error('the plane has no workerd runtime');
  process.on('message', (m: ChildMessage) => {
    if (m.type === 'inspect') process.send!({ type: 'inspected', workerd: runtime.inspect(String(m.handle)) });
    if (m.type === 'errors') process.send!({ type: 'errors-count', errors });
    if (m.type === 'pids') process.send!({ type: 'pids', pids: [process.pid, ...plane.helperPids()] });
  });
  exitWithParent(async () => {
    await plane.close();
    await temporal.close();
    await db.destroy();
  });
  process.send!({ type: 'ready', url });
}

// --- the bench ----------------------------------------------------------------------------------

interface Tenant {
  serviceId: number;
  handle: string;
  token: string;
}

async function newTenant(db: Knex, base: string, primitive: Primitive): Promise<Tenant> {
  const { accountId } = await createAccount(db);
  const { serviceId } = await createService(db, accountId, { family: 'other', product: `serverless-${primitive}` });
  await db('services').where({ id: serviceId }).update({ product_family: 'serverless' });
  await new ServerlessProvisioner(db, base).provision((await provisionTargetOf(db, serviceId))!);
  const tenant = (await findTenant(db, serviceId))!;
  const { token } = await rotateTokens(db, tenant, 0);
  return { serviceId, handle: tenant.handle, token };
}

/** `fn` over `items`, `concurrency` at a time. */
async function pool<T>(items: T[], concurrency: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < items.length) await fn(items[next++]);
    }),
  );
}

interface KvRow {
  name: string;
  plane: WrkResult;
  redis: RbResult;
  /** CPU ms per request: the plane, its Redis and wrk in the plane's run; Redis and redis-benchmark in redis-benchmark's. */
  cpu: { plane: number; planeRedis: number; wrk: number; redis: number; redisBenchmark: number };
  cores: { plane: Record<string, number>; redis: Record<string, number> };
}

interface FnRow {
  concurrency: number;
  direct: WrkResult;
  through: WrkResult;
  cpu: { directWorkerd: number; throughWorkerd: number; throughPlane: number };
}

interface CronRound {
  firings: number;
  lateness: Summary;
  /** Every firing's lateness (ms): the verdict pools the rounds. */
  samples: number[];
  toClaim: Summary;
  claimToArrival: Summary;
  missed: number;
  offGrid: number;
  unmatched: number;
  outcomes: Record<string, number>;
  cores: Record<string, number>;
  /** From the histories of a sample of the runs: the time between their events. */
  stages: Record<string, Summary>;
  /** The first schedule's scheduler workflow: its timers' asked and actual durations. */
  timers: { asked: Summary; slept: Summary };
}

async function main(): Promise<void> {
  const watch = watchForSuites();
  const cores = os.availableParallelism();
  // `wrk -v` prints its version and exits 1.
  const tool = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    return r.error ? `${cmd} missing` : `${r.stdout}${r.stderr}`.split('\n')[0].trim();
  };
  console.log(
    `serverless bench: ${cores} x ${os.cpus()[0]?.model}, Node ${process.version}, ${tool('redis-server', ['--version'])}, ${tool('wrk', ['-v']).split(' [')[0]}; ` +
      `load ${load()}, vitest running now: ${await vitestRunning()}; parts ${PARTS.join(',')}; ${DURATION_S} s windows after ${WARMUP_S} s, ${ROUNDS} rounds`,
  );
  const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
  const dirty =
    git(
      'status',
      '--porcelain',
      '--',
      'dataplane/serverless',
      'domain/serverless',
      'providers/redis',
      'providers/workerd',
      'workflows/serverless',
      'activities/serverless',
    ) !== '';
  console.log(`commit ${git('rev-parse', '--short', 'HEAD')}${dirty ? ' with uncommitted changes in the serverless code' : ''}`);

  const database = await createTestDatabase();
  const db = database.db;
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'serverless-bench-'));
  chmodSync(scratch, 0o711); // the functions' sandboxes (uid 65534) pass through it
  const dataDir = path.join(scratch, 'serverless');
  mkdirSync(dataDir, { mode: 0o711 });
  chmodSync(dataDir, 0o711);
  const redisDir = serverlessDirs({ SERVERLESS_DATA_DIR: dataDir }).redis;
  const masterKey = randomBytes(32).toString('hex');
  const planePort = await freeLoopbackPort();
  const base = `http://127.0.0.1:${planePort}`;
  let plane = null as Child | null;
  let env: TestWorkflowEnvironment | null = null;
  let worker: ChildProcess | null = null;
  let receiver: http.Server | null = null;
  let cleaned: Promise<void> | null = null;
  cleanUp = () =>
    (cleaned ??= (async () => {
      for (const c of running) c.kill('SIGKILL');
      await plane?.stop().catch(() => undefined);
      const w = worker;
      if (w && w.exitCode === null && w.signalCode === null) {
        const exited = new Promise((resolve) => w.once('exit', resolve));
        w.kill('SIGTERM');
        const timer = setTimeout(() => w.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
      const r = receiver;
      if (r) {
        r.closeAllConnections();
        await new Promise((resolve) => r.close(resolve));
      }
      await env?.teardown().catch(() => undefined);
      await stopRedisServer(redisDir).catch((err: Error) => console.error(`stopping Redis: ${err.message}`));
      await rm(scratch, { recursive: true, force: true });
      await database.drop();
    })());

  const planeEnv = (extra: Record<string, string> = {}) => ({
    DATABASE_URL: database.url,
    HOST: '127.0.0.1',
    SERVERLESS_PORT: String(planePort),
    SERVERLESS_DATA_DIR: dataDir,
    KV_BACKEND: 'redis',
    CLOUD_MASTER_KEY: masterKey,
    ALLOW_INSECURE_TARGETS: '1',
    CRON_MIN_INTERVAL: '1',
    LOG_LEVEL: 'warn',
    NODE_ENV: 'development',
    ...extra,
  });
  const startPlane = async (extra: Record<string, string> = {}) => {
    const started = now();
    const profile = [...(CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF)}`] : []), ...(PERF_MAP ? ['--perf-basic-prof'] : [])];
    const child = await startChild(__filename, ['--child=plane'], { env: planeEnv(extra), execArgv: profile });
    console.log(`data plane: --child=plane (pid ${child.child.pid}) at ${String(child.ready.url)}, ready after ${f(now() - started, 0).trim()} ms`);
    // A plane that dies under load is a finding, not the bench's end: noted, and the next part gets a new one.
    child.child.on('error', () => undefined);
    let stopping = false;
    const stop = child.stop;
    child.stop = () => {
      stopping = true;
      return stop();
    };
    child.child.once('exit', (code, signal) => {
      if (stopping) return;
      const what = `the data plane (pid ${child.child.pid}) exited (${signal ?? code}) during ${part}`;
      console.log(`  ${what}`);
      deaths.push(what);
    });
    return child;
  };
  let part = 'start-up';
  const deaths: string[] = [];
  const alive = (c: Child | null): c is Child => c !== null && c.child.exitCode === null && c.child.signalCode === null;
  /** The plane of the part about to start: the one running, or a new one when it died. */
  const planeFor = async (name: string, extra: Record<string, string> = {}) => {
    part = name;
    if (!alive(plane)) plane = await startPlane(extra);
    return plane;
  };
  // An exception nobody catches (a child's IPC, a socket) still removes what the run started.
  process.once('uncaughtException', (err) => {
    console.error(err);
    void cleanUp().finally(() => process.exit(1));
  });

  const kvRows: KvRow[] = [];
  const fnRows: FnRow[] = [];
  const cronRounds: CronRound[] = [];
  const verdicts: { label: string; ok: boolean; detail: string }[] = [];
  try {
    const kvTenant = PARTS.includes('kv') ? await newTenant(db, base, 'kv') : null;
    const fnTenant = PARTS.includes('functions') ? await newTenant(db, base, 'functions') : null;
    const cronTenant = PARTS.includes('cron') ? await newTenant(db, base, 'cron') : null;
    console.log(`database ${new URL(database.url).pathname.slice(1)}, scratch ${scratch}`);

    // 1. kv ------------------------------------------------------------------------------------
    if (kvTenant) {
      const keyUrl = (n: number) => `${base}/kv/v1/ns/bench/keys/k${n}`;
      const value = randomBytes(VALUE_BYTES / 2).toString('hex');
      const redisFound = async () => {
        const found = await RedisServer.find(redisDir);
        if (!found) throw new Error(`no Redis running in ${redisDir}`);
        return found;
      };
      const admin = () => redisAdminConnection(redisDir)!;
      const scripts = {
        get: wrkScript(
          scratch,
          'kv-get',
          `wrk.headers["Authorization"] = "Bearer ${kvTenant.token}"
math.randomseed(27)
request = function() return wrk.format("GET", "/kv/v1/ns/bench/keys/k" .. math.random(0, ${KEYS - 1})) end`,
        ),
        put: wrkScript(
          scratch,
          'kv-put',
          `wrk.headers["Authorization"] = "Bearer ${kvTenant.token}"
wrk.headers["Content-Type"] = "application/octet-stream"
local body = "${value}"
math.randomseed(27)
request = function() return wrk.format("PUT", "/kv/v1/ns/bench/keys/k" .. math.random(0, ${KEYS - 1}), nil, body) end`,
        ),
      };
      let rbRequests = 0;
      for (const [index, kvProcesses] of KV_PROCESSES.entries()) {
        // A plane with this many kv processes (SERVERLESS_KV_PROCESSES), the Redis and its data staying.
        if (plane) await plane.stop();
        plane = null;
        const current = await planeFor('kv', { SERVERLESS_KV_PROCESSES: String(kvProcesses) });
        const { pids: planePids } = (await ask(current.child, { type: 'pids' }, 'pids')) as unknown as { pids: number[] };
        if (index === 0) {
          const started = now();
          await pool(
            Array.from({ length: KEYS }, (_, i) => i),
            32,
            async (n) => {
              const res = await fetch(keyUrl(n), { method: 'PUT', headers: { authorization: `Bearer ${kvTenant.token}` }, body: value });
              await res.arrayBuffer();
              if (res.status !== 204) throw new Error(`PUT k${n}: ${res.status}`);
            },
          );
          const check = await fetch(keyUrl(KEYS - 1), { headers: { authorization: `Bearer ${kvTenant.token}` } });
          if ((await check.text()) !== value) throw new Error('GET did not answer the value PUT');
          console.log(`\n1. kv: ${KEYS} keys of ${VALUE_BYTES} bytes written in ${f(now() - started, 0).trim()} ms (fetch, 32 at a time)`);
          // redis-benchmark runs a request count: sized from a warm-up run to last about a window.
          const calibrate = await redisBenchmark(admin(), 'set', 100_000);
          rbRequests = Math.max(10_000, Math.round((calibrate.rate * DURATION_S) / 1000) * 1000);
          console.log(`  redis-benchmark warm-up SET ${int(calibrate.rate)}/s: ${int(rbRequests)} requests per run`);
        }
        const redis = await redisFound();
        console.log(
          `  SERVERLESS_KV_PROCESSES=${kvProcesses}: the plane's processes ${planePids.join(', ')}; Redis ${redis.host}:${redis.port} (pid ${redis.pid}); ` +
            `wrk -t1 -c${CONNECTIONS} and redis-benchmark -c ${CONNECTIONS} (one request in flight per connection, no pipelining), ` +
            `${DURATION_S} s after ${WARMUP_S} s; load ${load()}`,
        );
        const groups = { plane: () => planePids, redis: () => [redis.pid] };
        type Measured<T> = { result: T; cpu: Record<string, number>; cores: Record<string, number>; repeated: number };
        const measureOnce = async <T extends { requests: number; seconds: number }>(fn: () => Promise<T>): Promise<Measured<T>> => {
          const before: Record<string, number> = { ...cpuSnapshot(groups), loader: reapedChildrenCpuSeconds() };
          const t0 = now();
          const result = await fn();
          const seconds = (now() - t0) / 1000;
          const after: Record<string, number> = { ...cpuSnapshot(groups), loader: reapedChildrenCpuSeconds() };
          const cpu = Object.fromEntries(['plane', 'redis', 'loader'].map((k) => [k, ((after[k] - before[k]) * 1000) / Math.max(1, result.requests)]));
          return { result, cpu, cores: cpuDelta(before, after, seconds), repeated: 0 };
        };
        // A window in which other processes of the machine (a test suite, another engineer's build)
        // took more than BUSY_CORES is run again, up to BUSY_RETRIES times: on 2 cores they change
        // the ratio either way. The last one counts whatever it saw (its "others" are printed).
        const measured = async <T extends { requests: number; seconds: number }>(fn: () => Promise<T>): Promise<Measured<T>> => {
          for (let attempt = 0; ; attempt++) {
            const m = await measureOnce(fn);
            if ((m.cores.others ?? 0) <= BUSY_CORES || attempt >= BUSY_RETRIES) return { ...m, repeated: attempt };
            await sleep(5_000);
          }
        };
        const planeWindow = (script: string) => async () => {
          if (WARMUP_S > 0) await wrk(base, script, CONNECTIONS, WARMUP_S);
          return wrk(base, script, CONNECTIONS, DURATION_S);
        };
        const variants: Record<string, () => Promise<Measured<WrkResult | RbResult>>> = {
          'plane GET': () => measured(planeWindow(scripts.get)),
          'plane PUT': () => measured(planeWindow(scripts.put)),
          'redis GET': () => measured(() => redisBenchmark(admin(), 'get', rbRequests)),
          'redis SET': () => measured(() => redisBenchmark(admin(), 'set', rbRequests)),
        };
        const names = Object.keys(variants).filter((n) => KV_OPS.includes(n.endsWith('GET') ? 'get' : 'put'));
        const rounds: Record<string, Measured<WrkResult | RbResult>[]> = Object.fromEntries(names.map((n) => [n, []]));
        for (let round = 0; round < ROUNDS; round++) {
          const line: string[] = [];
          for (let j = 0; j < names.length; j++) {
            const name = names[(round + j) % names.length];
            const m = await variants[name]();
            rounds[name].push(m);
            const w = m.result as Partial<WrkResult>;
            line.push(
              `${name} ${int(m.result.rate)}/s${w.status || w.socket ? ` (NOT 2xx ${w.status}, socket errors ${w.socket})` : ''}` +
                ` [others ${(m.cores.others ?? 0).toFixed(2)}${m.repeated ? `, run ${m.repeated + 1} times` : ''}]`,
            );
          }
          console.log(`  round ${round + 1}: ${line.join(', ')}  [load ${load()}]`);
        }
        const medianOf = (name: string) => {
          const rates = rounds[name].map((m) => m.result.rate);
          return rounds[name][rates.indexOf(median(rates))];
        };
        for (const [label, planeName, redisName] of [
          ['GET', 'plane GET', 'redis GET'],
          ['PUT / SET', 'plane PUT', 'redis SET'],
        ] as const) {
          if (!names.includes(planeName)) continue;
          const p = medianOf(planeName);
          const r = medianOf(redisName);
          const row: KvRow = {
            name: `${label}, ${kvProcesses} kv process${kvProcesses === 1 ? '' : 'es'}`,
            plane: p.result as WrkResult,
            redis: r.result as RbResult,
            cpu: { plane: p.cpu.plane, planeRedis: p.cpu.redis, wrk: p.cpu.loader, redis: r.cpu.redis, redisBenchmark: r.cpu.loader },
            cores: { plane: p.cores, redis: r.cores },
          };
          kvRows.push(row);
          const ratio = row.plane.rate / row.redis.rate;
          const perRound = rounds[planeName].map((m, i) => (m.result.rate / rounds[redisName][i].result.rate).toFixed(2)).join(', ');
          console.log(
            `  ${row.name}: plane ${f(row.plane.rate)}/s p50 ${f(row.plane.p50, 5)} p99 ${f(row.plane.p99, 5)} ms; redis-benchmark ${f(row.redis.rate)}/s p50 ${f(row.redis.p50, 5)} p99 ${f(row.redis.p99, 5)} ms; ` +
              `ratio ${pct(ratio)} (round by round ${perRound})`,
          );
          console.log(
            `            CPU ms/request: plane ${f(p.cpu.plane, 5)}, its Redis ${f(p.cpu.redis, 5)}, wrk ${f(p.cpu.loader, 5)}; redis-benchmark's Redis ${f(r.cpu.redis, 5)}, ` +
              `redis-benchmark ${f(r.cpu.loader, 5)}; cores plane run ${JSON.stringify(p.cores)}, redis-benchmark run ${JSON.stringify(r.cores)}`,
          );
          verdicts.push({
            label: `kv ${row.name} through the data plane >= ${KV_TARGET * 100} % of redis-benchmark`,
            ok: ratio >= KV_TARGET,
            detail: `${pct(ratio)} (round by round ${perRound})`,
          });
        }
      }
    }

    if (kvTenant && alive(plane)) {
      const { errors } = (await ask(plane.child, { type: 'errors' }, 'errors-count')) as unknown as { errors: number };
      if (errors > 0) console.log(`  the plane reported ${errors} errors to onError (the first 5 printed above)`);
    }

    // 2. functions -----------------------------------------------------------------------------
    if (fnTenant) {
      // The plane as the kv part left it (its last SERVERLESS_KV_PROCESSES): function calls are the main process's either way.
      const plane = await planeFor('functions', { SERVERLESS_KV_PROCESSES: String(KV_PROCESSES[KV_PROCESSES.length - 1] ?? 1) });
      const hello = "export default { fetch() { return new Response('Hello, world!'); } };";
      const deployed = await fetch(`${base}/functions/v1/functions/hello`, {
        method: 'PUT',
        headers: { authorization: `Bearer ${fnTenant.token}` },
        body: hello,
      });
      const deployText = await deployed.text();
      if (deployed.status !== 201) throw new Error(`deploy: ${deployed.status} ${deployText}`);
      const { workerd } = (await ask(plane.child, { type: 'inspect', handle: fnTenant.handle }, 'inspected')) as unknown as {
        workerd: { bwrapPid: number; workerdPid: number | null; port: number } | null;
      };
      if (!workerd) throw new Error('the plane has no workerd process for the tenant');
      const throughUrl = `${base}/functions/run/${fnTenant.handle}/hello`;
      const directUrl = `http://127.0.0.1:${workerd.port}/`;
      const a = await fetch(throughUrl);
      const b = await fetch(directUrl, { headers: { 'cf-fn-name': 'hello' } });
      const [ta, tb] = [await a.text(), await b.text()];
      if (a.status !== 200 || b.status !== 200 || ta !== 'Hello, world!' || tb !== ta)
        throw new Error(`hello: through ${a.status} ${ta}, direct ${b.status} ${tb}`);
      const scripts = {
        direct: wrkScript(scratch, 'fn-direct', 'wrk.headers["cf-fn-name"] = "hello"'),
        through: wrkScript(scratch, 'fn-through', ''),
      };
      const planePid = plane.child.pid!;
      const workerdPids = () => (workerd.workerdPid ? [workerd.workerdPid] : processTree(workerd.bwrapPid));
      console.log(
        `\n2. functions: hello world (${hello.length} bytes) at ${throughUrl} against workerd's socket 127.0.0.1:${workerd.port} with cf-fn-name: hello ` +
          `(workerd pid ${workerd.workerdPid}, bwrap ${workerd.bwrapPid}); wrk -t1, ${DURATION_S} s after ${WARMUP_S} s; load ${load()}`,
      );
      for (const concurrency of FN_CONCURRENCY) {
        const rounds: Record<'direct' | 'through', Array<{ r: WrkResult; workerd: number; plane: number }>> = { direct: [], through: [] };
        for (let round = 0; round < ROUNDS; round++) {
          const order = round % 2 === 0 ? (['direct', 'through'] as const) : (['through', 'direct'] as const);
          const line: string[] = [];
          for (const name of order) {
            const url = name === 'direct' ? directUrl : throughUrl;
            if (WARMUP_S > 0) await wrk(url, scripts[name], concurrency, WARMUP_S);
            const w0 = workerdPids().reduce((s, p) => s + procCpuSeconds(p), 0);
            const p0 = procCpuSeconds(planePid);
            const r = await wrk(url, scripts[name], concurrency, DURATION_S);
            const w1 = workerdPids().reduce((s, p) => s + procCpuSeconds(p), 0);
            const p1 = procCpuSeconds(planePid);
            rounds[name].push({ r, workerd: ((w1 - w0) * 1000) / Math.max(1, r.requests), plane: ((p1 - p0) * 1000) / Math.max(1, r.requests) });
            line.push(
              `${name} p50 ${f(r.p50, 4).trim()} p99 ${f(r.p99, 4).trim()} ms ${int(r.rate)}/s${r.status || r.socket ? ` (NOT 2xx ${r.status}, socket errors ${r.socket})` : ''}`,
            );
          }
          console.log(`  c${concurrency} round ${round + 1}: ${line.join('; ')}  [load ${load()}]`);
        }
        const medianBy = (name: 'direct' | 'through') => {
          const p50s = rounds[name].map((x) => x.r.p50);
          return rounds[name][p50s.indexOf(median(p50s))];
        };
        const d = medianBy('direct');
        const t = medianBy('through');
        const p99 = (name: 'direct' | 'through') => median(rounds[name].map((x) => x.r.p99));
        const rate = (name: 'direct' | 'through') => median(rounds[name].map((x) => x.r.rate));
        fnRows.push({
          concurrency,
          direct: { ...d.r, p99: p99('direct'), rate: rate('direct') },
          through: { ...t.r, p99: p99('through'), rate: rate('through') },
          cpu: { directWorkerd: d.workerd, throughWorkerd: t.workerd, throughPlane: t.plane },
        });
        const added = t.r.p50 - d.r.p50;
        const perRound = rounds.through.map((x, i) => (x.r.p50 - rounds.direct[i].r.p50).toFixed(2)).join(', ');
        console.log(
          `  c${concurrency} medians: direct p50 ${f(d.r.p50, 5)} p99 ${f(p99('direct'), 5)} ms ${f(rate('direct'))}/s; through p50 ${f(t.r.p50, 5)} p99 ${f(p99('through'), 5)} ms ${f(rate('through'))}/s; ` +
            `added p50 ${f(added, 5)} ms (round by round ${perRound}); CPU ms/request: workerd ${f(d.workerd, 5)} direct, ${f(t.workerd, 5)} through; plane ${f(t.plane, 5)}`,
        );
        verdicts.push({
          label: `functions: the data plane adds < ${FN_TARGET_MS} ms at p50, concurrency ${concurrency}`,
          ok: added < FN_TARGET_MS,
          detail: `${added.toFixed(3)} ms (${d.r.p50.toFixed(3)} direct, ${t.r.p50.toFixed(3)} through; round by round ${perRound})`,
        });
      }
      if (alive(plane)) {
        const { errors } = (await ask(plane.child, { type: 'errors' }, 'errors-count')) as unknown as { errors: number };
        if (errors > 0) console.log(`  the plane reported ${errors} errors to onError so far (the first 5 printed above)`);
      }
    }

    // 3. cron ----------------------------------------------------------------------------------
    if (cronTenant) {
      if (plane) {
        await plane.stop();
        plane = null;
      }
      Runtime.install({ logger: new DefaultLogger('ERROR') });
      const t0 = now();
      env = await localTemporal();
      const taskQueue = `bench-${randomBytes(4).toString('hex')}`;
      const temporalEnv = { TEMPORAL_ADDRESS: env.address, TEMPORAL_NAMESPACE: 'default', TEMPORAL_TASK_QUEUE: taskQueue, TEMPORAL_SEARCH_ATTRIBUTES: '1' };
      // The worker as `npm run worker` runs it, simulated backends, its servers' directories in the scratch directory.
      worker = spawn(process.execPath, ['--import', 'tsx', 'workers/main.ts'], {
        cwd: root,
        env: {
          ...process.env,
          ...planeEnv(temporalEnv),
          HOST_DATA_DIR: path.join(scratch, 'host'),
          DNS_BACKEND: 'simulator',
          LB_BACKEND: 'simulator',
          DBAAS_BACKEND: 'simulator',
          OBJECTSTORAGE_BACKEND: 'simulator',
          WORKER_PROCESSES: '1',
        },
        stdio: ['ignore', 'inherit', 'inherit'],
      });
      for (const until = Date.now() + 180_000; ;) {
        if (worker.exitCode !== null) throw new Error(`workers/main.ts exited (${worker.exitCode})`);
        const { pollers } = await env.client.workflowService.describeTaskQueue({ namespace: 'default', taskQueue: { name: taskQueue }, taskQueueType: 1 });
        if ((pollers ?? []).length >= 1) break;
        if (Date.now() > until) throw new Error('the worker did not start polling within 180 s');
        await sleep(500);
      }
      part = 'cron';
      plane = await startPlane(temporalEnv);
      console.log(
        `\n3. cron: Temporal dev server ${env.address} and the worker (pid ${worker.pid}) polling after ${f((now() - t0) / 1000, 0).trim()} s; load ${load()}`,
      );

      const arrivals = new Map<string, number[]>();
      receiver = http.createServer((req, res) => {
        const at = wall();
        const id = String(req.headers['cloud-schedule'] ?? '');
        req.resume();
        req.on('end', () => {
          arrivals.set(id, [...(arrivals.get(id) ?? []), at]);
          res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
        });
      });
      await new Promise<void>((r) => receiver!.listen(0, '127.0.0.1', r));
      const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
      const cronApi = (p: string, init: RequestInit = {}) =>
        fetch(`${base}/cron/v1/schedules${p}`, { ...init, headers: { authorization: `Bearer ${cronTenant.token}`, 'content-type': 'application/json' } });
      const workerPids = () => processTree(worker!.pid!);
      const temporalPids = childPidsByName('temporal');
      const intervalMs = INTERVAL_S * 1000;
      /** Where a wall-clock time falls in the interval: interval schedules fire at whole multiples of it since the epoch. */
      const phase = (t: number) => t % intervalMs;
      for (let round = 0; round < CRON_ROUNDS; round++) {
        arrivals.clear();
        // Long intervals: the schedules are made 2 s after a firing time, so their first firing is a
        // whole interval later (not one Temporal could only catch up on), and the window ends half
        // an interval after the last firing it counts (no firing cut by the deletions).
        if (INTERVAL_S >= 10) await sleep((intervalMs + 2_000 - phase(Date.now())) % intervalMs);
        const ids: string[] = [];
        for (let i = 0; i < SCHEDULES; i++) {
          const res = await cronApi('', {
            method: 'POST',
            body: JSON.stringify({ destination: `${receiverUrl}/s${i}`, interval_seconds: INTERVAL_S, body: `{"bench":${i}}` }),
          });
          const made = (await res.json()) as { id: string };
          if (res.status !== 201) throw new Error(`POST /cron/v1/schedules: ${res.status} ${JSON.stringify(made)}`);
          ids.push(made.id);
        }
        const pgPids = await pgBackendPids(db);
        const groups = {
          temporal: () => temporalPids,
          worker: () => workerPids(),
          plane: () => [plane!.child.pid!],
          postgres: () => pgPids,
          bench: () => [process.pid],
        };
        const before = cpuSnapshot(groups);
        const w0 = now();
        if (INTERVAL_S >= 10) {
          const firstFiring = Date.now() - phase(Date.now()) + intervalMs;
          const firings = Math.max(1, Math.floor(CRON_SECONDS / INTERVAL_S));
          await sleep(firstFiring + (firings - 1) * intervalMs + intervalMs / 2 - Date.now());
        } else await sleep(CRON_SECONDS * 1000);
        const cores = cpuDelta(before, cpuSnapshot(groups), (now() - w0) / 1000);
        // The first schedule's own scheduler workflow (Temporal's): how long its timers were asked to sleep and how long they slept.
        const asked: number[] = [];
        const slept: number[] = [];
        {
          const { events } = await env.client.workflow.getHandle(`temporal-sys-scheduler:${temporalScheduleId(ids[0])}`).fetchHistory();
          let started: { at: number; ms: number } | null = null;
          for (const e of events ?? []) {
            const at = e.eventTime ? tsToMs(e.eventTime) : NaN;
            const timeout = e.timerStartedEventAttributes?.startToFireTimeout;
            if (timeout) started = { at, ms: tsToMs(timeout) };
            if (e.timerFiredEventAttributes && started) {
              asked.push(started.ms);
              slept.push(at - started.at);
              started = null;
            }
            if (process.env.BENCH_DUMP_SCHEDULER)
              console.log(`    ${new Date(at).toISOString()} ${temporal.api.enums.v1.EventType[e.eventType ?? 0]}${timeout ? ` ${tsToMs(timeout)} ms` : ''}`);
          }
        }
        for (const id of ids) {
          const res = await cronApi(`/${id}`, { method: 'DELETE' });
          await res.arrayBuffer();
          if (res.status !== 204) throw new Error(`DELETE ${id}: ${res.status}`);
        }
        await sleep(2_000); // runs started before the deletions finish
        const runs: Array<{ run_key: string; schedule_id: string; scheduled_at: Date; started_at: Date; outcome: string }> = await db('serverless_cron_runs')
          .whereIn('schedule_id', ids)
          .orderBy('scheduled_at')
          .select('run_key', 'schedule_id', 'scheduled_at', 'started_at', 'outcome');
        const lateness: number[] = [];
        /** The first schedule's lateness, firing by firing. */
        const firstSeries: number[] = [];
        const toClaim: number[] = [];
        const claimToArrival: number[] = [];
        const outcomes: Record<string, number> = {};
        let missed = 0;
        let offGrid = 0;
        let unmatched = 0;
        for (const id of ids) {
          const mine = runs.filter((r) => r.schedule_id === id);
          for (const r of mine) outcomes[r.outcome] = (outcomes[r.outcome] ?? 0) + 1;
          const delivered = mine.filter((r) => r.outcome === 'delivered');
          const got = [...(arrivals.get(id) ?? [])].sort((x, y) => x - y);
          unmatched += Math.abs(got.length - delivered.length);
          for (let i = 0; i < Math.min(got.length, delivered.length); i++) {
            const scheduled = delivered[i].scheduled_at.getTime();
            if (scheduled % (INTERVAL_S * 1000) !== 0) offGrid++;
            lateness.push(got[i] - scheduled);
            if (id === ids[0]) firstSeries.push(got[i] - scheduled);
            toClaim.push(delivered[i].started_at.getTime() - scheduled);
            claimToArrival.push(got[i] - delivered[i].started_at.getTime());
          }
          // Firings the grid had between this schedule's first and last run, and no run for.
          if (mine.length > 1)
            missed += (mine[mine.length - 1].scheduled_at.getTime() - mine[0].scheduled_at.getTime()) / (INTERVAL_S * 1000) + 1 - mine.length;
        }
        // Where the time to the claim goes: the events of a sample of the runs' workflow histories.
        const stageNames = [
          'scheduled -> workflow started',
          'workflow started -> workflow task started',
          'workflow task started -> completed',
          'workflow task completed -> activity started',
          'activity started -> claim',
        ];
        const stageSamples: Record<string, number[]> = Object.fromEntries(stageNames.map((n) => [n, []]));
        const delivered = runs.filter((x) => x.outcome === 'delivered');
        const step = Math.max(1, Math.floor(delivered.length / Math.max(1, HISTORIES)));
        for (let i = 0; i < delivered.length && HISTORIES > 0; i += step) {
          const run = delivered[i];
          const { events } = await env.client.workflow.getHandle(run.run_key).fetchHistory();
          const at = (pick: (e: NonNullable<typeof events>[number]) => unknown) => {
            const e = (events ?? []).find((x) => pick(x));
            return e?.eventTime ? tsToMs(e.eventTime) : NaN;
          };
          const marks = [
            run.scheduled_at.getTime(),
            at((e) => e.workflowExecutionStartedEventAttributes),
            at((e) => e.workflowTaskStartedEventAttributes),
            at((e) => e.workflowTaskCompletedEventAttributes),
            at((e) => e.activityTaskStartedEventAttributes),
            run.started_at.getTime(),
          ];
          stageNames.forEach((n, j) => {
            if (Number.isFinite(marks[j]) && Number.isFinite(marks[j + 1])) stageSamples[n].push(marks[j + 1] - marks[j]);
          });
        }
        const stages = Object.fromEntries(stageNames.map((n) => [n, summarize(stageSamples[n])]));
        const r: CronRound = {
          firings: lateness.length,
          lateness: summarize(lateness),
          samples: lateness,
          toClaim: summarize(toClaim),
          claimToArrival: summarize(claimToArrival),
          missed,
          offGrid,
          unmatched,
          outcomes,
          cores,
          stages,
          timers: { asked: summarize(asked), slept: summarize(slept) },
        };
        cronRounds.push(r);
        const s = (x: Summary) => `p50 ${f(x.p50, 5).trim()} p99 ${f(x.p99, 5).trim()} max ${f(x.max, 5).trim()}`;
        console.log(
          `  round ${round + 1}: ${SCHEDULES} schedules every ${INTERVAL_S} s for ${CRON_SECONDS} s: ${r.firings} firings matched; lateness ms ${s(r.lateness)} mean ${f(r.lateness.mean, 5).trim()}; ` +
            `scheduled -> claim ${s(r.toClaim)}; claim -> arrival ${s(r.claimToArrival)}; runs ${JSON.stringify(outcomes)}, missed ${missed}, ` +
            `off the whole-second grid ${offGrid}, unmatched ${unmatched}; cores ${JSON.stringify(cores)}  [load ${load()}]`,
        );
        for (const [n, x] of Object.entries(stages)) console.log(`    ${n.padEnd(44)} n=${String(x.n).padEnd(3)} ms ${s(x)}`);
        console.log(`    the first schedule's lateness, firing by firing (ms): ${firstSeries.map((x) => x.toFixed(0)).join(' ')}`);
        console.log(
          `    Temporal's scheduler workflow of the first schedule: ${r.timers.asked.n} timers asked for ms ${s(r.timers.asked)}, slept ms ${s(r.timers.slept)}`,
        );
      }
      // Pooled over the rounds: at the product's intervals a round has few firings per schedule.
      const pooled = summarize(cronRounds.flatMap((r) => r.samples));
      verdicts.push({
        label: `cron: firing lateness p99 < ${CRON_TARGET_MS} ms (${SCHEDULES} schedules every ${INTERVAL_S} s)`,
        ok: pooled.p99 < CRON_TARGET_MS && cronRounds.every((r) => r.firings > 0),
        detail:
          `${pooled.p99.toFixed(0)} ms over ${pooled.n} firings of ${cronRounds.length} rounds (p50 ${pooled.p50.toFixed(0)}, max ${pooled.max.toFixed(0)}; ` +
          `round p99s ${cronRounds.map((r) => r.lateness.p99.toFixed(0)).join(', ')})`,
      });
    }

    // The table --------------------------------------------------------------------------------
    console.log(`\n${watch.stop()}; load ${load()}\n`);
    if (kvRows.length) {
      console.log(
        "| kv | plane req/s | plane p50 / p99 ms | redis-benchmark req/s | p50 / p99 ms | plane ÷ redis-benchmark | CPU ms/req: plane | its Redis | redis-benchmark's Redis |",
      );
      console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
      for (const r of kvRows)
        console.log(
          `| ${r.name} | ${int(r.plane.rate)} | ${r.plane.p50.toFixed(2)} / ${r.plane.p99.toFixed(2)} | ${int(r.redis.rate)} | ${r.redis.p50.toFixed(2)} / ${r.redis.p99.toFixed(2)} | ` +
            `${pct(r.plane.rate / r.redis.rate)} | ${r.cpu.plane.toFixed(3)} | ${r.cpu.planeRedis.toFixed(3)} | ${r.cpu.redis.toFixed(3)} |`,
        );
      console.log('');
    }
    if (fnRows.length) {
      console.log('| functions, concurrency | direct p50 / p99 ms | through p50 / p99 ms | added p50 / p99 ms | direct req/s | through req/s |');
      console.log('|---|---:|---:|---:|---:|---:|');
      for (const r of fnRows)
        console.log(
          `| ${r.concurrency} | ${r.direct.p50.toFixed(3)} / ${r.direct.p99.toFixed(3)} | ${r.through.p50.toFixed(3)} / ${r.through.p99.toFixed(3)} | ` +
            `${(r.through.p50 - r.direct.p50).toFixed(3)} / ${(r.through.p99 - r.direct.p99).toFixed(3)} | ${int(r.direct.rate)} | ${int(r.through.rate)} |`,
        );
      console.log('');
    }
    if (cronRounds.length) {
      console.log('| cron round | firings | lateness p50 / p99 / max ms | scheduled -> claim p50 / p99 | claim -> arrival p50 / p99 | missed |');
      console.log('|---|---:|---:|---:|---:|---:|');
      cronRounds.forEach((r, i) =>
        console.log(
          `| ${i + 1} | ${r.firings} | ${r.lateness.p50.toFixed(0)} / ${r.lateness.p99.toFixed(0)} / ${r.lateness.max.toFixed(0)} | ` +
            `${r.toClaim.p50.toFixed(0)} / ${r.toClaim.p99.toFixed(0)} | ${r.claimToArrival.p50.toFixed(1)} / ${r.claimToArrival.p99.toFixed(1)} | ${r.missed} |`,
        ),
      );
      console.log('');
    }
    verdicts.push({
      label: 'the data plane process stays up through every load window (wrk closes its connections at the end of each)',
      ok: deaths.length === 0,
      detail: deaths.length === 0 ? 'it did' : deaths.join('; '),
    });
    for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
  } finally {
    await cleanUp();
  }
}

/** What the run started, undone once: on its end, or on SIGINT/SIGTERM. */
let cleanUp: () => Promise<void> = async () => undefined;

if (CHILD) {
  if (CHILD !== 'plane') throw new Error(`--child=${CHILD}: plane`);
  planeChild().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  runMain(main, () => cleanUp());
}
