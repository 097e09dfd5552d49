/**
 * Hosted WordPress sites (issue #30) on real WordPress (WORDPRESS_BACKEND=local): how long a site
 * takes to build, how many front pages per second one site serves through nginx + php-fpm, and how
 * long the sample recipe takes to apply.
 *
 *   npx tsx bench/wordpress.bench.ts [--sites=6] [--connections=1,5,20] [--duration=10] [--warmup=2]
 *       [--pm=static:2,static:10] [--apply-rounds=2] [--static=/wp-includes/css/buttons.min.css]
 *   npx tsx bench/wordpress.bench.ts --sites=2 --connections=5 --duration=3 --pm= --apply-rounds=1   # a quick look
 *
 * Set-up, without vitest, as test/wordpress.real.test.ts's stack is built (untimed): a fresh database
 * (createTestDatabase), a Temporal dev server (.tools/, in memory), the API (`createApi`, on loopback)
 * and a worker (`createWorker`, in this process: it runs the recipe applies and is the host agent
 * of the database instances), with WORDPRESS_BACKEND=local (a WORDPRESS_DATA_DIR of its own, mode
 * 0711, WORDPRESS_HTTP_PORT 0: nginx on a free port), DBAAS_BACKEND=instances (a DBAAS_DATA_DIR of its
 * own) and simulated others; one account with an owner and an all-scopes key.
 *
 * 1. Site creation (`--sites`, one after another): a `wordpress-starter` service row (untimed), then
 *    `WordpressProvisioner.provision` (what an order's activity runs) with the API's providers, then
 *    GETs of `/` through the sites' nginx with `Host: <site>` every 20 ms until the first 200. Split:
 *    `db` (records, the MariaDB instance with its user and database: the dbaas calls go to the worker,
 *    the host agent, over Temporal as the API's would), then inside the backend's `createSite`:
 *    `core` (the core release prepared: the first site only), `files` (the account, the directory,
 *    hard links, configuration), `php` (the site's php-fpm master started), `install` (the helper's
 *    WordPress install), `nginx` (the server block written, nginx started or reloaded); `first 200`
 *    (after `provision` returned). The child processes started meanwhile are recorded (binary and
 *    count). Target (the issue): < 15 s from the provisioner's call to the first 200, median and max.
 * 2. Requests/s of the first site's default front page (`/`, Twenty-something theme, no plugin
 *    active) through nginx + php-fpm, with wrk (Debian; one thread, keep-alive, `--latency`; a
 *    process of its own: a Node load generator would take as much CPU as PHP on these 2 cores), at
 *    each of `--connections`, `--warmup` s then `--duration` s; then a static file of core
 *    (`--static`, served by nginx alone) for comparison. The pool as deployed (providers/wordpress/
 *    php-fpm.ts: pm = ondemand, pm.max_children = 5, idle 30 s, max_requests 500); then each of
 *    `--pm` (`static:<n>` or `ondemand:<n>`): the site's php-fpm.conf rewritten here and the master
 *    reloaded (SIGUSR2), restored afterwards (the source is not touched). CPU ms per request of
 *    php-fpm (master and workers), nginx, the site's mariadbd and wrk, from /proc, and `others`: the
 *    cores busy with anything else meanwhile (/proc/stat less those), this process included.
 * 3. Recipe applies of the sample recipe (db/seeds/wordpress-sample-recipe.json, registered with
 *    db/seeds/wordpress-recipes.seed.ts when the account is the first, else by POST): `POST
 *    /v1/wordpress/{id}/recipes/apply` until its operation is `succeeded` (the row polled every 50 ms;
 *    each step's end seen there). `--apply-rounds` rounds of two fresh sites (sites 2.., never the
 *    one of part 2 before it): site a first with backup, again with backup, again without; site b
 *    first without, again without, again with. No target in the issue.
 *
 * The load average is printed before and after each part, and whether a test suite or another
 * benchmark ran beside (looked for every 5 s). At the end and on SIGINT/SIGTERM (after the step in
 * flight): every site deprovisioned (its files, account, PHP, server block, database instance,
 * backups) with providers of this host itself (Ctrl-C also stops the Temporal server, through which
 * the API's reach the database instances), the provider's `stopAll` (nginx, any PHP left), the
 * worker, the API, Temporal, any database instance left, the web server's account, the temporary
 * directories and the database. Needs root, php8.2-fpm, nginx, MariaDB
 * (scripts/install/wordpress.sh), PostgreSQL and the Temporal CLI (scripts/ensure-tools.sh), wrk.
 * Results: docs/benchmarks.md ("Hosted WordPress sites").
 */
