/**
 * Container apps (issue #26): deploy time, restart time, what the Host router adds, and whether a
 * switch of deployment loses a request, on this machine's real podman and HAProxy.
 *
 *   npm run bench -- caas [--deploys=5] [--restarts=5] [--switches=3] [--requests=2000] [--rounds=3]
 *                         [--wrk=1,4,16] [--duration=5] [--compare=3]
 *
 * Needs root, podman and HAProxy (scripts/install/caas.sh, scripts/install/haproxy.sh) and wrk. No
 * database, API, worker or Temporal: the provider's steps are driven directly, in the order the
 * `caas.deploy` workflow runs them (activities/caas/activities.ts), on a `CaasPodmanProvider` with a
 * data directory of its own (mkdtemp). The Debian minbase tar cached by the real tests
 * (`.data/caas-test/debian-minbase-bookworm.tar`, made by test/podman.engine.real.test.ts) is copied
 * into it first, so the base image is made from it (seconds) rather than by mmdebstrap; it is made
 * before anything is timed. The app is test/caas.support.ts's `sampleApp` (package.json with
 * `start: node server.js`, no dependencies, so the generated Containerfile is FROM + COPY +
 * `CMD npm start`), one archive per version, served as .tar.gz by `startArchiveServer` on loopback.
 *
 * 1. Deploys (`--deploys`): a new deployment id each, of a new version: `fetchSource` (http, loopback,
 *    ALLOW_INSECURE-style policy) -> `provider.build` -> `provider.start` (256 MiB, 0.5 CPU, as
 *    APP_RESOURCES) -> `provider.route` -> the first 200 of the new version through the router
 *    (`Host: <default host>`); then, untimed in the total, `provider.stop` of the previous one (as
 *    caasPromote). Each step is split further by wrapping the provider's engine and router methods
 *    and by recording every child process (podman, haproxy) with its duration. A poller also asks the
 *    router every 20 ms during the route step, to see when the new version is first served (before
 *    `route` returns: it waits out the old slot's drain). Target: median under 20 s.
 * 2. Restarts (`--restarts`), as domain/caas/manage.ts restartApp: `provider.start` of the serving
 *    deployment with other variables (GREETING) -> `provider.route` (switch, then the older container
 *    removed) -> the first 200 with the new GREETING. Median and max; no target in the issue.
 * 3. The router: sequential keep-alive GETs (`--requests` each, `--rounds` rounds alternating which
 *    goes first) to the app through the router (Host) and directly to the container's published
 *    port; then wrk (`-t1 --latency`, keep-alive) at each of `--wrk` connections, `--duration` s,
 *    direct and routed alternately. Target: router p50 - direct p50 <= 1 ms and p99 - p99 <= 5 ms
 *    (sequential keep-alive). Then `--switches` deploys of new versions while wrk (-c4) and two
 *    node loops (checking each answer's version) send through the router the whole time.
 *    Target: 0 non-2xx and 0 socket errors. The loops also count answers by an older version to
 *    requests sent after a newer one had already answered (both slots serve for a moment). The
 *    container's CFS counters (cgroup cpu.stat) are read around each run: its 0.5 CPU quota, not the
 *    router, is what wrk runs into.
 * 4. `--compare` rounds: the same server started by `npm start` (the generated Containerfile) and by
 *    `CMD ["node", "server.js"]` (a Containerfile), alternately: how much of "start" is npm.
 *
 * The load average is printed before and after each part, and whether a test suite ran beside.
 * The isolation chains (CAAS-FWD/CAAS-IN) are host-wide and rewritten whole with a control plane's
 * own ranges: when they exist (another checkout's or a test's), they are left as they are; else
 * they are installed, and removed at the end unless some other container runs by then. Everything
 * else made here (containers, images, the tenant network, the router and its account, wrk, the
 * archive server, the data directory and its storage mount) is removed at the end and on
 * SIGINT/SIGTERM. Results: bench/caas.results.md.
 */
import { parseWrk, type WrkResult } from './wrk';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../common/config';
import { newUlidId } from '../common/ids';
import { APP_RESOURCES } from '../domain/caas/manage';
import { fetchSource } from '../domain/caas/source';
import { CaasPodmanProvider } from '../providers/caas/caas.podman';
import { HostRouter } from '../providers/haproxy/host-router';
import { layoutOf } from '../providers/podman/config';
import type { PodmanEngine } from '../providers/podman/engine';
import { podmanCall } from '../providers/podman/podman';
import { sampleApp, startArchiveServer, type ArchiveServer } from '../test/caas.support';
import { runMain } from './children';
import { median, summarize, type Summary } from './stats';
import { watchForSuites } from './suite-watch';
import { load, now, sleep, verdict, recordChildProcesses } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const list = (s: string) => s.split(',').filter(Boolean).map(Number);
const DEPLOYS = Number(arg('deploys', '5'));
const RESTARTS = Number(arg('restarts', '5'));
const SWITCHES = Number(arg('switches', '3'));
const REQUESTS = Number(arg('requests', '2000'));
const ROUNDS = Number(arg('rounds', '3'));
const WRK_CONNECTIONS = list(arg('wrk', '1,4,16'));
const DURATION_S = Number(arg('duration', '5'));
const COMPARE = Number(arg('compare', '3'));
const DEPLOY_TARGET_MS = 20_000;
const ADDED_P50_TARGET_MS = 1;
const ADDED_P99_TARGET_MS = 5;
const START_TIMEOUT_MS = 60_000;
/** A service number of no real service: its network is `caas-svc<n>`, its host `web-<n>.apps.localhost`. */
const SERVICE = 90_000 + (process.pid % 9_000);
const APP = 'app_9001';
const APP_CMP = 'app_9002';
const HOST = `web-${SERVICE}.apps.localhost`;
const TAR_NAME = 'debian-minbase-bookworm.tar';
const TAR_CACHE = path.resolve(__dirname, '..', '.data', 'caas-test', TAR_NAME);

