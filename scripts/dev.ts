import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createConnection, createServer } from 'node:net';
import { hostname } from 'node:os';
import path from 'node:path';
import { defaultServerDataDir, loadConfig, type Config } from '../common/config';
import { randomBase62 } from '../common/crypto';
import { createDb } from '../db/knex';
import { seedDemo } from '../db/seeds';
import { createProviders, placedFamilies } from '../families';
import { hostRegistrationOf } from '../domain/hosts/agent';
import { heartbeat, registerHost } from '../domain/hosts/registry';
import { HOST_NAME_PATTERN } from '../common/hosts';
import { loadKeyring } from '../infra/master-key';
import { PowerDnsServer, stopPowerDnsServer } from '../providers/powerdns/powerdns.server';
import { SeaweedServer, stopSeaweedServer } from '../providers/seaweedfs/seaweedfs.server';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { checkoutRanges, joinHostPort, portOrFree, splitHostPort } from '../providers/local-server';
import { DEV_SERVER_SEARCH_ATTRIBUTE_ARGS } from '../infra/temporal';
import { IMAGES_NODE_FLAGS } from '../dataplane/images/node-flags';
import { HarakaServer, stopHarakaServer } from '../providers/haraka/haraka.server';
import { startMailCatcher } from './mail-catcher';
import { serverlessDirs } from '../dataplane/serverless/main';
import { stopRedisServer } from '../providers/redis/redis.server';
import { CaasPodmanProvider } from '../providers/caas/caas.podman';
import { WordpressLocalProvider } from '../providers/wordpress/wordpress.local';
import { create as createTar } from 'tar';
import { CAAS_SAMPLE_DIR, CAAS_SAMPLE_PATH } from '../db/seeds/caas.seed';

/**
 * The local run (`npm start`): PostgreSQL is already up (scripts/ensure-tools.sh); this migrates and
 * seeds, starts the Temporal dev server (SQLite file, UI), the worker and the API, prints where
 * everything is, and stops all of it cleanly on Ctrl-C.
 */
const root = path.resolve(__dirname, '..');
const dataDir = path.join(root, '.data');
const temporalBin = path.join(root, '.tools/venv/bin/temporal');
const tsxBin = path.join(root, 'node_modules/.bin/tsx');

const localEnv: Record<string, string> = {
  CLOUD_DEV_ENDPOINTS: '1',
  WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
  NODE_ENV: process.env.NODE_ENV ?? 'development',
};
const env = { ...localEnv, ...process.env } as Record<string, string>;
let config: Config = loadConfig(env);
const children: ChildProcess[] = [];

/**
 * What this checkout's run must not share with another checkout's on the same machine (each runs its
 * own servers): its own address ranges for balancers and database instances, and, where the usual
 * port is taken (by another checkout's run, most often), a free one for the API, Temporal, its UI
 * and PowerDNS. Only settings left unset are chosen; the children get them through `env`. Returns
 * lines for the banner saying what moved.
 */