import { parseWrk, type WrkResult } from './wrk';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { createApi } from '../api/bootstrap';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { seedSampleRecipe, sampleRecipe } from '../db/seeds/wordpress-recipes.seed';
import { DEFAULT_CAPABILITIES } from '../domain/capabilities';
import { provisionTargetOf } from '../domain/provisioning';
import { ALL_SCOPES } from '../domain/scopes';
import { WordpressProvisioner } from '../domain/wordpress/provisioner';
import { createProviders } from '../families';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { accountNameFor, removeAccount } from '../providers/os-accounts';
import { SitePhpFpm } from '../providers/wordpress/php-fpm';
import { WordpressLocalProvider } from '../providers/wordpress/wordpress.local';
import { createTestDatabase, type TestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createUser } from '../test/helpers/fixtures';
import { restartableWorker } from '../test/helpers/worker';
import { runMain } from './children';
import { median } from './stats';
import { load, now, sleep, verdict, recordChildProcesses, localTemporal } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const list = (s: string) => s.split(',').filter(Boolean);
const SITES = Number(arg('sites', '6'));
const CONNECTIONS = list(arg('connections', '1,5,20')).map(Number);
const DURATION_S = Number(arg('duration', '10'));
const WARMUP_S = Number(arg('warmup', '2'));
const PM_VARIANTS = list(arg('pm', 'static:2,static:10'));
const APPLY_ROUNDS = Number(arg('apply-rounds', '2'));
const STATIC_PATH = arg('static', '/wp-includes/css/buttons.min.css');
const CREATE_TARGET_MS = 15_000;
const FIRST_200_TIMEOUT_MS = 60_000;
const APPLY_TIMEOUT_MS = 600_000;
const root = path.resolve(__dirname, '..');
const CLK_TCK = 100;

const s = (ms: number) => (Number.isFinite(ms) ? (ms / 1000).toFixed(2) : '-');
const ms2 = (ms: number) => (Number.isFinite(ms) ? ms.toFixed(2) : '-');
const pad = (v: string, w: number) => v.padStart(w);

/** Set by the clean-up: the run's next step stops instead of going on. */
let stopping = false;
function checkStopping() {
  if (stopping) throw new Error('the bench is stopping');
}

// --- what runs beside: test suites and other benchmarks ----------------------------------------------

function othersRunning(): string[] {
  const found = new Set<string>();
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid) || Number(pid) === process.pid || Number(pid) === process.ppid) continue;
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
    } catch {
      continue;
    }
    if (cmdline.includes('vitest')) found.add('vitest');
    const bench = /bench\/([\w-]+)\.bench\.ts/.exec(cmdline)?.[1];
    if (bench && bench !== 'wordpress') found.add(`bench/${bench}`);
  }
  return [...found].sort();
}

/** Looks every 5 s for a test suite or another benchmark, so that the results say what shared the cores. */
function watchNeighbours(): { stop(): string } {
  let looks = 0;
  const seen = new Map<string, number>();
  const look = () => {
    looks++;
    for (const name of othersRunning()) seen.set(name, (seen.get(name) ?? 0) + 1);
  };
  look();
  const timer = setInterval(look, 5_000);
  return {
    stop() {
      clearInterval(timer);
      return seen.size === 0
        ? `no test suite or other benchmark seen in ${looks} looks (every 5 s)`
        : `beside it, in ${looks} looks every 5 s: ${[...seen].map(([n, c]) => `${n} ${c}x`).join(', ')}`;
    },
  };
}

// --- CPU from /proc ----------------------------------------------------------------------------------

interface ProcInfo {
  pid: number;
  ppid: number;
  comm: string;
  cmdline: string;
  /** utime + stime + cutime + cstime, seconds: its own and its reaped children's. */
  cpu: number;
}

function processes(): ProcInfo[] {
  const out: ProcInfo[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const cpu = (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK;
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
      out.push({ pid: Number(pid), ppid: Number(f[1]), comm, cmdline, cpu });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/**
 * CPU seconds of the processes `root` matches and all their descendants, each with its reaped
 * children: a worker that exits between two readings moves into its parent's cutime, so the sum only grows.
 */
function groupCpu(all: ProcInfo[], isRoot: (p: ProcInfo) => boolean): number {
  const inGroup = new Set(all.filter(isRoot).map((p) => p.pid));
  for (let grew = true; grew;) {
    grew = false;
    for (const p of all)
      if (!inGroup.has(p.pid) && inGroup.has(p.ppid)) {
        inGroup.add(p.pid);
        grew = true;
      }
  }
  return all.filter((p) => inGroup.has(p.pid)).reduce((sum, p) => sum + p.cpu, 0);
}

/** This process's reaped children (wrk), seconds. */
function reapedChildrenCpu(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[13]) + Number(f[14])) / CLK_TCK;
}

// --- child processes started while a site is built ---------------------------------------------------

let recording = false;
let processCalls: Array<{ label: string; ms: number }> = [];

function processLabel(file: string, args: readonly string[]): string {
  const bin = path.basename(file);
  if (/^php/.test(bin)) {
    const script = args.find((a) => a.endsWith('.php'));
    return script ? `${bin} ${path.basename(script)}` : bin;
  }
  if (bin === 'sh' || bin === 'bash') return `${bin} -c`;
  return bin;
}

// --- the split of a site's creation -------------------------------------------------------------------

/** Milliseconds per label of the creation being measured (only while `recording`). */
let marks: Record<string, number> = {};
let createSiteStartedAt = NaN;
let createSiteEndedAt = NaN;

function mark(label: string, ms: number) {
  marks[label] = (marks[label] ?? 0) + ms;
}

/** Wraps `proto[name]` (an async method) so that its time goes to `label` when `when(args)` holds and a creation is measured. */
function timeMethod(proto: object, name: string, label: string, when: (args: unknown[]) => boolean = () => true) {
  const target = proto as Record<string, (...a: unknown[]) => Promise<unknown>>;
  const original = target[name];
  target[name] = async function (this: unknown, ...args: unknown[]) {
    if (!recording || !when(args)) return original.apply(this, args);
    const started = now();
    try {
      return await original.apply(this, args);
    } finally {
      mark(label, now() - started);
    }
  };
}

function instrumentBackend() {
  // The child processes started while `recording` (a site being built).
  recordChildProcesses((file, args) => {
    if (!recording) return undefined;
    const label = processLabel(file, args);
    return (ms) => processCalls.push({ label, ms });
  });
  const proto = WordpressLocalProvider.prototype as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;
  const createSite = proto.createSite;
  proto.createSite = async function (this: unknown, ...args: unknown[]) {
    if (recording) createSiteStartedAt = now();
    try {
      return await createSite.apply(this, args);
    } finally {
      if (recording) createSiteEndedAt = now();
    }
  };
  timeMethod(WordpressLocalProvider.prototype, 'ensureCore', 'core');
  timeMethod(WordpressLocalProvider.prototype, 'helper', 'install', (a) => a[1] === 'install');
  timeMethod(WordpressLocalProvider.prototype, 'serve', 'nginx');
  timeMethod(SitePhpFpm.prototype, 'apply', 'php');
}

// --- HTTP ---------------------------------------------------------------------------------------------

function get(port: number, address: string, host: string, urlPath = '/'): Promise<{ status: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: address, port, path: urlPath, headers: { host }, agent: false }, (res) => {
      let bytes = 0;
      res.on('data', (d: Buffer) => (bytes += d.length));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
  });
}