const s = (ms: number) => (Number.isFinite(ms) ? (ms / 1000).toFixed(2) : '-');
const ms2 = (ms: number) => (Number.isFinite(ms) ? ms.toFixed(2) : '-');
const pad = (v: string, w: number) => v.padStart(w);

/** Set by the clean-up: the run's next provider call (or wrk, or request loop) stops instead of going on. */
let stopping = false;

// --- what every step spends: wrapped methods and child processes -----------------------------------

/** The current step (`fetch`, `build`, ...); child processes and wrapped calls are charged to it. */
let phase = '';
/** Milliseconds per label (`engine.run`, `router.setApp`...) of the current deploy or restart. */
let marks: Record<string, number> = {};
interface ProcessCall {
  phase: string;
  label: string;
  ms: number;
}
let processCalls: ProcessCall[] = [];

function mark(label: string, ms: number) {
  marks[label] = (marks[label] ?? 0) + ms;
  marks[`${phase}/${label}`] = (marks[`${phase}/${label}`] ?? 0) + ms;
}

/** Wraps `obj[name]` (an async method) so that its time is added to `marks[label]`. */
function timeMethod(obj: object, name: string, label: string) {
  const target = obj as Record<string, (...a: unknown[]) => Promise<unknown>>;
  const original = target[name];
  target[name] = async function (this: unknown, ...args: unknown[]) {
    const started = now();
    try {
      return await original.apply(this, args);
    } finally {
      mark(label, now() - started);
    }
  };
}

/** `podman build`, `podman network exists`, `haproxy -c`: the binary and its subcommand. */
function processLabel(file: string, args: readonly string[]): string {
  const bin = path.basename(file);
  const words = args.filter((a) => !a.startsWith('-')).slice(0, ['network', 'image', 'container'].includes(args[0]) ? 2 : 1);
  return bin === 'podman' ? `podman ${words.join(' ')}` : `${bin} ${args.slice(0, 1).join(' ')}`.trim();
}

// --- HTTP --------------------------------------------------------------------------------------------

interface Answer {
  status: number;
  body: string;
}

function get(port: number, host: string | null, agent: http.Agent): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent, headers: host ? { host } : {} }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
  });
}

const fieldOf = (a: Answer, key: 'version' | 'greeting'): string | null => {
  try {
    return (JSON.parse(a.body) as Record<string, string | null>)[key] ?? null;
  } catch {
    return null;
  }
};

/** Asks the router every `everyMs` until `wanted` matches; `stop()` ends it. Resolves with the time it first matched (or NaN). */
function poll(port: number, wanted: (a: Answer) => boolean, everyMs = 20) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  let stopped = false;
  const seen = (async () => {
    while (!stopped) {
      const a = await get(port, HOST, agent).catch(() => null);
      if (a && wanted(a)) return now();
      await sleep(everyMs);
    }
    return NaN;
  })();
  return {
    seen: seen.finally(() => agent.destroy()),
    stop: () => {
      stopped = true;
    },
  };
}

/** GETs until `wanted` matches (the deploy's "first answer"); throws after `timeoutMs`. */
async function firstMatching(port: number, wanted: (a: Answer) => boolean, timeoutMs = 30_000): Promise<number> {
  const agent = new http.Agent({ keepAlive: false });
  const deadline = now() + timeoutMs;
  try {
    for (;;) {
      const a = await get(port, HOST, agent).catch(() => null);
      if (a && wanted(a)) return now();
      if (now() > deadline) throw new Error(`no matching answer through the router within ${timeoutMs} ms (last: ${a?.status} ${a?.body})`);
      await sleep(10);
    }
  } finally {
    agent.destroy();
  }
}

// --- wrk ---------------------------------------------------------------------------------------------

const wrks = new Set<ChildProcess>();