async function chooseLocalSettings(): Promise<string[]> {
  const unset = (name: string) => !process.env[name];
  const ranges = checkoutRanges(root);
  if (unset('LB_BIND_ADDRESS')) env.LB_BIND_ADDRESS = ranges.lb;
  if (unset('DBAAS_ADDRESS_RANGE')) env.DBAAS_ADDRESS_RANGE = ranges.dbaas;
  if (unset('CAAS_SUBNET_POOL')) env.CAAS_SUBNET_POOL = ranges.caas;
  // The host this checkout's servers are placed on keeps its name when the machine's changes (a
  // container's host name often does): the first run's, kept in .data/host-name.
  if (unset('HOST_NAME')) env.HOST_NAME = localHostName();
  const moved: string[] = [];
  const usual = loadConfig(env);
  const move = async (what: string, name: string, host: string, port: number, set: (port: number) => string, opts: { udp?: boolean } = {}) => {
    if (!unset(name)) return;
    const chosen = await portOrFree(host, port, opts);
    if (chosen === port) return;
    env[name] = set(chosen);
    moved.push(`${what} port ${port} is taken on ${host}: this run uses ${chosen}`);
  };
  await move('API', 'PORT', usual.HOST, usual.PORT, String);
  await move('Image delivery', 'IMAGES_PORT', usual.HOST, usual.IMAGES_PORT, String);
  await move('Mail data plane', 'MAIL_PORT', usual.HOST, usual.MAIL_PORT, String);
  await move('Serverless data planes', 'SERVERLESS_PORT', usual.HOST, usual.SERVERLESS_PORT, String);
  // The sites' nginx binds its port much later (after the seed's first site): a port chosen free now
  // could be taken by then, so a taken usual port lets nginx take a free one itself (kept for later runs).
  if (unset('WORDPRESS_HTTP_PORT') && (await portOrFree(usual.WORDPRESS_BIND_ADDRESS, usual.WORDPRESS_HTTP_PORT)) !== usual.WORDPRESS_HTTP_PORT) {
    env.WORDPRESS_HTTP_PORT = '0';
    moved.push(
      `WordPress sites port ${usual.WORDPRESS_HTTP_PORT} is taken on ${usual.WORDPRESS_BIND_ADDRESS}: the sites' nginx takes a free one (the Sites line)`,
    );
  }
  const temporal = splitHostPort(usual.TEMPORAL_ADDRESS);
  await move('Temporal', 'TEMPORAL_ADDRESS', temporal.host, temporal.port, (p) => joinHostPort(temporal.host, p));
  const ui = new URL(usual.TEMPORAL_UI_URL);
  await move('Temporal UI', 'TEMPORAL_UI_URL', ui.hostname, Number(ui.port || '80'), (p) => `http://${joinHostPort(ui.hostname, p)}`);
  const ownPowerDns =
    usual.DNS_BACKEND === 'powerdns' && !usual.POWERDNS_API_KEY ? await PowerDnsServer.find(path.resolve(root, usual.POWERDNS_DATA_DIR)) : null;
  if (ownPowerDns) {
    // This checkout's PowerDNS still runs (a run that was killed, or one that moved its ports): this run re-uses it where it is.
    if (unset('POWERDNS_API_URL') && ownPowerDns.apiUrl !== usual.POWERDNS_API_URL.replace(/\/$/, '')) {
      env.POWERDNS_API_URL = ownPowerDns.apiUrl;
      moved.push(`PowerDNS of this checkout already runs with its API at ${ownPowerDns.apiUrl}: this run uses it`);
    }
    if (unset('DNS_SERVER_ADDRESS') && ownPowerDns.dnsAddress !== usual.DNS_SERVER_ADDRESS) {
      env.DNS_SERVER_ADDRESS = ownPowerDns.dnsAddress;
      moved.push(`PowerDNS of this checkout already answers DNS on ${ownPowerDns.dnsAddress}: this run uses it`);
    }
  } else if (usual.DNS_BACKEND === 'powerdns' && !usual.POWERDNS_API_KEY) {
    const api = new URL(usual.POWERDNS_API_URL);
    await move('PowerDNS API', 'POWERDNS_API_URL', api.hostname, Number(api.port || '80'), (p) => `http://${joinHostPort(api.hostname, p)}`);
    const dns = splitHostPort(usual.DNS_SERVER_ADDRESS);
    await move('PowerDNS DNS', 'DNS_SERVER_ADDRESS', dns.host, dns.port, (p) => joinHostPort(dns.host, p), { udp: true });
  }
  // DECISIONS: every "is this record published" check of a local run asks its own PowerDNS.
  if (unset('DNS_RESOLVER') && usual.DNS_BACKEND === 'powerdns') env.DNS_RESOLVER = env.DNS_SERVER_ADDRESS ?? usual.DNS_SERVER_ADDRESS;
  config = loadConfig(env);
  return moved;
}