// --- wrk ----------------------------------------------------------------------------------------------

const wrks = new Set<ChildProcess>();

function wrk(url: string, host: string, connections: number, seconds: number): Promise<WrkResult> {
  checkStopping();
  const args = ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '--timeout', '30s', '-H', `Host: ${host}`, url];
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  wrks.add(child);
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (out += d.toString('utf8')));
  return new Promise((resolve) =>
    child.once('close', () => {
      wrks.delete(child);
      resolve(parseWrk(out));
    }),
  );
}

// --- the run ------------------------------------------------------------------------------------------

const scratch = mkdtempSync(path.join(os.tmpdir(), 'wp-bench-'));
chmodSync(scratch, 0o711);
const wpDataDir = path.join(scratch, 'wordpress');
const dbaasDataDir = path.join(scratch, 'dbaas');
let database: TestDatabase | null = null;
let env: TestWorkflowEnvironment | null = null;
let api: Awaited<ReturnType<typeof createApi>> | null = null;
let server: http.Server | null = null;
let worker: ReturnType<typeof restartableWorker> | null = null;
let provisioner: WordpressProvisioner | null = null;
/**
 * The clean-up's: providers of this host itself (as the worker's, without the way to other hosts),
 * so that a site's database instance is removed here even when Temporal is gone (Ctrl-C reaches
 * its server too).
 */
let hostProvisioner: WordpressProvisioner | null = null;
const serviceIds: number[] = [];
const inFlight = new Set<Promise<unknown>>();

function tracked<T>(p: Promise<T>): Promise<T> {
  inFlight.add(p);
  const done = () => inFlight.delete(p);
  p.then(done, done);
  return p;
}

let cleaning: Promise<void> | null = null;
const cleanUp = () => (cleaning ??= removeEverything());