/** Starts wrk; `finish()` (SIGINT: wrk then prints its statistics) or its own end resolves with them. */
function startWrk(port: number, host: string | null, connections: number, seconds: number) {
  if (stopping) throw new Error('the bench is stopping');
  const args = [
    '-t1',
    `-c${connections}`,
    `-d${seconds}s`,
    '--latency',
    '--timeout',
    '10s',
    ...(host ? ['-H', `Host: ${host}`] : []),
    `http://127.0.0.1:${port}/`,
  ];
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  wrks.add(child);
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (out += d.toString('utf8')));
  const done = new Promise<WrkResult>((resolve) =>
    child.once('close', () => {
      wrks.delete(child);
      resolve(parseWrk(out));
    }),
  );
  return { done, finish: () => (child.kill('SIGINT'), done) };
}

// --- the run -----------------------------------------------------------------------------------------

const dataDir = mkdtempSync('/tmp/caas-bench-');
let archives: ArchiveServer | null = null;
/** The provider the run drives, through `guarded`; `rawProvider` is the same one, for the clean-up. */
let provider: CaasPodmanProvider | null = null;
let rawProvider: CaasPodmanProvider | null = null;
let engine: PodmanEngine | null = null;
let routerPort = 0;
let isolationBefore = true;
const config = loadConfig();

/** Whether any podman container (its conmon) runs on this host. */
function conmonRunning(): boolean {
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const cmdline = (() => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      } catch {
        return '';
      }
    })();
    if (cmdline.startsWith('/usr/bin/conmon') || cmdline.split('\0')[0].endsWith('/conmon')) return true;
  }
  return false;
}

const inFlight = new Set<Promise<unknown>>();

/**
 * The provider with every method call refused once the clean-up began, and tracked while it runs:
 * a SIGINT's clean-up waits for the call in flight (a container being created) before it removes
 * what the service has, so nothing is made behind its back.
 */
function guarded<T extends object>(target: T): T {
  return new Proxy(target, {
    get(obj, key) {
      const value: unknown = Reflect.get(obj, key);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        if (stopping) return Promise.reject(new Error('the bench is stopping'));
        const call = Promise.resolve((value as (...a: unknown[]) => unknown).apply(obj, args));
        inFlight.add(call);
        void call.then(
          () => inFlight.delete(call),
          () => inFlight.delete(call),
        );
        return call;
      };
    },
  });
}

let cleaning: Promise<void> | null = null;
const cleanUp = () => (cleaning ??= removeEverything());

async function removeEverything() {
  stopping = true;
  phase = '';
  for (const w of wrks) w.kill('SIGKILL');
  await Promise.race([Promise.allSettled([...inFlight]), sleep(120_000)]);
  if (rawProvider) {
    await rawProvider.removeApp(SERVICE, APP_CMP, []).catch((err: Error) => console.error(`clean-up: ${err.message}`));
    await rawProvider.destroyService(SERVICE).catch((err: Error) => console.error(`clean-up: ${err.message}`));
  }
  // The chains are the host's: removed only when this run installed them and no container of anyone
  // (another checkout, a test) runs now, since another control plane may have taken them over since.
  if (engine && !isolationBefore) {
    if (conmonRunning()) console.log('(the isolation chains this run installed are left in place: other containers run on this host)');
    else await engine.removeIsolation().catch((err: Error) => console.error(`clean-up: ${err.message}`));
  }
  await archives?.close().catch(() => undefined);
  // What is left of this data directory's podman (superseded images, the base images, the build
  // cache), then its storage's own mount (as test/podman.engine.real.test.ts does).
  const layout = layoutOf(path.join(dataDir, 'podman'));
  if (existsSync(layout.root)) await podmanCall(layout, ['system', 'reset', '--force'], { timeoutMs: 120_000 }).catch(() => undefined);
  const overlay = path.join(layout.root, 'overlay');
  if (readFileSync('/proc/mounts', 'utf8').includes(` ${overlay} `)) {
    try {
      execFileSync('umount', [overlay]);
    } catch (err) {
      console.error(`clean-up: umount ${overlay}: ${(err as Error).message}`);
    }
  }
  await rm(dataDir, { recursive: true, force: true }).catch((err: Error) => console.error(`clean-up: ${dataDir}: ${err.message}`));
}

interface DeployTiming {
  version: string;
  deploymentId: string;
  fetch: number;
  build: number;
  start: number;
  route: number;
  firstOk: number;
  total: number;
  served: number;
  stopPrevious: number;
  marks: Record<string, number>;
}

const spec = (greeting: string) => ({ env: { PORT: '8080', GREETING: greeting }, ...APP_RESOURCES });
let serving: string | null = null;