function portOpen(hostPort: string): Promise<boolean> {
  const [host, port] = hostPort.split(':');
  return new Promise((resolve) => {
    const socket = createConnection({ host, port: Number(port) });
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

/** A port nothing listens on now (the kernel picks it). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs = 60_000) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what} did not come up within ${timeoutMs / 1000} s`);
}

function run(name: string, command: string, args: string[], extraEnv: Record<string, string> = {}) {
  const child = spawn(command, args, { cwd: root, env: { ...env, ...extraEnv }, stdio: ['ignore', 'inherit', 'inherit'] });
  child.on('exit', (code, signal) => {
    if (!stopping) {
      console.error(`${name} exited (${signal ?? code}); stopping everything`);
      void stop(1);
    }
  });
  children.push(child);
  return child;
}

/** Demo passwords: from the environment, else generated once and kept in .data/ to print on every start. */
function demoPasswords() {
  const file = path.join(dataDir, 'demo-credentials.json');
  const stored = existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : {};
  const passwords = {
    owner: process.env.DEMO_OWNER_PASSWORD ?? stored.owner ?? randomBase62(16),
    dev: process.env.DEMO_DEV_PASSWORD ?? stored.dev ?? randomBase62(16),
    other: process.env.DEMO_OTHER_PASSWORD ?? stored.other ?? randomBase62(16),
  };
  writeFileSync(file, JSON.stringify(passwords, null, 2), { mode: 0o600 });
  return passwords;
}

/** Whether this run manages a local PowerDNS (this checkout's, in POWERDNS_DATA_DIR) rather than a simulator or someone else's server. */
const ownsPowerDns = () => config.DNS_BACKEND === 'powerdns' && !config.POWERDNS_API_KEY;

/**
 * The DNS family's server: a local PowerDNS (data in .data/powerdns, DNS on DNS_SERVER_ADDRESS, API at
 * POWERDNS_API_URL), unless DNS_BACKEND=simulator or a key is given (someone else's server). It runs
 * detached with a pidfile; one left running by an earlier run of this checkout is re-used.
 */
async function startPowerDns(): Promise<string> {
  if (config.DNS_BACKEND === 'simulator') return 'simulator (DNS_BACKEND=simulator; answers no queries)';
  if (config.POWERDNS_API_KEY) return `PowerDNS at ${config.POWERDNS_API_URL} (POWERDNS_API_KEY given; not started here)`;
  const api = new URL(config.POWERDNS_API_URL);
  const powerDns = await PowerDnsServer.start({
    dataDir: path.resolve(root, config.POWERDNS_DATA_DIR),
    dnsAddress: config.DNS_SERVER_ADDRESS,
    apiAddress: `${api.hostname}:${api.port || '80'}`,
    // Its start-up banner is noise here; warnings and errors are not.
    log: (line) => {
      if (
        !/^(Loading|This is a standalone|Listening on controlsocket|UDP server bound|TCP server bound|PowerDNS Authoritative|Using 64-bits|PowerDNS comes with|\[webserver\] Listening|Creating backend connection|About to create|Done launching|Only asked for)/.test(
          line,
        )
      ) {
        console.error(`[powerdns] ${line}`);
      }
    },
  });
  if (powerDns.adopted) console.log(`PowerDNS already answers at ${config.POWERDNS_API_URL} (pid ${powerDns.pid}); using it`);
  return `PowerDNS, queries on ${config.DNS_SERVER_ADDRESS} (UDP/TCP), API ${config.POWERDNS_API_URL}\n               log in ${powerDns.logFile}`;
}

/**
 * Two small web servers on loopback ports found free, in this process (so Ctrl-C stops them): the
 * backends of the seeded load balancer's demo listener, each saying which one answered, so a few
 * requests through the balancer show its round robin. A balancer may not point at the platform's
 * own ports (the API's included), so the demo needs servers of its own.
 */
async function startDemoBackends(): Promise<Array<{ ip: string; port: number; weight: number }>> {
  const backends = [];
  // The first also serves the demo container app's source (db/seeds/caas-sample), its source URL.
  const sample = await sampleArchive();
  for (const n of [1, 2]) {
    const server = createHttpServer((req, res) => {
      if (n === 1 && req.url === CAAS_SAMPLE_PATH) {
        res.writeHead(200, { 'content-type': 'application/gzip', 'content-length': sample.length });
        return void res.end(sample);
      }
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(req.url === '/healthz' ? 'ok\n' : `Hello from demo backend ${n} (${req.headers.host ?? ''}${req.url ?? ''})\n`);
    });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
    server.unref();
    const { port } = server.address() as { port: number };
    backends.push({ ip: '127.0.0.1', port, weight: 1 });
  }
  return backends;
}

/** Where the seeded container app answers: the service's ingress and the Host to send. */
async function caasDemoNote(db: ReturnType<typeof createDb>): Promise<string> {
  const row = await db('caas_apps as a')
    .join('caas_services as c', 'c.service_id', 'a.service_id')
    .join('services as s', 's.id', 'a.service_id')
    .where({ 's.account_id': 1, 'a.name': 'hello' })
    .first('c.ingress_url', 'a.default_host', 'a.status');
  return row
    ? `${row.ingress_url}   (container apps by Host: curl -H 'Host: ${row.default_host}' ${row.ingress_url}; ${row.status})`
    : 'no container service seeded';
}

/** How to reach the seeded WordPress site (it answers by Host on the sites' nginx). */
async function wordpressDemoNote(db: ReturnType<typeof createDb>): Promise<string> {
  if (config.WORDPRESS_BACKEND === 'simulator') return 'WordPress simulated (WORDPRESS_BACKEND=simulator; serves no site)';
  const row = await db('wordpress_sites as w')
    .join('services as s', 's.id', 'w.service_id')
    .where('s.account_id', 1)
    .whereNotNull('w.ip')
    .orderBy('w.service_id')
    .first('w.name', 'w.ip', 'w.http_port', 'w.service_id');
  if (!row) return 'no WordPress site yet (order wordpress-starter with a site_name)';
  return `${row.name} (svc_${row.service_id}) answers at http://${row.ip}:${row.http_port} with Host: ${row.name}
               curl -H 'Host: ${row.name}' http://${row.ip}:${row.http_port}/   wp-admin: POST /v1/wordpress/svc_${row.service_id}/autologin`;
}

/** db/seeds/caas-sample as a .tar.gz (one top directory, as a source archive usually has). */
async function sampleArchive(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  const stream = createTar({ gzip: true, cwd: path.dirname(CAAS_SAMPLE_DIR), portable: true }, [path.basename(CAAS_SAMPLE_DIR)]);
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/**
 * The servers this run's seed and worker started: balancers' HAProxy and the database instances are
 * daemons, made to outlive the API and the worker (in production they do), so a local run stops
 * them itself, through their providers, once the worker is gone. Their files stay: the next
 * `npm start` brings them back. PowerDNS (detached too, with a pidfile) goes the same way.
 */
async function stopServers(): Promise<void> {
  const steps: Array<[string, () => Promise<void>]> = [
    [
      'load balancers',
      async () =>
        config.LB_BACKEND === 'haproxy' ? new HaproxyLbProvider({ dataDir: config.LB_DATA_DIR, bindAddress: config.LB_BIND_ADDRESS }).stopAll() : undefined,
    ],
    [
      'database instances',
      async () =>
        config.DBAAS_BACKEND === 'instances'
          ? new DbInstancesAdapter({ rootDir: config.DBAAS_DATA_DIR ?? defaultServerDataDir('dbaas'), addressRange: config.DBAAS_ADDRESS_RANGE }).stopServers()
          : undefined,
    ],
    // The host's SeaweedFS, through its pidfile (the seed or the worker's keeper started it).
    ['object storage', async () => (config.OBJECTSTORAGE_BACKEND === 'seaweedfs' ? stopSeaweedServer(config.OBJECTSTORAGE_DATA_DIR) : undefined)],
    // The container services' routers and containers (their images and records stay: the worker's keeper starts them again).
    [
      'container apps',
      async () =>
        config.CAAS_BACKEND === 'podman'
          ? new CaasPodmanProvider({ dataDir: config.CAAS_DATA_DIR, bindAddress: config.CAAS_BIND_ADDRESS, blockedRanges: [] }).stopAll()
          : undefined,
    ],
    // The host's MTA (the mail data plane started it), through its pidfile; its queue stays for the next run.
    ['mail server (Haraka)', async () => stopHarakaServer(config.MAIL_DATA_DIR)],
    // The host's Redis for serverless kv (the serverless data plane started it), through its pidfile; its data stays.
    ['kv server (Redis)', async () => (config.KV_BACKEND === 'redis' ? stopRedisServer(serverlessDirs(config).redis) : undefined)],
    // Every site's php-fpm and the sites' nginx (their files and databases stay: the seed and the worker's keeper start them again).
    [
      'WordPress sites',
      async () =>
        config.WORDPRESS_BACKEND === 'local'
          ? new WordpressLocalProvider({
              dataDir: config.WORDPRESS_DATA_DIR,
              bindAddress: config.WORDPRESS_BIND_ADDRESS,
              httpPort: config.WORDPRESS_HTTP_PORT,
              smtpRelay: null,
            }).stopAll()
          : undefined,
    ],
    // Through its pidfile: also one this run adopted, or started and lost track of (a Ctrl-C while it started).
    ['PowerDNS', async () => (ownsPowerDns() ? stopPowerDnsServer(path.resolve(root, config.POWERDNS_DATA_DIR)) : undefined)],
  ];
  for (const [what, step] of steps) {
    await step().catch((err: unknown) => console.error(`stopping ${what} failed: ${(err as Error).message}`));
  }
}

/** Where the host's MTA takes SMTP submissions (its port is chosen at its first start and kept). */
function mailSmtpNote(): string {
  const settings = HarakaServer.settingsOf(config.MAIL_DATA_DIR);
  return settings ? `${settings.bindAddress}:${settings.port}` : 'starts with the mail data plane';
}

/** Where the host's S3 server answers (its port is chosen at its first start and kept). */
function objectStorageNote(): string {
  if (config.OBJECTSTORAGE_BACKEND === 'simulator') return 'object storage simulated (OBJECTSTORAGE_BACKEND=simulator; answers no S3)';
  const settings = SeaweedServer.settingsOf(config.OBJECTSTORAGE_DATA_DIR);
  return settings
    ? `object storage (SeaweedFS) S3 at http://${settings.bindAddress}:${settings.ports.s3}`
    : 'object storage (SeaweedFS) starts with the first object storage';
}

/** The name of this checkout's host: the one `.data/host-name` keeps, else the machine's (kept there). */
function localHostName(): string {
  const file = path.join(dataDir, 'host-name');
  const kept = existsSync(file) ? readFileSync(file, 'utf8').trim() : '';
  if (HOST_NAME_PATTERN.test(kept)) return kept;
  const name =
    hostname()
      .toLowerCase()
      .replace(/[^a-z0-9.-]/g, '-')
      .replace(/^[^a-z0-9]+/, '')
      .slice(0, 63) || 'local';
  writeFileSync(file, `${name}\n`);
  return name;
}

let stopping = false;
async function stop(code = 0) {
  if (stopping) return;
  stopping = true;
  console.log('\nstopping API, worker, Temporal, load balancers, database instances, object storage, WordPress sites, the mail server, Redis and PowerDNS...');
  // API and worker first (they drain, and the worker's keepers would start the servers again), Temporal last.
  for (const child of [...children].reverse()) {
    if (child.exitCode === null) child.kill('SIGTERM');
    await new Promise((resolve) => (child.exitCode !== null ? resolve(null) : child.once('exit', resolve)));
  }
  await stopServers();
  process.exit(code);
}

async function main() {
  mkdirSync(dataDir, { recursive: true });
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));

  const moved = await chooseLocalSettings();
  const db = createDb(config.DATABASE_URL);
  await db.migrate.latest();
  const passwords = demoPasswords();
  const dnsNote = await startPowerDns();
  // Outgoing mail goes to a local catcher unless MAIL_SMARTHOST says where (no recipient's server is
  // reachable from here); hosted sites send through it too (before the seed: the seeded site's
  // configuration names its relay).
  const outbox = path.join(dataDir, 'mail-outbox');
  if (!process.env.MAIL_SMARTHOST) env.MAIL_SMARTHOST = (await startMailCatcher(outbox)).address;
  if (!process.env.WORDPRESS_SMTP_RELAY) env.WORDPRESS_SMTP_RELAY = env.MAIL_SMARTHOST;
  config = loadConfig(env);
  // The demo servers are built here, on this machine's host (the worker, its agent, registers it again).
  const registration = hostRegistrationOf(config, [...placedFamilies(config).keys()]);
  if (registration.families.length > 0) await registerHost(db, registration);
  // The host stays up while the seed builds (a host missing three heartbeats is down, and the seeds
  // place services on it: a slow seed, such as a first run's base image, must not outlast it).
  const beating =
    registration.families.length > 0 ? setInterval(() => void heartbeat(db, registration.name).catch(() => undefined), registration.heartbeatIntervalMs) : null;
  const seeded = await seedDemo(db, passwords, createProviders({ db, config, host: config.HOST_NAME }), {
    apiPort: config.PORT,
    demoBackends: await startDemoBackends(),
    keyring: await loadKeyring(db, config.CLOUD_MASTER_KEY),
    config,
  }).finally(() => {
    if (beating) clearInterval(beating);
  });
  const caasNote = await caasDemoNote(db);
  const wordpressNote = await wordpressDemoNote(db);
  await db.destroy();
  // The host's SeaweedFS (started by the seed) has ports besides S3 that take unauthenticated admin
  // calls (its master, gRPC): outbound fetches made for customers may not reach any of them.
  const seaweed = config.OBJECTSTORAGE_BACKEND === 'seaweedfs' ? SeaweedServer.settingsOf(config.OBJECTSTORAGE_DATA_DIR) : null;
  if (seaweed) env.WEBHOOK_PROTECTED_PORTS = [env.WEBHOOK_PROTECTED_PORTS, ...Object.values(seaweed.ports)].filter(Boolean).join(',');

  if (await portOpen(config.TEMPORAL_ADDRESS)) {
    console.log(`Temporal already answers at ${config.TEMPORAL_ADDRESS}; using it`);
  } else {
    const [host, port] = config.TEMPORAL_ADDRESS.split(':');
    const uiPort = new URL(config.TEMPORAL_UI_URL).port || '8233';
    // The dev server's HTTP API and metrics ports are named, so that webhook targets (with
    // WEBHOOK_ALLOW_INSECURE_TARGETS) can be kept away from them like from the frontend and the UI.
    const [httpPort, metricsPort] = [await freePort(), await freePort()];
    env.WEBHOOK_PROTECTED_PORTS = [env.WEBHOOK_PROTECTED_PORTS, httpPort, metricsPort].filter(Boolean).join(',');
    run(
      'temporal',
      temporalBin,
      [
        'server',
        'start-dev',
        '--ip',
        host,
        '--port',
        port,
        '--ui-port',
        uiPort,
        '--http-port',
        String(httpPort),
        '--metrics-port',
        String(metricsPort),
        '--db-filename',
        path.join(dataDir, 'temporal.db'),
        '--namespace',
        config.TEMPORAL_NAMESPACE,
        '--log-level',
        'error',
        ...DEV_SERVER_SEARCH_ATTRIBUTE_ARGS,
      ],
      { TEMPORAL_VERSION_CHECK_DISABLED: '1' },
    );
    await waitFor('Temporal', () => portOpen(config.TEMPORAL_ADDRESS));
  }
  run('worker', tsxBin, ['workers/main.ts']);
  run('api', tsxBin, ['api/server.ts']);
  run('images', tsxBin, [...IMAGES_NODE_FLAGS, 'dataplane/images/main.ts']);
  run('mail', tsxBin, ['dataplane/mail/main.ts']);
  run('serverless', tsxBin, ['dataplane/serverless/main.ts']);
  const apiUrl = `http://${config.HOST}:${config.PORT}`;
  await waitFor('API', async () => (await fetch(`${apiUrl}/readyz`).catch(() => null))?.ok === true);
  await waitFor('mail data plane', async () => (await fetch(`http://${config.HOST}:${config.MAIL_PORT}/healthz`).catch(() => null))?.ok === true);
  await waitFor('serverless data planes', async () => (await fetch(`http://${config.HOST}:${config.SERVERLESS_PORT}/healthz`).catch(() => null))?.ok === true);

  const passwordNote = process.env.DEMO_OWNER_PASSWORD ? '(from DEMO_OWNER_PASSWORD)' : '(generated, kept in .data/demo-credentials.json)';
  console.log(`
  Cloud control plane is up${seeded.createdUsers ? ' (demo data seeded)' : ''}.${
    seeded.resetPasswords.length ? `\n  Demo passwords of ${seeded.resetPasswords.join(', ')} were reset to the ones below.` : ''
  }

  API          ${apiUrl}/v1        OpenAPI: ${apiUrl}/v1/openapi.json
  Reference    ${apiUrl}/docs
  Images       http://${config.HOST}:${config.IMAGES_PORT}/v1/img   (the image delivery plane: delivery tokens, not API keys)
  Mail         http://${config.HOST}:${config.MAIL_PORT}/emails   (sending keys mg_live_...)   SMTP ${mailSmtpNote()}
               outgoing mail ${process.env.MAIL_SMARTHOST ? `relayed to ${process.env.MAIL_SMARTHOST}` : `kept in ${path.join(dataDir, 'mail-outbox')} (.eml)`}
  Apps         ${caasNote}
  Sites        ${wordpressNote}
  Serverless   http://${config.HOST}:${config.SERVERLESS_PORT}/{cron,db,functions,kv}   (tokens crt_, dbt_, fnt_, kvt_ from /v1/serverless/*/keys/rotate)
  MCP          ${apiUrl}/mcp       (Streamable HTTP, Bearer credential; or \`npx cloud mcp\` on stdio)
  Temporal UI  ${config.TEMPORAL_UI_URL}
  Temporal     ${config.TEMPORAL_ADDRESS} (namespace ${config.TEMPORAL_NAMESPACE}, task queue ${config.TEMPORAL_TASK_QUEUE})
  DNS          ${dnsNote}
  Servers      host ${config.HOST_NAME}: balancers in ${config.LB_BIND_ADDRESS}, database instances in ${config.DBAAS_ADDRESS_RANGE}
               ${objectStorageNote()}
               data in ${path.dirname(path.resolve(config.LB_DATA_DIR))}${moved.map((line) => `\n  Moved        ${line}`).join('')}

  Sign in      owner@example.test / ${passwords.owner}   ${passwordNote}
               dev@example.test   / ${passwords.dev}   (narrower scopes and services)
               other@example.test / ${passwords.other}   (owner of a second account, no services)

    npx cloud login --api-url ${apiUrl} --email owner@example.test
    npx cloud services list

  or: curl -s ${apiUrl}/v1/sessions -H 'content-type: application/json' \\
        -d '{"email":"owner@example.test","password":"${passwords.owner}"}'
      then Authorization: Bearer <token>. Ctrl-C stops everything.
`);
}

main().catch((err) => {
  console.error(err);
  void stop(1);
});