async function removeEverything() {
  stopping = true;
  recording = false;
  for (const w of wrks) w.kill('SIGKILL');
  await Promise.race([Promise.allSettled([...inFlight]), sleep(180_000)]);
  const step = async (what: string, fn: () => Promise<unknown>) => {
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([fn(), new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('no end within 120 s')), 120_000)))]);
    } catch (err) {
      console.error(`clean-up: ${what}: ${(err as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
  };
  if (database && hostProvisioner) {
    for (const id of serviceIds) {
      await step(`deprovision svc-${id}`, async () => {
        const target = await provisionTargetOf(database!.db, id);
        if (target) await hostProvisioner!.deprovision(target);
      });
    }
  }
  if (api) await step('stopAll', () => (api!.deps.providers.wordpress as unknown as WordpressLocalProvider).stopAll());
  const s0 = server;
  if (s0) {
    s0.closeAllConnections();
    await step('API server', () => new Promise((r) => s0.close(r)));
  }
  if (worker) await step('worker', () => worker!.stop());
  if (api) await step('API', () => api!.close());
  if (env) await step('Temporal', () => env!.teardown());
  // Whatever instance a failed deprovision left.
  await step('database instances', async () => {
    const instances = new DbInstancesAdapter({ rootDir: dbaasDataDir });
    for (const name of await instances.instanceNames()) await instances.destroyInstance(name);
  });
  // Before the data directory goes, in case its files keep anything running.
  if (api) await step('stopAll again', () => (api!.deps.providers.wordpress as unknown as WordpressLocalProvider).stopAll());
  await step('web account', () => removeAccount(accountNameFor('wp', path.resolve(wpDataDir), 'web')));
  await step('scratch', () => rm(scratch, { recursive: true, force: true }));
  if (database) await step('database', () => database!.drop());
}

interface SiteTiming {
  name: string;
  serviceId: number;
  db: number;
  core: number;
  files: number;
  php: number;
  install: number;
  nginx: number;
  after: number;
  first200: number;
  total: number;
  processes: Array<{ label: string; ms: number }>;
}

interface Site {
  id: string;
  serviceId: number;
  name: string;
}

async function newService(accountId: number, name: string): Promise<number> {
  const [row] = await database!
    .db('services')
    .insert({
      account_id: accountId,
      family: 'other',
      product: 'wordpress-starter',
      product_family: 'wordpress',
      status: 'active',
      name: 'WordPress Starter',
      label: name,
      billing_cycle: 'monthly',
      next_due_date: '2030-01-01',
      capabilities: JSON.stringify(DEFAULT_CAPABILITIES.wordpress),
    })
    .returning('id');
  const id = Number(row.id);
  serviceIds.push(id);
  return id;
}

function nginxAddress(): { address: string; port: number } {
  const settings = (api!.deps.providers.wordpress as unknown as { nginx: { settings(): { bindAddress: string; port: number } | null } }).nginx.settings();
  if (!settings) throw new Error('the sites’ nginx has no settings yet');
  return { address: settings.bindAddress, port: settings.port };
}

async function createSite(accountId: number, index: number): Promise<{ site: Site; timing: SiteTiming }> {
  checkStopping();
  const name = `bench-${index}-${randomBytes(3).toString('hex')}.example.test`;
  const serviceId = await newService(accountId, name);
  const target = (await provisionTargetOf(database!.db, serviceId))!;
  marks = {};
  processCalls = [];
  createSiteStartedAt = NaN;
  createSiteEndedAt = NaN;
  recording = true;
  const t0 = now();
  try {
    await tracked(provisioner!.provision(target));
  } finally {
    recording = false;
  }
  const t1 = now();
  const { address, port } = nginxAddress();
  let last = '';
  for (;;) {
    checkStopping();
    const answer = await get(port, address, name).catch((err: Error) => ({ status: 0, bytes: 0, error: err.message }));
    if (answer.status === 200) break;
    last = 'error' in answer ? answer.error : `status ${answer.status}`;
    if (now() - t1 > FIRST_200_TIMEOUT_MS) throw new Error(`${name}: no 200 through nginx within ${FIRST_200_TIMEOUT_MS / 1000} s (last: ${last})`);
    await sleep(20);
  }
  const t2 = now();
  const inCreate = createSiteEndedAt - createSiteStartedAt;
  const m = (k: string) => marks[k] ?? 0;
  return {
    site: { id: `svc_${serviceId}`, serviceId, name },
    timing: {
      name,
      serviceId,
      db: createSiteStartedAt - t0,
      core: m('core'),
      files: inCreate - m('core') - m('php') - m('install') - m('nginx'),
      php: m('php'),
      install: m('install'),
      nginx: m('nginx'),
      after: t1 - createSiteEndedAt,
      first200: t2 - t1,
      total: t2 - t0,
      processes: processCalls,
    },
  };
}

/** The processes of the creations: label, calls per site, median ms per call, total ms per site. */
function processTable(calls: Array<{ label: string; ms: number }>, runs: number): string[] {
  const labels = [...new Set(calls.map((c) => c.label))];
  return labels
    .map((l) => {
      const of = calls.filter((c) => c.label === l);
      const total = of.reduce((sum, c) => sum + c.ms, 0) / runs;
      return {
        l,
        line: `    ${l.padEnd(34)} x${(of.length / runs).toFixed(1).padEnd(5)} median ${pad(String(Math.round(median(of.map((c) => c.ms)))), 6)} ms, ${pad(String(Math.round(total)), 6)} ms/site`,
        total,
      };
    })
    .sort((a, b) => b.total - a.total)
    .map((r) => r.line);
}

// --- the pool's settings ------------------------------------------------------------------------------

function siteRoot(serviceId: number) {
  return path.join(wpDataDir, 'sites', `svc-${serviceId}`);
}

async function fpmAnswers(serviceId: number): Promise<boolean> {
  const sock = path.join(siteRoot(serviceId), 'run', 'php-fpm.sock');
  const net = await import('node:net');
  return new Promise((resolve) => {
    const c = net.connect(sock);
    c.setTimeout(1_000, () => (c.destroy(), resolve(false)));
    c.once('connect', () => (c.destroy(), resolve(true)));
    c.once('error', () => resolve(false));
  });
}

/** Rewrites the pool's `pm` lines (`static:10`, `ondemand:5`), or puts `original` back, and reloads the master gracefully. */
async function setPool(serviceId: number, variant: string | null, original: string): Promise<void> {
  const file = path.join(siteRoot(serviceId), 'php', 'php-fpm.conf');
  let text = original;
  if (variant) {
    const [pm, n] = variant.split(':');
    if (!['static', 'ondemand'].includes(pm) || !/^\d+$/.test(n ?? '')) throw new Error(`--pm: ${variant} is not static:<n> or ondemand:<n>`);
    text = original.replace(/^pm = \w+$/m, `pm = ${pm}`).replace(/^pm\.max_children = \d+$/m, `pm.max_children = ${n}`);
  }
  writeFileSync(file, text);
  const pid = Number(readFileSync(path.join(siteRoot(serviceId), 'php', 'php-fpm.pid'), 'utf8').trim());
  process.kill(pid, 'SIGUSR2');
  await sleep(500);
  for (const until = now() + 10_000; !(await fpmAnswers(serviceId));) {
    if (now() > until) throw new Error('php-fpm did not answer after its reload');
    await sleep(50);
  }
}

/**
 * What PHP itself says, from a file of the bench's put in the site's document root for a few
 * requests, then removed: the pool's OPcache (on, scripts held), and the time WordPress takes to
 * load with SHORTINIT (configuration and the database connection, TLS as the platform requires) and
 * a second connection to the database alone (median of 5 requests after a first one).
 */
async function probe(site: Site): Promise<string> {
  const name = `bench-probe-${randomBytes(4).toString('hex')}.php`;
  const file = path.join(siteRoot(site.serviceId), 'public', name);
  const php = [
    '<?php',
    "define('SHORTINIT', true);",
    '$t0 = microtime(true);',
    "require __DIR__ . '/wp-load.php';",
    '$t1 = microtime(true);',
    'global $wpdb;',
    '$wpdb->close();',
    '$t2 = microtime(true);',
    '$wpdb->db_connect(false);',
    '$t3 = microtime(true);',
    '$cipher = $wpdb->get_var("SHOW SESSION STATUS LIKE \'Ssl_cipher\'", 1);',
    "$s = function_exists('opcache_get_status') ? opcache_get_status(false) : false;",
    'echo json_encode(array(',
    "  'opcache' => $s ? $s['opcache_enabled'] : false,",
    "  'scripts' => $s ? $s['opcache_statistics']['num_cached_scripts'] : 0,",
    "  'jit' => $s && isset($s['jit']) ? $s['jit']['enabled'] : false,",
    "  'shortinit_ms' => ($t1 - $t0) * 1000,",
    "  'connect_ms' => ($t3 - $t2) * 1000,",
    "  'cipher' => $cipher,",
    '));',
    '',
  ].join('\n');
  writeFileSync(file, php, { mode: 0o644 });
  const once = () =>
    new Promise<string>((resolve, reject) => {
      const { address, port } = nginxAddress();
      http
        .get({ host: address, port, path: `/${name}`, headers: { host: site.name }, agent: false }, (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (d: string) => (text += d));
          res.on('end', () => (res.statusCode === 200 ? resolve(text) : reject(new Error(`probe: ${res.statusCode} ${text.slice(0, 200)}`))));
        })
        .on('error', reject);
    });
  try {
    await once();
    const runs: Array<{ opcache: boolean; scripts: number; jit: boolean; shortinit_ms: number; connect_ms: number; cipher: string | null }> = [];
    for (let i = 0; i < 5; i++) runs.push(JSON.parse(await once()));
    const last = runs.at(-1)!;
    return (
      `OPcache ${last.opcache ? 'on' : 'OFF'} (${last.scripts} scripts, JIT ${last.jit ? 'on' : 'off'}); ` +
      `wp-load.php with SHORTINIT ${ms2(median(runs.map((r) => r.shortinit_ms)))} ms, ` +
      `a database connection alone ${ms2(median(runs.map((r) => r.connect_ms)))} ms (TLS ${last.cipher ?? 'none'}), medians of 5`
    );
  } catch (err) {
    return `(the probe failed: ${(err as Error).message})`;
  } finally {
    await rm(file, { force: true });
  }
}

const poolLines = (text: string) =>
  text
    .split('\n')
    .filter((l) => l.startsWith('pm'))
    .join(', ');

interface LoadRow {
  pool: string;
  what: 'page' | 'static';
  connections: number;
  r: WrkResult;
  cpu: { php: number; nginx: number; mariadb: number; wrk: number };
  /** Cores busy with anything else (other processes, this one) during the run, from /proc/stat. */
  others: number;
}

/** Busy CPU seconds of the whole machine (all cores) since boot: /proc/stat without idle and iowait. */
function machineBusy(): number {
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1, 9).map(Number);
  return (f.reduce((a, b) => a + b, 0) - f[3] - f[4]) / CLK_TCK;
}

async function loadRun(site: Site, what: 'page' | 'static', connections: number, pool: string): Promise<LoadRow> {
  const { address, port } = nginxAddress();
  const url = `http://${address}:${port}${what === 'page' ? '/' : STATIC_PATH}`;
  if (WARMUP_S > 0) await wrk(url, site.name, connections, WARMUP_S);
  const confPath = `${siteRoot(site.serviceId)}/php/php-fpm.conf`;
  const groups = {
    php: (p: ProcInfo) => p.cmdline.includes(confPath) && p.cmdline.startsWith('php-fpm: master'),
    nginx: (p: ProcInfo) => p.comm === 'nginx' && p.cmdline.startsWith('nginx: master') && p.cmdline.includes(wpDataDir),
    mariadb: (p: ProcInfo) =>
      (p.comm === 'mariadbd' || p.comm === 'mysqld') && p.cmdline.includes(dbaasDataDir) && p.cmdline.includes(`svc-${site.serviceId}-wp`),
  };
  const before = processes();
  const c0 = { php: groupCpu(before, groups.php), nginx: groupCpu(before, groups.nginx), mariadb: groupCpu(before, groups.mariadb), wrk: reapedChildrenCpu() };
  const busy0 = machineBusy();
  const t0 = now();
  const r = await wrk(url, site.name, connections, DURATION_S);
  checkStopping();
  const seconds = (now() - t0) / 1000;
  const busy = machineBusy() - busy0;
  const after = processes();
  const used = {
    php: groupCpu(after, groups.php) - c0.php,
    nginx: groupCpu(after, groups.nginx) - c0.nginx,
    mariadb: groupCpu(after, groups.mariadb) - c0.mariadb,
    wrk: reapedChildrenCpu() - c0.wrk,
  };
  const per = (sec: number) => (sec * 1000) / Math.max(1, r.requests);
  return {
    pool,
    what,
    connections,
    r,
    cpu: { php: per(used.php), nginx: per(used.nginx), mariadb: per(used.mariadb), wrk: per(used.wrk) },
    others: Math.max(0, busy - used.php - used.nginx - used.mariadb - used.wrk) / seconds,
  };
}

function printLoadRow(row: LoadRow) {
  const { r, cpu } = row;
  console.log(
    `  ${row.pool.padEnd(12)}${row.what.padEnd(8)}${pad(String(row.connections), 5)}${pad(r.rate.toFixed(1), 10)}${pad(ms2(r.p50), 9)}${pad(ms2(r.p99), 9)}${pad(ms2(r.max), 9)}${pad(String(r.non2xx), 8)}${pad(String(r.socketErrors), 8)}` +
      `${pad(ms2(cpu.php), 8)}${pad(ms2(cpu.nginx), 8)}${pad(ms2(cpu.mariadb), 8)}${pad(ms2(cpu.wrk), 8)}${pad(row.others.toFixed(2), 8)}   load ${load()}`,
  );
}

// --- recipe applies -----------------------------------------------------------------------------------

interface ApplyTiming {
  site: string;
  kind: 'first' | 'again';
  backup: boolean;
  to202: number;
  toSucceeded: number;
  total: number;
  /** When each step was first seen finished, ms after the 202. */
  steps: Record<string, number>;
  plugins: string;
}

async function apply(base: string, key: string, site: Site, kind: 'first' | 'again', backup: boolean): Promise<ApplyTiming> {
  checkStopping();
  const t0 = now();
  const res = await tracked(
    fetch(`${base}/v1/wordpress/${site.id}/recipes/apply`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'starter-blog', skip_backup: !backup }),
    }),
  );
  const text = await res.text();
  if (res.status !== 202) throw new Error(`apply on ${site.name}: ${res.status} ${text}`);
  const t1 = now();
  const opId = (JSON.parse(text) as { id: string }).id;
  const steps: Record<string, number> = {};
  for (;;) {
    checkStopping();
    const op = await database!.db('operations').where({ id: opId }).first('status', 'result', 'error');
    for (const st of (op?.result?.steps ?? []) as Array<{ name: string; status: string }>) {
      if (st.status !== 'not_run' && !(st.name in steps)) steps[st.name] = now() - t1;
    }
    if (op?.status === 'succeeded') {
      const t2 = now();
      const plugins = ((op.result?.plugins ?? []) as Array<{ slug: string; action: string }>).map((p) => `${p.slug} ${p.action}`).join(', ');
      return { site: site.name, kind, backup, to202: t1 - t0, toSucceeded: t2 - t1, total: t2 - t0, steps, plugins };
    }
    if (op?.status === 'failed') throw new Error(`apply on ${site.name} failed: ${JSON.stringify(op.error)}`);
    if (now() - t1 > APPLY_TIMEOUT_MS) throw new Error(`apply on ${site.name} did not end within ${APPLY_TIMEOUT_MS / 1000} s`);
    await sleep(50);
  }
}