/** One deploy as caas.deploy runs it; `previous` stopped afterwards (untimed in the total). */
async function deploy(version: string, files: Record<string, string> = sampleApp(version)): Promise<DeployTiming> {
  await archives!.put(version, files);
  const deploymentId = newUlidId('dep');
  const dir = path.join(dataDir, 'builds', deploymentId);
  marks = {};
  const t0 = now();
  phase = 'fetch';
  await fetchSource(archives!.url(version), dir, { policy: { allowInsecure: true } });
  const t1 = now();
  phase = 'build';
  const built = await provider!.build(SERVICE, APP, deploymentId, dir);
  await rm(dir, { recursive: true, force: true });
  if (!built.ok) throw new Error(`build of ${version} failed:\n${built.log.slice(-20).join('\n')}`);
  const t2 = now();
  phase = 'start';
  const started = await provider!.start(SERVICE, APP, deploymentId, spec('deploy'), START_TIMEOUT_MS);
  if (started.state !== 'listening') throw new Error(`${version} did not listen: ${JSON.stringify(started)}`);
  const t3 = now();
  phase = 'route';
  const watcher = poll(routerPort, (a) => a.status === 200 && fieldOf(a, 'version') === version);
  await provider!.route(SERVICE, APP, [HOST], deploymentId);
  const t4 = now();
  phase = 'first answer';
  const t5 = await firstMatching(routerPort, (a) => a.status === 200 && fieldOf(a, 'version') === version);
  watcher.stop();
  const servedAt = await watcher.seen;
  phase = 'stop previous';
  const t6 = now();
  if (serving) await provider!.stop(SERVICE, APP, serving);
  const t7 = now();
  phase = '';
  serving = deploymentId;
  return {
    version,
    deploymentId,
    fetch: t1 - t0,
    build: t2 - t1,
    start: t3 - t2,
    route: t4 - t3,
    firstOk: t5 - t4,
    total: t5 - t0,
    served: (Number.isNaN(servedAt) ? t5 : servedAt) - t0,
    stopPrevious: t7 - t6,
    marks: { ...marks },
  };
}

interface RestartTiming {
  start: number;
  route: number;
  firstOk: number;
  served: number;
  total: number;
  marks: Record<string, number>;
}

async function restart(greeting: string): Promise<RestartTiming> {
  marks = {};
  const t0 = now();
  phase = 'restart start';
  const started = await provider!.start(SERVICE, APP, serving!, spec(greeting), START_TIMEOUT_MS);
  if (started.state !== 'listening') throw new Error(`restart did not listen: ${JSON.stringify(started)}`);
  const t1 = now();
  phase = 'restart route';
  const watcher = poll(routerPort, (a) => a.status === 200 && fieldOf(a, 'greeting') === greeting);
  await provider!.route(SERVICE, APP, [HOST], serving!);
  const t2 = now();
  phase = 'restart first answer';
  const t3 = await firstMatching(routerPort, (a) => a.status === 200 && fieldOf(a, 'greeting') === greeting);
  watcher.stop();
  const servedAt = await watcher.seen;
  phase = '';
  return { start: t1 - t0, route: t2 - t1, firstOk: t3 - t2, served: (Number.isNaN(servedAt) ? t3 : servedAt) - t0, total: t3 - t0, marks: { ...marks } };
}

/** The processes of `phases` per deploy: label, calls per deploy, mean ms per call. */
function processTable(calls: ProcessCall[], phases: string[], runs: number): string[] {
  const rows: string[] = [];
  for (const p of phases) {
    const mine = calls.filter((c) => c.phase === p);
    const labels = [...new Set(mine.map((c) => c.label))];
    const parts = labels.map((l) => {
      const of = mine.filter((c) => c.label === l);
      return `${l} x${(of.length / runs).toFixed(1)} ${Math.round(median(of.map((c) => c.ms)))} ms`;
    });
    const total = mine.reduce((sum, c) => sum + c.ms, 0) / runs;
    rows.push(`  ${p.padEnd(22)} ${Math.round(total).toString().padStart(6)} ms in processes/run: ${parts.join(', ') || '-'}`);
  }
  return rows;
}

async function sequential(port: number, host: string | null, n: number): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const samples: number[] = [];
  try {
    for (let i = 0; i < 100; i++) await get(port, host, agent); // warm-up
    for (let i = 0; i < n && !stopping; i++) {
      const started = now();
      const a = await get(port, host, agent);
      if (a.status !== 200) throw new Error(`status ${a.status} during the latency run`);
      samples.push(now() - started);
    }
  } finally {
    agent.destroy();
  }
  return samples;
}

async function containerPort(deploymentId: string): Promise<number> {
  const list = await engine!.containers({ 'caas.deployment': deploymentId });
  const running = list.filter((c) => c.state === 'running').sort((a, b) => (a.name < b.name ? 1 : -1));
  return Number(running[0].labels['caas.port']);
}

/** The serving container's name and its CFS counters (cgroup v1 or v2): how often its 0.5 CPU quota stalled it. */
async function throttling(deploymentId: string): Promise<() => { periods: number; throttled: number; throttledMs: number }> {
  const list = await engine!.containers({ 'caas.deployment': deploymentId });
  const name = list.filter((c) => c.state === 'running').sort((a, b) => (a.name < b.name ? 1 : -1))[0].name;
  const layout = layoutOf(path.join(dataDir, 'podman'));
  const pid = (await podmanCall(layout, ['container', 'inspect', '--format', '{{.State.Pid}}', name])).stdout.trim();
  const lines = readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n');
  const v1 = lines.find((l) => /^\d+:([^:]*,)?cpu(,[^:]*)?:/.test(l));
  const file = v1
    ? [`/sys/fs/cgroup/cpu${v1.split(':')[2]}/cpu.stat`, `/sys/fs/cgroup/cpu,cpuacct${v1.split(':')[2]}/cpu.stat`].find((f) => existsSync(f))
    : `/sys/fs/cgroup${lines.find((l) => l.startsWith('0::'))?.slice(3) ?? ''}/cpu.stat`;
  return () => {
    const text = file && existsSync(file) ? readFileSync(file, 'utf8') : '';
    const field = (k: string) => Number(new RegExp(`^${k} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
    return {
      periods: field('nr_periods'),
      throttled: field('nr_throttled'),
      throttledMs: v1 ? field('throttled_time') / 1e6 : field('throttled_usec') / 1e3,
    };
  };
}

async function main() {
  if (process.getuid?.() !== 0) throw new Error('run as root: container apps use rootful podman');
  const verdicts: Array<{ label: string; detail: string; ok: boolean }> = [];
  console.log(`caas bench: ${os.cpus().length} cores, load ${load()}, ${new Date().toISOString()}`);
  console.log(`data directory ${dataDir}, service ${SERVICE}, host ${HOST}`);
  const suites = watchForSuites();
  isolationBefore = (() => {
    try {
      execFileSync('iptables', ['-S', 'CAAS-FWD'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  })();

  // Set-up (untimed): the base image from the cached tar, the service's router and network.
  const base = path.join(dataDir, 'podman', 'base');
  if (existsSync(TAR_CACHE)) {
    mkdirSync(base, { recursive: true, mode: 0o700 });
    copyFileSync(TAR_CACHE, path.join(base, TAR_NAME));
  } else console.log(`(no ${TAR_CACHE}: the base image is bootstrapped with mmdebstrap, a minute or more)`);
  rawProvider = new CaasPodmanProvider({
    dataDir,
    bindAddress: config.CAAS_BIND_ADDRESS,
    subnetPool: config.CAAS_SUBNET_POOL,
    blockedRanges: [config.LB_BIND_ADDRESS, ...(config.DBAAS_ADDRESS_RANGE ? [config.DBAAS_ADDRESS_RANGE] : [])],
  });
  provider = guarded(rawProvider);
  engine = (rawProvider as unknown as { engine: PodmanEngine }).engine;
  // The isolation chains are host-wide and rewritten whole by every control plane's first use: when
  // another one (another checkout, a test) has them in place, they are left as they are rather than
  // replaced with this configuration's ranges under it. It is once per process, never on a deploy's path.
  if (isolationBefore) (rawProvider as unknown as { isolated: Promise<void> }).isolated = Promise.resolve();
  else console.log('(no CAAS-FWD chain yet: the isolation rules are installed, and removed at the end)');
  archives = await startArchiveServer();
  let t = now();
  const baseImage = await engine.ensureBaseImage();
  console.log(`set-up: base image ${baseImage.built ? 'built' : 'found'} in ${s(now() - t)} s`);
  t = now();
  const space = await provider.ensureService(SERVICE);
  routerPort = Number(new URL(space.ingressUrl).port);
  console.log(`set-up: router ${space.ingressUrl} in ${s(now() - t)} s; load ${load()}`);

  // Every child process started while a step runs (podman.ts and the HAProxy helpers), by phase.
  recordChildProcesses((file, args) => {
    if (!phase) return undefined;
    const entry = { phase, label: processLabel(file, args) };
    return (ms) => processCalls.push({ ...entry, ms });
  });
  for (const m of ['ensureBaseImage', 'run', 'waitListening', 'remove', 'containers', 'runBuild']) timeMethod(engine, m, `engine.${m}`);
  timeMethod(HostRouter, 'start', 'router.start');
  timeMethod(HostRouter.prototype, 'setApp', 'router.setApp');

  // 1. Deploys.
  console.log(`\n1. deploys (${DEPLOYS}), load ${load()}`);
  const header = `  ${'#'.padEnd(3)}${pad('fetch', 7)}${pad('build', 7)}${pad('(podman', 8)}${pad('build)', 7)}${pad('start', 7)}${pad('(run', 7)}${pad('wait)', 7)}${pad('route', 7)}${pad('(setApp)', 9)}${pad('1st 200', 8)}${pad('TOTAL', 8)}${pad('served', 8)}${pad('stop old', 9)}   s`;
  console.log(header);
  const deploys: DeployTiming[] = [];
  for (let i = 1; i <= DEPLOYS; i++) {
    const d = await deploy(`d${i}`);
    deploys.push(d);
    const m = d.marks;
    console.log(
      `  ${String(i).padEnd(3)}${pad(s(d.fetch), 7)}${pad(s(d.build), 7)}${pad(s(m['engine.runBuild']), 15)}${pad(s(d.start), 7)}${pad(s(m['engine.run']), 7)}${pad(s(m['engine.waitListening']), 7)}${pad(s(d.route), 7)}${pad(s(m['router.setApp']), 9)}${pad(s(d.firstOk), 8)}${pad(s(d.total), 8)}${pad(s(d.served), 8)}${pad(s(d.stopPrevious), 9)}   load ${load()}`,
    );
  }
  const deployCalls = processCalls;
  processCalls = [];
  const col = (pick: (d: DeployTiming) => number) => deploys.map(pick);
  const medRow = (label: string, pick: (xs: number[]) => number) =>
    `  ${label.padEnd(3)}${[
      col((d) => d.fetch),
      col((d) => d.build),
      col((d) => d.marks['engine.runBuild']),
      col((d) => d.start),
      col((d) => d.marks['engine.run']),
      col((d) => d.marks['engine.waitListening']),
      col((d) => d.route),
      col((d) => d.marks['router.setApp']),
      col((d) => d.firstOk),
      col((d) => d.total),
      col((d) => d.served),
      col((d) => d.stopPrevious),
    ]
      .map((xs, i) => pad(s(pick(xs)), [7, 7, 15, 7, 7, 7, 7, 9, 8, 8, 8, 9][i]))
      .join('')}`;
  console.log(medRow('med', median));
  console.log(medRow('max', (xs) => Math.max(...xs)));
  console.log('  child processes per deploy (mean over the deploys; median ms per call):');
  for (const row of processTable(deployCalls, ['fetch', 'build', 'start', 'route', 'first answer', 'stop previous'], DEPLOYS)) console.log(row);
  const deployMedian = median(col((d) => d.total));
  verdicts.push({
    label: 'deploy, fetch to first 200 through the router, median',
    detail: `${s(deployMedian)} s (max ${s(Math.max(...col((d) => d.total)))} s) vs < ${DEPLOY_TARGET_MS / 1000} s`,
    ok: deployMedian < DEPLOY_TARGET_MS,
  });

  // 2. Restarts.
  console.log(`\n2. restarts (${RESTARTS}) of ${serving}, load ${load()}`);
  console.log(
    `  ${'#'.padEnd(3)}${pad('start', 7)}${pad('(run', 7)}${pad('wait)', 7)}${pad('route', 7)}${pad('(setApp', 8)}${pad('rm old)', 8)}${pad('1st 200', 8)}${pad('TOTAL', 8)}${pad('served', 8)}   s`,
  );
  const restarts: RestartTiming[] = [];
  for (let i = 1; i <= RESTARTS; i++) {
    const r = await restart(`r${i}`);
    restarts.push(r);
    const m = r.marks;
    console.log(
      `  ${String(i).padEnd(3)}${pad(s(r.start), 7)}${pad(s(m['engine.run']), 7)}${pad(s(m['engine.waitListening']), 7)}${pad(s(r.route), 7)}${pad(s(m['router.setApp']), 8)}${pad(s(m['restart route/engine.remove']), 8)}${pad(s(r.firstOk), 8)}${pad(s(r.total), 8)}${pad(s(r.served), 8)}   load ${load()}`,
    );
  }
  const rcol = (pick: (r: RestartTiming) => number) => restarts.map(pick);
  console.log(
    `  med${pad(s(median(rcol((r) => r.start))), 7)}${' '.repeat(14)}${pad(s(median(rcol((r) => r.route))), 7)}${' '.repeat(16)}${pad(s(median(rcol((r) => r.firstOk))), 8)}${pad(s(median(rcol((r) => r.total))), 8)}${pad(s(median(rcol((r) => r.served))), 8)}`,
  );
  console.log(
    `  max${pad(s(Math.max(...rcol((r) => r.start))), 7)}${' '.repeat(14)}${pad(s(Math.max(...rcol((r) => r.route))), 7)}${' '.repeat(16)}${pad(s(Math.max(...rcol((r) => r.firstOk))), 8)}${pad(s(Math.max(...rcol((r) => r.total))), 8)}${pad(s(Math.max(...rcol((r) => r.served))), 8)}`,
  );
  console.log('  child processes per restart:');
  for (const row of processTable(processCalls, ['restart start', 'restart route', 'restart first answer'], RESTARTS)) console.log(row);
  processCalls = [];

  // 3a. Router vs direct.
  const direct = await containerPort(serving!);
  const cfs = await throttling(serving!);
  const throttledSince = (before: ReturnType<typeof cfs>) => {
    const after = cfs();
    return `throttled ${after.throttled - before.throttled}/${after.periods - before.periods} periods, ${(after.throttledMs - before.throttledMs).toFixed(0)} ms`;
  };
  console.log(`\n3. router :${routerPort} (Host ${HOST}) vs the container's published port :${direct}, load ${load()}`);
  const seq: Record<'direct' | 'router', number[]> = { direct: [], router: [] };
  for (let round = 0; round < ROUNDS; round++) {
    const order: Array<'direct' | 'router'> = round % 2 === 0 ? ['direct', 'router'] : ['router', 'direct'];
    const line: string[] = [];
    for (const which of order) {
      const before = cfs();
      const samples = await sequential(which === 'direct' ? direct : routerPort, which === 'direct' ? null : HOST, REQUESTS);
      seq[which].push(...samples);
      const sm = summarize(samples);
      line.push(`${which} p50 ${ms2(sm.p50)} p99 ${ms2(sm.p99)} (${throttledSince(before)})`);
    }
    console.log(`  sequential keep-alive, round ${round + 1}: ${line.join(', ')} ms  [load ${load()}]`);
  }
  const sd: Summary = summarize(seq.direct);
  const sr: Summary = summarize(seq.router);
  console.log(`  ${'sequential keep-alive'.padEnd(24)}${pad('n', 7)}${pad('p50', 8)}${pad('p95', 8)}${pad('p99', 8)}${pad('max', 8)}  ms`);
  for (const [name, sm] of [
    ['direct', sd],
    ['router', sr],
  ] as const)
    console.log(`  ${name.padEnd(24)}${pad(String(sm.n), 7)}${pad(ms2(sm.p50), 8)}${pad(ms2(sm.p95), 8)}${pad(ms2(sm.p99), 8)}${pad(ms2(sm.max), 8)}`);
  console.log(
    `  ${'added by the router'.padEnd(24)}${pad('', 7)}${pad(ms2(sr.p50 - sd.p50), 8)}${pad(ms2(sr.p95 - sd.p95), 8)}${pad(ms2(sr.p99 - sd.p99), 8)}`,
  );
  verdicts.push({
    label: 'router adds at p50 (sequential keep-alive)',
    detail: `${ms2(sr.p50 - sd.p50)} ms (${ms2(sr.p50)} vs ${ms2(sd.p50)}) vs <= ${ADDED_P50_TARGET_MS} ms`,
    ok: sr.p50 - sd.p50 <= ADDED_P50_TARGET_MS,
  });
  verdicts.push({
    label: 'router adds at p99 (sequential keep-alive)',
    detail: `${ms2(sr.p99 - sd.p99)} ms (${ms2(sr.p99)} vs ${ms2(sd.p99)}) vs <= ${ADDED_P99_TARGET_MS} ms`,
    ok: sr.p99 - sd.p99 <= ADDED_P99_TARGET_MS,
  });

  console.log(`  wrk -t1 --latency, ${DURATION_S} s each, direct and router alternately:`);
  console.log(
    `  ${'conn'.padEnd(6)}${'which'.padEnd(8)}${pad('req/s', 9)}${pad('p50', 8)}${pad('p99', 8)}${pad('max', 8)}${pad('non-2xx', 9)}${pad('sock err', 9)}  ms`,
  );
  for (const c of WRK_CONNECTIONS) {
    for (const which of c % 2 === 0 ? (['router', 'direct'] as const) : (['direct', 'router'] as const)) {
      const before = cfs();
      const w = await startWrk(which === 'direct' ? direct : routerPort, which === 'direct' ? null : HOST, c, DURATION_S).done;
      console.log(
        `  ${String(c).padEnd(6)}${which.padEnd(8)}${pad(w.rate.toFixed(0), 9)}${pad(ms2(w.p50), 8)}${pad(ms2(w.p99), 8)}${pad(ms2(w.max), 8)}${pad(String(w.non2xx), 9)}${pad(String(w.socketErrors), 9)}   ${throttledSince(before)}; load ${load()}`,
      );
    }
  }

  // 3b. Deploys while wrk and node loops send through the router.
  console.log(`\n3b. ${SWITCHES} deploys while wrk -c4 and 2 node loops send through the router, load ${load()}`);
  const wrk = startWrk(routerPort, HOST, 4, 3_600);
  const seen: string[] = [];
  /** Every answer of the node loops: when its request was sent and answered, and the version that answered. */
  const answers: Array<{ sent: number; received: number; version: string }> = [];
  const order = [deploys.at(-1)?.version ?? '?', ...Array.from({ length: SWITCHES }, (_, i) => `s${i + 1}`)];
  let loopErrors = 0;
  let loopNon200 = 0;
  let firstLoopError = '';
  let loopRequests = 0;
  let stopLoops = false;
  const loops = Array.from({ length: 2 }, async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    while (!stopLoops && !stopping) {
      try {
        const sent = now();
        const a = await get(routerPort, HOST, agent);
        loopRequests++;
        if (a.status !== 200) {
          loopNon200++;
          firstLoopError ||= `status ${a.status}: ${a.body.slice(0, 100)}`;
        } else {
          const v = fieldOf(a, 'version') ?? '?';
          answers.push({ sent, received: now(), version: v });
          if (seen.at(-1) !== v) seen.push(v);
        }
      } catch (err) {
        loopErrors++;
        firstLoopError ||= (err as Error).message;
      }
      await sleep(5);
    }
    agent.destroy();
  });
  await sleep(1_000);
  const underLoad: DeployTiming[] = [];
  for (let i = 1; i <= SWITCHES; i++) {
    const d = await deploy(`s${i}`);
    underLoad.push(d);
    console.log(
      `  deploy ${d.version}: total ${s(d.total)} s (fetch ${s(d.fetch)}, build ${s(d.build)}, start ${s(d.start)}, route ${s(d.route)}), old stopped in ${s(d.stopPrevious)} s; load ${load()}`,
    );
  }
  await sleep(2_000);
  stopLoops = true;
  await Promise.all(loops);
  const w = await wrk.finish();
  processCalls = [];
  console.log(
    `  wrk: ${w.requests} requests, ${w.rate.toFixed(0)}/s, p50 ${ms2(w.p50)} p99 ${ms2(w.p99)} max ${ms2(w.max)} ms, non-2xx ${w.non2xx}, socket errors ${w.socketErrors}`,
  );
  console.log(
    `  node loops: ${loopRequests} requests, non-200 ${loopNon200}, errors ${loopErrors}${firstLoopError ? ` (first: ${firstLoopError})` : ''}; versions in order: ${seen.join(' -> ')}`,
  );
  // An older version answering a request sent after a newer one had already answered (another loop's):
  // served during the old slot's drain, or sent to it just before the switch and answered late.
  const firstAnswer = new Map<string, number>();
  for (const a of answers) if (!firstAnswer.has(a.version) || a.received < firstAnswer.get(a.version)!) firstAnswer.set(a.version, a.received);
  const stale = answers.filter((a) => order.slice(order.indexOf(a.version) + 1).some((newer) => (firstAnswer.get(newer) ?? Infinity) < a.sent));
  const staleLag = stale.map((a) => a.sent - Math.min(...order.slice(order.indexOf(a.version) + 1).map((v) => firstAnswer.get(v) ?? Infinity)));
  console.log(
    `  node loops: ${stale.length} answers by an older version to requests sent after a newer one had answered${stale.length ? ` (sent up to ${ms2(Math.max(...staleLag))} ms after; answered in up to ${ms2(Math.max(...stale.map((a) => a.received - a.sent)))} ms)` : ''}`,
  );
  const failures = w.non2xx + w.socketErrors + loopNon200 + loopErrors;
  verdicts.push({
    label: `errors through the router during ${SWITCHES} deploys`,
    detail: `wrk ${w.non2xx} non-2xx + ${w.socketErrors} socket errors of ${w.requests}; node ${loopNon200} non-200 + ${loopErrors} errors of ${loopRequests} vs 0`,
    ok: failures === 0 && Number.isFinite(w.requests),
  });

  // 4. npm start vs node directly.
  if (COMPARE > 0) {
    console.log(`\n4. start of the same server: CMD npm start (generated) vs CMD ["node","server.js"] (Containerfile), ${COMPARE} rounds, load ${load()}`);
    const variants = {
      'npm start': sampleApp('cmp-npm'),
      'node server.js': {
        ...sampleApp('cmp-node'),
        Containerfile: 'FROM localhost/caas-node:latest\nCOPY --chown=10001:10001 . /app\nCMD ["node", "server.js"]\n',
      },
    };
    const ids: Record<string, string> = {};
    for (const [name, files] of Object.entries(variants)) {
      await archives.put(name.replace(/\W/g, ''), files);
      const id = newUlidId('dep');
      const dir = path.join(dataDir, 'builds', id);
      await fetchSource(archives.url(name.replace(/\W/g, '')), dir, { policy: { allowInsecure: true } });
      const built = await provider.build(SERVICE, APP_CMP, id, dir);
      await rm(dir, { recursive: true, force: true });
      if (!built.ok) throw new Error(`build of ${name} failed: ${built.log.slice(-10).join('\n')}`);
      ids[name] = id;
    }
    const times: Record<string, { start: number[]; wait: number[] }> = { 'npm start': { start: [], wait: [] }, 'node server.js': { start: [], wait: [] } };
    for (let round = 0; round < COMPARE; round++) {
      const names = round % 2 === 0 ? Object.keys(ids) : Object.keys(ids).reverse();
      for (const name of names) {
        marks = {};
        const t0 = now();
        const started = await provider.start(SERVICE, APP_CMP, ids[name], spec('cmp'), START_TIMEOUT_MS);
        const elapsed = now() - t0;
        if (started.state !== 'listening') throw new Error(`${name} did not listen`);
        times[name].start.push(elapsed);
        times[name].wait.push(marks['engine.waitListening']);
        await provider.stop(SERVICE, APP_CMP, ids[name]);
      }
    }
    for (const [name, x] of Object.entries(times))
      console.log(
        `  ${name.padEnd(16)} start median ${s(median(x.start))} s (of which waiting for the port ${s(median(x.wait))} s), each: ${x.start.map(s).join(' ')}`,
      );
    await provider.removeApp(SERVICE, APP_CMP, Object.values(ids));
  }

  console.log(`\nload ${load()}, ${new Date().toISOString()}; ${suites.stop()}\n`);
  for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
}

runMain(async () => {
  try {
    await main();
  } finally {
    const started = now();
    await cleanUp();
    console.log(`cleaned up in ${s(now() - started)} s`);
  }
}, cleanUp);