/** Step durations from the times each step was seen finished (its start is the previous one's end). */
function stepSplit(a: ApplyTiming): string {
  const order = ['checksums', 'backup', 'plugins', 'constants', 'options', 'roles', 'secrets', 'verify', 'register'];
  let prev = 0;
  const parts: string[] = [];
  for (const name of order) {
    const at = a.steps[name];
    if (at === undefined) continue;
    parts.push(`${name} ${s(at - prev)}`);
    prev = at;
  }
  return parts.join(', ');
}

// --- main ---------------------------------------------------------------------------------------------

async function main() {
  if (process.getuid?.() !== 0) throw new Error('run as root: each site runs as an OS account of its own');
  if (spawnSync('wrk', ['-v']).error) throw new Error('wrk is missing: apt-get install wrk');
  if (SITES < 1 + 2 * APPLY_ROUNDS) throw new Error(`--sites must be at least 1 + 2 x --apply-rounds (${1 + 2 * APPLY_ROUNDS})`);
  const verdicts: Array<{ label: string; detail: string; ok: boolean }> = [];
  const git = (...a: string[]) => execFileSync('git', a, { cwd: root, encoding: 'utf8' }).trim();
  const dirty = git('status', '--porcelain', '--', 'providers/wordpress', 'domain/wordpress', 'workflows/wordpress', 'activities/wordpress') !== '';
  console.log(
    `wordpress bench: ${os.cpus().length} x ${os.cpus()[0]?.model}, Node ${process.version}, load ${load()}, ${new Date().toISOString()}; ` +
      `commit ${git('rev-parse', '--short', 'HEAD')}${dirty ? ' with uncommitted changes in the wordpress code' : ''}`,
  );
  const neighbours = watchNeighbours();
  console.log(`beside it now: ${othersRunning().join(', ') || 'nothing'}; scratch ${scratch}`);

  // Set-up (untimed): database, Temporal, API, worker, account.
  const t = now();
  mkdirSync(wpDataDir, { mode: 0o711 });
  chmodSync(wpDataDir, 0o711);
  mkdirSync(dbaasDataDir, { mode: 0o700 });
  database = await createTestDatabase();
  // The SDK's own SIGINT handling would stop the worker under the clean-up: runMain's does it.
  // Its core's own log to errors only: after a Ctrl-C (which stops the Temporal server too) the worker retries polling until stopped.
  Runtime.install({ logger: new DefaultLogger('ERROR'), shutdownSignals: [], telemetryOptions: { logging: { filter: { core: 'ERROR', other: 'ERROR' } } } });
  env = await localTemporal();
  const taskQueue = `bench-${randomBytes(4).toString('hex')}`;
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    TEMPORAL_ADDRESS: env.address,
    TEMPORAL_NAMESPACE: 'default',
    TEMPORAL_TASK_QUEUE: taskQueue,
    TEMPORAL_SEARCH_ATTRIBUTES: '1',
    CLOUD_DEV_ENDPOINTS: '1',
    ALLOW_INSECURE_TARGETS: '1',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
    LB_DATA_DIR: path.join(scratch, 'lb'),
    OBJECTSTORAGE_DATA_DIR: path.join(scratch, 's3'),
    DBAAS_DATA_DIR: dbaasDataDir,
    WORDPRESS_DATA_DIR: wpDataDir,
    WORDPRESS_HTTP_PORT: '0',
    WORDPRESS_BACKEND: 'local',
    DBAAS_BACKEND: 'instances',
    DNS_BACKEND: 'simulator',
    LB_BACKEND: 'simulator',
    OBJECTSTORAGE_BACKEND: 'simulator',
    CAAS_BACKEND: 'simulator',
    OPERATION_CACHE_TTL: '100ms',
  });
  const logger = createLogger(config.LOG_LEVEL, 'bench');
  api = await createApi(config, { db: database.db, temporalClient: env.client, logger });
  const listening = api.app.listen(0, '127.0.0.1');
  server = listening;
  await new Promise<void>((resolve) => listening.once('listening', () => resolve()));
  const base = `http://127.0.0.1:${(listening.address() as AddressInfo).port}`;
  const db = database.db;
  const temporal = env;
  worker = restartableWorker(() => ({ config, db, logger, connection: temporal.nativeConnection, temporalClient: temporal.client, taskQueue }));
  await worker.start();
  const { accountId } = await createAccount(db);
  const { userId } = await createUser(db, accountId, { isOwner: true });
  const { token: key } = await createApiKey(db, accountId, userId, {
    scopes: ALL_SCOPES.filter((sc) => !sc.startsWith('apikeys:') && !sc.startsWith('users:')),
  });
  provisioner = new WordpressProvisioner(db, api.deps.providers, api.deps.keyring);
  hostProvisioner = new WordpressProvisioner(db, createProviders({ db, config, host: config.HOST_NAME, caller: null }), api.deps.keyring);
  console.log(`set-up: database, Temporal ${env.address}, API ${base}, worker (workflows bundled) in ${s(now() - t)} s; load ${load()}`);

  instrumentBackend();

  // 1. Site creation.
  console.log(`\n1. site creation (${SITES}), provisioner call to the first 200 through nginx; load ${load()}`);
  console.log(
    `  ${'#'.padEnd(3)}${pad('db', 7)}${pad('core', 7)}${pad('files', 7)}${pad('php', 7)}${pad('install', 8)}${pad('nginx', 7)}${pad('after', 7)}${pad('1st 200', 8)}${pad('TOTAL', 8)}   s`,
  );
  const sites: Site[] = [];
  const timings: SiteTiming[] = [];
  for (let i = 1; i <= SITES; i++) {
    const { site, timing: x } = await createSite(accountId, i);
    sites.push(site);
    timings.push(x);
    console.log(
      `  ${String(i).padEnd(3)}${pad(s(x.db), 7)}${pad(s(x.core), 7)}${pad(s(x.files), 7)}${pad(s(x.php), 7)}${pad(s(x.install), 8)}${pad(s(x.nginx), 7)}${pad(s(x.after), 7)}${pad(s(x.first200), 8)}${pad(s(x.total), 8)}   ${x.name}, load ${load()}`,
    );
  }
  const col = (pick: (x: SiteTiming) => number, from = 0) => timings.slice(from).map(pick);
  const row = (label: string, f: (xs: number[]) => number, from = 0) =>
    `  ${label.padEnd(3)}${[
      col((x) => x.db, from),
      col((x) => x.core, from),
      col((x) => x.files, from),
      col((x) => x.php, from),
      col((x) => x.install, from),
      col((x) => x.nginx, from),
      col((x) => x.after, from),
      col((x) => x.first200, from),
      col((x) => x.total, from),
    ]
      .map((xs, i) => pad(s(f(xs)), [7, 7, 7, 7, 8, 7, 7, 8, 8][i]))
      .join('')}`;
  console.log(row('med', median));
  console.log(row('max', (xs) => Math.max(...xs)));
  if (SITES > 1) console.log(`${row('med', median, 1)}   (sites 2.., without the first site's one-off core and nginx start)`);
  console.log('  child processes per site (all sites):');
  for (const line of processTable(
    timings.flatMap((x) => x.processes),
    SITES,
  ))
    console.log(line);
  const totals = col((x) => x.total);
  verdicts.push({
    label: 'site creation, provisioner call to the first 200 through nginx, median',
    detail: `${s(median(totals))} s vs < ${CREATE_TARGET_MS / 1000} s`,
    ok: median(totals) < CREATE_TARGET_MS,
  });
  verdicts.push({
    label: 'site creation, provisioner call to the first 200 through nginx, max',
    detail: `${s(Math.max(...totals))} s vs < ${CREATE_TARGET_MS / 1000} s`,
    ok: Math.max(...totals) < CREATE_TARGET_MS,
  });

  // 2. Requests/s.
  const loadSite = sites[0];
  const { address, port } = nginxAddress();
  const staticAnswer = await get(port, address, loadSite.name, STATIC_PATH);
  const pageAnswer = await get(port, address, loadSite.name, '/');
  if (staticAnswer.status !== 200) throw new Error(`${STATIC_PATH}: status ${staticAnswer.status}`);
  const probed = await probe(loadSite);
  const confFile = path.join(siteRoot(loadSite.serviceId), 'php', 'php-fpm.conf');
  const original = readFileSync(confFile, 'utf8');
  console.log(
    `\n2. requests/s of ${loadSite.name} through nginx ${address}:${port}: / (${pageAnswer.bytes} bytes) and ${STATIC_PATH} (${staticAnswer.bytes} bytes); ` +
      `wrk -t1 keep-alive, ${WARMUP_S} s warm-up then ${DURATION_S} s; pool as deployed: ${poolLines(original)}; load ${load()}`,
  );
  console.log(`  PHP says: ${probed}`);
  console.log(
    `  ${'pool'.padEnd(12)}${'what'.padEnd(8)}${pad('conn', 5)}${pad('req/s', 10)}${pad('p50', 9)}${pad('p99', 9)}${pad('max', 9)}${pad('non-2xx', 8)}${pad('errors', 8)}${pad('php', 8)}${pad('nginx', 8)}${pad('mariadb', 8)}${pad('wrk', 8)}${pad('others', 8)}`,
  );
  console.log(
    `  ${''.padEnd(12)}${''.padEnd(8)}${pad('', 5)}${pad('', 10)}${pad('ms', 9)}${pad('ms', 9)}${pad('ms', 9)}${pad('', 8)}${pad('', 8)}   CPU ms per request${' '.repeat(12)}cores`,
  );
  const loadRows: LoadRow[] = [];
  const deployed = 'ondemand:5';
  for (const c of CONNECTIONS) {
    const r = await loadRun(loadSite, 'page', c, deployed);
    loadRows.push(r);
    printLoadRow(r);
  }
  for (const c of CONNECTIONS) printLoadRow(await loadRun(loadSite, 'static', c, '(nginx)'));
  try {
    for (const variant of PM_VARIANTS) {
      checkStopping();
      await setPool(loadSite.serviceId, variant, original);
      for (const c of CONNECTIONS) {
        const r = await loadRun(loadSite, 'page', c, variant);
        loadRows.push(r);
        printLoadRow(r);
      }
    }
  } finally {
    if (PM_VARIANTS.length > 0 && !stopping) await setPool(loadSite.serviceId, null, original);
  }
  const best = loadRows.filter((r) => r.pool === deployed).sort((a, b) => b.r.rate - a.r.rate)[0];
  if (best) console.log(`  deployed pool, best: ${best.r.rate.toFixed(1)} req/s at ${best.connections} connections (no target in the issue)`);

  // 3. Recipe applies.
  const seeded = await seedSampleRecipe(db);
  if (!seeded) {
    const res = await fetch(`${base}/v1/wordpress/recipes`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(sampleRecipe()),
    });
    if (res.status !== 201) throw new Error(`registering the sample recipe: ${res.status} ${await res.text()}`);
  }
  console.log(
    `\n3. recipe applies of starter-blog 1.0.0 (${seeded ? 'registered by seedSampleRecipe' : 'registered by POST'}), POST to succeeded, ${APPLY_ROUNDS} rounds of 2 sites; load ${load()}`,
  );
  console.log(`  ${'site'.padEnd(30)}${'apply'.padEnd(7)}${'backup'.padEnd(8)}${pad('to 202', 8)}${pad('to done', 9)}${pad('TOTAL', 8)}   s; steps (s)`);
  const applies: ApplyTiming[] = [];
  const plan: Array<[Site, 'first' | 'again', boolean]> = [];
  for (let r = 0; r < APPLY_ROUNDS; r++) {
    const a = sites[1 + 2 * r];
    const b = sites[2 + 2 * r];
    plan.push([a, 'first', true], [a, 'again', true], [a, 'again', false], [b, 'first', false], [b, 'again', false], [b, 'again', true]);
  }
  for (const [site, kind, backup] of plan) {
    const a = await apply(base, key, site, kind, backup);
    applies.push(a);
    console.log(
      `  ${a.site.padEnd(30)}${kind.padEnd(7)}${(backup ? 'yes' : 'no').padEnd(8)}${pad(s(a.to202), 8)}${pad(s(a.toSucceeded), 9)}${pad(s(a.total), 8)}   ${stepSplit(a)}; plugins: ${a.plugins}; load ${load()}`,
    );
  }
  for (const kind of ['first', 'again'] as const)
    for (const backup of [true, false]) {
      const of = applies.filter((a) => a.kind === kind && a.backup === backup).map((a) => a.total);
      if (of.length)
        console.log(
          `  ${kind.padEnd(6)} ${backup ? 'with backup   ' : 'without backup'}: median ${s(median(of))} s, max ${s(Math.max(...of))} s (n=${of.length})`,
        );
    }

  console.log(`\nload ${load()}, ${new Date().toISOString()}; ${neighbours.stop()}\n`);
  for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
}

// tsx's command line relays a Ctrl-C to this process once more when it does not hear back within
// 30 ms (a busy machine): with no listener left, that second signal would end the process in the
// middle of its clean-up. (`npm run bench -- wordpress` runs it under `node --import tsx`, without that relay.)
let signals = 0;
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.on(signal, () => {
    if (++signals > 1) console.error(`${signal} again: still cleaning up`);
  });

runMain(async () => {
  try {
    await main();
  } finally {
    const started = now();
    await cleanUp();
    console.log(`cleaned up in ${s(now() - started)} s`);
  }
}, cleanUp);
