/**
 * Mail gateway (issue #28): `/emails` accepted per second, and send-to-sink latency p50/p99, against
 * injecting the same messages straight into Haraka. Target: the data plane >= 70 % of the baseline.
 *
 *   npx tsx bench/mail.bench.ts [--duration=5] [--warmup=1] [--rounds=3] [--concurrency=1,4,16] [--variants=plane,smtp,platform]
 *   npx tsx bench/mail.bench.ts --duration=2 --rounds=1 --concurrency=4          # a quick look
 *   npx tsx bench/mail.bench.ts --variants=plane --concurrency=16 --cpu-prof=/tmp/mail-prof   # V8 profiles of the plane and of Haraka
 *   npx tsx bench/mail.bench.ts --early-talker                                    # the sink with smtp-server's 100 ms greeting delay
 *
 * Set-up, without vitest: a fresh database (createTestDatabase); three accounts, each with a mail
 * gateway (`services` row family `mailgateway`, product `mailgateway-10k`, built by
 * `MailGatewayProvisioner`) and a sending domain of its own (`addDomain`: its own RSA 2048 DKIM pair),
 * marked verified in the database as test/mailgateway.real.test.ts does. One gateway gets a sending
 * key (`createKey`) for the data plane, one an SMTP credential (`createSmtpCredential`).
 *
 * Processes: the sink, an `smtp-server` SMTPServer on loopback in a process of its own (this file
 * with `--child=sink`) that answers 250 to everything and notes the arrival time of each Message-ID
 * (wall clock, `performance.timeOrigin + performance.now()`, comparable with this process's). Unless
 * `--early-talker`, its connections greet at once: smtp-server waits 100 ms before every greeting
 * (its "early talker" check, hard-coded) and Haraka 3.3.4 opens a new connection for every delivery
 * (outbound/client_pool.js connects per message and destroys the socket after it). The data plane
 * runs as `npm run mail` runs it: `node --import tsx dataplane/mail/main.ts` with DATABASE_URL, a free
 * MAIL_PORT, MAIL_DATA_DIR in a temporary directory, MAIL_SMARTHOST at the sink, a random
 * CLOUD_MASTER_KEY and LOG_LEVEL=warn; it starts Haraka (daemonised, the real hooks of
 * dataplane/mail/mta-hooks.ts on the bench's database), which the bench stops at the end with
 * `stopHarakaServer`. With `--cpu-prof` the bench starts Haraka first, with the options main.ts would
 * give it plus NODE_OPTIONS=--cpu-prof, and main.ts adopts it.
 *
 * Variants, each a closed loop at each concurrency of `--concurrency`, `--warmup` s then `--duration`
 * s, every message distinct (its own recipient and subject, a 1 KiB text body):
 * - `plane`: `POST /emails` with the sending key over keep-alive HTTP (an agent with one socket per
 *   loop). Accepted = 202 answers.
 * - `smtp`: nodemailer, pooled with the data plane's settings (maxConnections 4), submitting straight
 *   to Haraka with the gateway's SMTP credential: Haraka's hooks check the sender, the domain, the
 *   suspension and the quota and record the message themselves, as /emails does. The target's
 *   baseline.
 * - `platform`: the same nodemailer pool as the user `platform` (`platformPassword`), with messages
 *   recorded beforehand outside the window (`recordAccepted`), as the data plane does: Haraka's own
 *   cost with nothing of the gateway's rules but the message look-up. Shown, not the target.
 * After each window: every message accepted (warm-up included) must reach the sink exactly once and
 * be recorded `delivered`; the gateway's `mail_usage_days` must hold as many accepted sends as the
 * bench counted; the usage is then set back to 0 (the plan's 10,000 sends a month would run out).
 * `--rounds` rounds whose order rotates; the median round counts. CPU per message from /proc: the
 * plane, Haraka, the sink, this process, and PostgreSQL's backends split by whose connection they
 * serve (the client port of pg_stat_activity matched with each process's sockets).
 * The database, the temporary directory and every process started are removed at the end, and on
 * SIGINT/SIGTERM. Needs PostgreSQL. Results: docs/benchmarks.md ("Mail gateway").
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import nodemailer, { type Transporter } from 'nodemailer';
import { loadConfig } from '../common/config';
import { Keyring } from '../common/crypto';
import { mtaOptionsOf } from '../dataplane/mail/main';
import { createKey, addDomain } from '../domain/mailgateway/manage';
import { newMessageId, recordAccepted } from '../domain/mailgateway/messages';
import { MailGatewayProvisioner } from '../domain/mailgateway/provisioner';
import { createSmtpCredential, platformPassword } from '../domain/mailgateway/smtp';
import { findGateway } from '../domain/mailgateway/store';
import { provisionTargetOf } from '../domain/provisioning';
import { HarakaServer, stopHarakaServer } from '../providers/haraka/haraka.server';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createService } from '../test/helpers/fixtures';
import { freeLoopbackPort } from '../providers/local-server';
import { ask, exitWithParent, runMain, startChild, type Child, type ChildMessage } from './children';
import { machineBusySeconds, procCpuSeconds } from './cpu';
import { median, summarize, type Summary } from './stats';
import { vitestRunning, watchForSuites } from './suite-watch';
import { load, now, sleep, verdict } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const flag = (name: string) => process.argv.includes(`--${name}`);
const DURATION_S = Number(arg('duration', '5'));
const WARMUP_S = Number(arg('warmup', '1'));
const ROUNDS = Number(arg('rounds', '3'));
const CONCURRENCY = arg('concurrency', '1,4,16').split(',').filter(Boolean).map(Number);
const VARIANTS = arg('variants', 'plane,smtp,platform').split(',').filter(Boolean) as VariantName[];
const CHILD = arg('child', '');
/** A directory for V8 CPU profiles of the data plane and of Haraka (written when they stop). */
const CPU_PROF = arg('cpu-prof', '');
/** Keep smtp-server's 100 ms delay before each greeting at the sink. */
const EARLY_TALKER = flag('early-talker');
const TARGET = 0.7;
/** The baseline the target is judged against. */
const BASELINE: VariantName = 'smtp';
/** The data plane's transport (dataplane/mail/server.ts): the baseline's pool is the same. */
const MAX_CONNECTIONS = 4;
const DRAIN_TIMEOUT_MS = 60_000;
const root = path.resolve(__dirname, '..');

type VariantName = 'plane' | 'smtp' | 'platform';

/** Wall clock with sub-millisecond resolution, comparable between processes of this machine. */
const wall = () => performance.timeOrigin + performance.now();
const f = (n: number, width = 8) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0) : '-').padStart(width);
const pct = (ratio: number) => `${(ratio * 100).toFixed(1)} %`;

/** A text body of about 1 KiB, the same for every variant. */
const TEXT = (n: number) =>
  `Hello reader ${n},\r\n\r\n` +
  Array.from({ length: 14 }, (_, i) => `Line ${i + 1} of the benchmark's message: the quick brown fox jumps over the lazy dog.\r\n`).join('') +
  '\r\nRegards,\r\nThe bench\r\n';

// --- the sink: this file with --child=sink ---------------------------------------------------------

/** Child processes exit with the bench (a killed bench leaves nothing behind). */
/**
 * `--child=sink`: answers 250 to every command and notes, per Message-ID (without its angle
 * brackets), when the end of its DATA arrived. `take` hands the arrivals since the last `take` to
 * the bench; a Message-ID seen twice in the whole run is reported as a duplicate.
 */
async function sinkChild(): Promise<void> {
  const { SMTPServer } = await import('smtp-server');
  if (!EARLY_TALKER) {
    // smtp-server waits 100 ms before each greeting (SMTPConnection#init: setTimeout(connectionReady, 100))
    // to catch clients that talk first. A receiving MX may do that too, but it would put 100 ms of
    // the sink's own into every delivery, as Haraka connects once per message.
    const { SMTPConnection } = (await import('smtp-server/lib/smtp-connection.js')) as unknown as {
      SMTPConnection: { prototype: Record<string, unknown> };
    };
    SMTPConnection.prototype.init = function (this: { _setListeners(cb: () => void): void; connectionReady(): void }) {
      this._setListeners(() => this.connectionReady());
    };
  }
  let fresh: Array<[string, number]> = [];
  const seen = new Set<string>();
  const duplicates: string[] = [];
  let withoutId = 0;
  let connections = 0;
  const server = new SMTPServer({
    disabledCommands: ['AUTH', 'STARTTLS'],
    authOptional: true,
    disableReverseLookup: true,
    logger: false,
    onConnect(_session, callback) {
      connections++;
      callback();
    },
    onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const at = wall();
        const raw = Buffer.concat(chunks).toString('latin1');
        const headerEnd = raw.indexOf('\r\n\r\n');
        const id = /^Message-ID:\s*<([^>\r\n]+)>/im.exec(headerEnd < 0 ? raw : raw.slice(0, headerEnd))?.[1];
        if (!id) withoutId++;
        else if (seen.has(id)) duplicates.push(id);
        else {
          seen.add(id);
          fresh.push([id, at]);
        }
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => server.server.listen(0, '127.0.0.1', () => resolve()));
  exitWithParent(() => new Promise<void>((resolve) => server.close(() => resolve())));
  process.on('message', (m: ChildMessage) => {
    if (m.type !== 'take') return;
    process.send!({ type: 'taken', arrivals: fresh, duplicates: [...duplicates], withoutId, connections, total: seen.size });
    fresh = [];
  });
  process.send!({ type: 'ready', port: (server.server.address() as AddressInfo).port });
}

/** This file as a child process (`--child=<kind>`), once it says it is ready. */
// --- CPU: processes, and PostgreSQL's backends by whose connection they serve --------------------------

/** The inodes of a process's sockets (/proc/<pid>/fd). */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  let fds: string[] = [];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return inodes;
  }
  for (const fd of fds) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** Local TCP port of each socket inode (/proc/net/tcp and tcp6). */
function localPorts(): Map<string, number> {
  const ports = new Map<string, number>();
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10) continue;
      ports.set(cols[9], parseInt(cols[1].split(':')[1], 16));
    }
  }
  return ports;
}

/**
 * The PostgreSQL backends of the bench's database, grouped by the process whose connection each
 * serves (its client port is a local port of one of that process's sockets); `pg other` for the rest.
 */
async function pgBackendsBy(
  db: { raw: (sql: string) => Promise<{ rows: Array<{ pid: number; client_port: number | null }> }> },
  owners: Record<string, number>,
): Promise<Record<string, number[]>> {
  const rows = (await db.raw('select pid, client_port from pg_stat_activity where datname = current_database()')).rows;
  const ports = localPorts();
  const ownerOfPort = new Map<number, string>();
  for (const [name, pid] of Object.entries(owners)) {
    for (const inode of socketInodes(pid)) {
      const port = ports.get(inode);
      if (port !== undefined) ownerOfPort.set(port, name);
    }
  }
  const groups: Record<string, number[]> = Object.fromEntries([...Object.keys(owners), 'other'].map((k) => [`pg ${k}`, []]));
  for (const row of rows) groups[`pg ${(row.client_port !== null && ownerOfPort.get(row.client_port)) || 'other'}`].push(row.pid);
  return groups;
}

type Groups = Record<string, number[]>;

function snapshot(groups: Groups): { machine: number; pids: Map<number, number> } {
  const pids = new Map<number, number>();
  for (const list of Object.values(groups)) for (const pid of list) pids.set(pid, procCpuSeconds(pid));
  return { machine: machineBusySeconds(), pids };
}

/** CPU seconds per group between two snapshots (a process gone meanwhile counts 0), and `others`: the machine's busy time beyond them. */
function cpuSeconds(groups: Groups, before: ReturnType<typeof snapshot>, after: ReturnType<typeof snapshot>): Record<string, number> {
  const out: Record<string, number> = {};
  let ours = 0;
  for (const [group, list] of Object.entries(groups)) {
    out[group] = list.reduce((sum, pid) => sum + Math.max(0, (after.pids.get(pid) ?? 0) - (before.pids.get(pid) ?? 0)), 0);
    ours += out[group];
  }
  out.others = Math.max(0, after.machine - before.machine - ours);
  return out;
}

// --- load ----------------------------------------------------------------------------------------------

interface Outcome {
  /** The Message-ID (without brackets) the sink will see, when accepted. */
  key?: string;
  error?: string;
}

interface Accepted {
  key: string;
  startedAt: number;
  acceptMs: number;
  measured: boolean;
}

interface Window {
  accepted: Accepted[];
  errors: number;
  firstError: string;
  opened: number;
  closed: number;
  elapsed: number;
  cpu: Record<string, number>;
}

/** `concurrency` loops calling `send` back to back: `warmup` s, then the measured window of `seconds` s (with CPU snapshots at its ends), then until every call in flight ended. */
async function closedLoop(
  concurrency: number,
  seconds: number,
  warmup: number,
  send: (n: number) => Promise<Outcome>,
  groupsOf: () => Promise<Groups>,
): Promise<Window> {
  const accepted: Accepted[] = [];
  let errors = 0;
  let firstError = '';
  let measuring = false;
  let stop = false;
  let n = 0;
  const loop = async () => {
    while (!stop) {
      const startedAt = wall();
      const t0 = now();
      let outcome: Outcome;
      try {
        outcome = await send(n++);
      } catch (err) {
        outcome = { error: (err as Error).message };
      }
      const acceptMs = now() - t0;
      if (outcome.key) accepted.push({ key: outcome.key, startedAt, acceptMs, measured: measuring });
      else if (measuring) {
        errors++;
        firstError ||= outcome.error ?? 'refused';
      }
    }
  };
  const loops = Array.from({ length: concurrency }, loop);
  await sleep(warmup * 1000);
  const groups = await groupsOf();
  const before = snapshot(groups);
  const opened = wall();
  const started = now();
  measuring = true;
  await sleep(seconds * 1000);
  measuring = false;
  const elapsed = (now() - started) / 1000;
  const closed = wall();
  const after = snapshot(groups);
  stop = true;
  await Promise.all(loops);
  return { accepted, errors, firstError, opened, closed, elapsed, cpu: cpuSeconds(groups, before, after) };
}

/** `POST /emails` over a keep-alive agent; the 202's id is the Message-ID's local part. */
function postEmail(agent: http.Agent, port: number, secret: string, body: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/emails',
        agent,
        headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

interface RunResult {
  rate: number;
  sinkRate: number;
  accept: Summary;
  toSink: Summary;
  errors: number;
  firstError: string;
  /** CPU ms per accepted message, per group. */
  cpuMs: Record<string, number>;
  /** Cores used per group over the window. */
  cores: Record<string, number>;
}

// --- the bench -----------------------------------------------------------------------------------------

interface Gateway {
  serviceId: number;
  domain: string;
}

async function main(): Promise<void> {
  const watch = watchForSuites();
  const pkg = (name: string) => (JSON.parse(readFileSync(path.join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
  console.log(
    `mail bench: ${os.availableParallelism()} x ${os.cpus()[0]?.model}, Node ${process.version}, Haraka ${pkg('Haraka')}, nodemailer ${pkg('nodemailer')}, ` +
      `smtp-server ${pkg('smtp-server')}, load ${load()}, vitest running now: ${await vitestRunning()}; ` +
      `${DURATION_S} s windows after ${WARMUP_S} s, ${ROUNDS} rounds, concurrency ${CONCURRENCY.join(',')}, variants ${VARIANTS.join(',')}` +
      `${EARLY_TALKER ? ', sink with the 100 ms early-talker delay' : ''}`,
  );
  const database = await createTestDatabase();
  const db = database.db;
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'mail-bench-'));
  const dataDir = path.join(scratch, 'mta');
  let sink: Child | null = null;
  let plane: ChildProcess | null = null;
  const transports: Transporter[] = [];
  const agents: http.Agent[] = [];
  let cleaned: Promise<void> | null = null;
  cleanUp = () =>
    (cleaned ??= (async () => {
      for (const t of transports) t.close();
      for (const a of agents) a.destroy();
      const p = plane;
      if (p && p.exitCode === null && p.signalCode === null) {
        const exited = new Promise((resolve) => p.once('exit', resolve));
        p.kill('SIGTERM');
        const timer = setTimeout(() => p.kill('SIGKILL'), 15_000);
        await exited;
        clearTimeout(timer);
      }
      await stopHarakaServer(dataDir).catch((err: unknown) => console.error(`stopping Haraka: ${(err as Error).message}`));
      await sink?.stop().catch(() => undefined);
      await rm(scratch, { recursive: true, force: true });
      await database.drop();
    })());
  try {
    const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
    const dirty = git('status', '--porcelain', '--', 'dataplane/mail', 'domain/mailgateway', 'providers/haraka', 'db/migrations') !== '';
    const pgVersion = (await db.raw('show server_version')).rows[0].server_version as string;
    console.log(
      `commit ${git('rev-parse', '--short', 'HEAD')}${dirty ? ' with uncommitted changes under dataplane/mail, domain/mailgateway, providers/haraka or db/migrations' : ''}; ` +
        `PostgreSQL ${pgVersion}`,
    );
    console.log(`database ${new URL(database.url).pathname.slice(1)}, scratch ${scratch}`);

    // The sink.
    sink = await startChild(__filename, ['--child=sink', ...(EARLY_TALKER ? ['--early-talker'] : [])]);
    const sinkPort = sink.ready.port as number;
    const sinkPid = sink.child.pid!;

    // Three gateways, each with a verified domain of its own.
    const masterKey = randomBytes(32).toString('hex');
    const keyring = Keyring.fromString(masterKey);
    const planePort = await freeLoopbackPort();
    const endpoint = `http://127.0.0.1:${planePort}`;
    const gatewayWith = async (domain: string): Promise<Gateway> => {
      const { accountId } = await createAccount(db);
      const { serviceId } = await createService(db, accountId, { family: 'mailgateway', product: 'mailgateway-10k' });
      await new MailGatewayProvisioner(db, endpoint).provision((await provisionTargetOf(db, serviceId))!);
      await addDomain(db, keyring, (await findGateway(db, serviceId))!, domain);
      await db('mail_domains')
        .where({ service_id: serviceId, domain })
        .update({ status: 'verified', dkim_status: 'verified', mail_from_status: 'verified', verified_at: new Date() });
      return { serviceId, domain };
    };
    const gateways: Record<VariantName, Gateway> = {
      plane: await gatewayWith('plane.bench.test'),
      smtp: await gatewayWith('smtp.bench.test'),
      platform: await gatewayWith('platform.bench.test'),
    };
    const { secret } = await createKey(db, (await findGateway(db, gateways.plane.serviceId))!, 'bench');
    const credential = await createSmtpCredential(db, (await findGateway(db, gateways.smtp.serviceId))!);

    // The data plane, as `npm run mail` runs it; it starts Haraka.
    const planeEnv: Record<string, string> = {
      DATABASE_URL: database.url,
      HOST: '127.0.0.1',
      MAIL_PORT: String(planePort),
      MAIL_DATA_DIR: dataDir,
      MAIL_SMARTHOST: `127.0.0.1:${sinkPort}`,
      CLOUD_MASTER_KEY: masterKey,
      LOG_LEVEL: 'warn',
      NODE_ENV: 'development',
    };
    if (CPU_PROF) {
      // Haraka started here with main.ts's options and a profiler; main.ts finds it running and adopts it.
      const options = mtaOptionsOf(loadConfig({ ...process.env, ...planeEnv }));
      await HarakaServer.start({
        ...options,
        env: {
          ...options.env,
          CLOUD_MASTER_KEY: masterKey,
          NODE_ENV: 'development',
          NODE_OPTIONS: `--cpu-prof --cpu-prof-dir=${path.resolve(CPU_PROF, 'haraka')}`,
        },
      });
    }
    const startedAt = now();
    const profile = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF, 'plane')}`] : [];
    plane = spawn(process.execPath, [...profile, '--import', 'tsx', 'dataplane/mail/main.ts'], {
      cwd: root,
      env: { ...process.env, ...planeEnv },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const planePid = plane.pid!;
    for (;;) {
      if (plane.exitCode !== null) throw new Error(`dataplane/mail/main.ts exited (${plane.exitCode})`);
      const ok = await fetch(`${endpoint}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      if (now() - startedAt > 60_000) throw new Error('the data plane did not answer /healthz within 60 s');
      await sleep(100);
    }
    const mta = await HarakaServer.find(dataDir);
    if (!mta) throw new Error(`no Haraka running for ${dataDir}`);
    console.log(
      `data plane: dataplane/mail/main.ts (pid ${planePid}) answering after ${f(now() - startedAt, 0).trim()} ms; ` +
        `Haraka pid ${mta.pid} on ${mta.host}:${mta.port}${CPU_PROF ? ' (started by the bench, with --cpu-prof)' : ' (started by main.ts)'}; sink pid ${sinkPid} on port ${sinkPort}`,
    );

    // Load: an HTTP agent per concurrency (one socket per loop), nodemailer pools as the plane's.
    const transportFor = (auth: { user: string; pass: string }) => {
      const t = nodemailer.createTransport({
        host: mta.host,
        port: mta.port,
        secure: false,
        ignoreTLS: true,
        pool: true,
        maxConnections: MAX_CONNECTIONS,
        auth,
      });
      transports.push(t);
      return t;
    };
    const smtpTransport = transportFor({ user: credential.username, pass: credential.password });
    const platformTransport = transportFor({ user: 'platform', pass: platformPassword(keyring) });
    const agentFor = new Map<number, http.Agent>();
    let unique = 0;
    const message = (domain: string) => {
      const n = unique++;
      return { n, from: `Bench <hello@${domain}>`, to: `reader-${n}@inbox.test`, subject: `Bench message ${n}`, text: TEXT(n) };
    };

    // The platform variant's messages, recorded before its windows (as /emails records them) and used in order.
    const recorded: string[] = [];
    let recordedTotal = 0;
    let recordedInline = 0;
    const record = async (count: number) => {
      const batch = 100;
      const ids = Array.from({ length: count }, () => newMessageId());
      const batches = Array.from({ length: Math.ceil(count / batch) }, (_, i) => ids.slice(i * batch, (i + 1) * batch));
      let next = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (next < batches.length) {
            const mine = batches[next++];
            await db.transaction(async (trx) => {
              for (const id of mine) {
                await recordAccepted(trx, {
                  id,
                  serviceId: gateways.platform.serviceId,
                  domain: gateways.platform.domain,
                  from: `hello@${gateways.platform.domain}`,
                  subject: `Bench message`,
                  recipients: ['reader@inbox.test'],
                  via: 'api',
                });
              }
            });
          }
        }),
      );
      recorded.push(...ids);
      recordedTotal += count;
    };

    const viaSmtp = (transport: Transporter, domain: string, id: string) => {
      const m = message(domain);
      return transport.sendMail({
        envelope: { from: `bounce+${id}@bounce.${domain}`, to: [m.to] },
        messageId: `<${id}@${domain}>`,
        date: new Date(),
        from: m.from,
        to: m.to,
        subject: m.subject,
        text: m.text,
      });
    };
    const senders: Record<VariantName, (concurrency: number) => (n: number) => Promise<Outcome>> = {
      plane: (concurrency) => {
        let agent = agentFor.get(concurrency);
        if (!agent) {
          agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
          agents.push(agent);
          agentFor.set(concurrency, agent);
        }
        const a = agent;
        return async () => {
          const m = message(gateways.plane.domain);
          const res = await postEmail(a, planePort, secret, JSON.stringify({ from: m.from, to: m.to, subject: m.subject, text: m.text }));
          if (res.status !== 202) return { error: `${res.status} ${res.text.slice(0, 200)}` };
          return { key: `${(JSON.parse(res.text) as { id: string }).id}@${gateways.plane.domain}` };
        };
      },
      smtp: () => async () => {
        // The Message-ID is the client's (Haraka's hooks keep one that is set); the record gets an id of its own.
        const id = `bench_${randomBytes(9).toString('hex')}`;
        await viaSmtp(smtpTransport, gateways.smtp.domain, id);
        return { key: `${id}@${gateways.smtp.domain}` };
      },
      platform: () => async () => {
        let id = recorded.shift();
        if (!id) {
          // Ran out: recorded now, in the window (counted, and printed).
          recordedInline++;
          await record(1);
          id = recorded.shift()!;
        }
        await viaSmtp(platformTransport, gateways.platform.domain, id);
        return { key: `${id}@${gateways.platform.domain}` };
      },
    };

    // Bookkeeping for the checks.
    const acceptedTotal: Record<VariantName, number> = { plane: 0, smtp: 0, platform: 0 };
    const usageTally: Record<VariantName, number> = { plane: 0, smtp: 0, platform: 0 };
    const problems: string[] = [];
    let arrivedTotal = 0;
    const usageOf = async (g: Gateway) => {
      const [row] = await db('mail_usage_days')
        .where({ service_id: g.serviceId })
        .sum<{ accepted: string | null; rejected: string | null }[]>({ accepted: 'accepted', rejected: 'rejected' });
      return { accepted: Number(row?.accepted ?? 0), rejected: Number(row?.rejected ?? 0) };
    };
    const deliveredOf = async (g: Gateway) => {
      const [row] = await db('mail_messages').where({ service_id: g.serviceId, status: 'delivered' }).count<{ count: string }[]>({ count: '*' });
      return Number(row.count);
    };
    const lastRate: Record<string, number> = {};

    const run = async (variant: VariantName, concurrency: number): Promise<RunResult> => {
      const g = gateways[variant];
      if (variant === 'platform') {
        const want = Math.ceil(Math.max(300, (lastRate[`${variant}/${concurrency}`] ?? lastRate[variant] ?? 300) * (WARMUP_S + DURATION_S) * 1.5));
        if (recorded.length < want) await record(want - recorded.length);
      }
      const owners = { plane: planePid, haraka: mta.pid, bench: process.pid };
      const groupsOf = async (): Promise<Groups> => ({
        plane: [planePid],
        haraka: [mta.pid],
        sink: [sinkPid],
        bench: [process.pid],
        ...(await pgBackendsBy(db, owners)),
      });
      const w = await closedLoop(concurrency, DURATION_S, WARMUP_S, senders[variant](concurrency), groupsOf);
      acceptedTotal[variant] += w.accepted.length;
      // Drain: every accepted message at the sink, and its delivery recorded.
      const arrivals = new Map<string, number>();
      const expected = new Set(w.accepted.map((a) => a.key));
      const deadline = now() + DRAIN_TIMEOUT_MS;
      let missing = expected.size;
      let duplicates: string[] = [];
      for (;;) {
        const taken = await ask(sink!.child, { type: 'take' }, 'taken');
        for (const [key, at] of taken.arrivals as Array<[string, number]>) {
          if (!expected.has(key)) problems.push(`${variant} c=${concurrency}: the sink got ${key}, not sent in this window`);
          arrivals.set(key, at);
        }
        duplicates = taken.duplicates as string[];
        missing = [...expected].filter((k) => !arrivals.has(k)).length;
        if (missing === 0 || now() > deadline) break;
        await sleep(100);
      }
      arrivedTotal += arrivals.size;
      if (missing > 0) problems.push(`${variant} c=${concurrency}: ${missing} of ${expected.size} accepted messages never reached the sink`);
      if (duplicates.length > 0) problems.push(`the sink got ${duplicates.length} Message-IDs more than once (first ${duplicates[0]})`);
      const sent = acceptedTotal[variant];
      let delivered = 0;
      while ((delivered = await deliveredOf(g)) < sent && now() < deadline + 30_000) await sleep(100);
      if (delivered !== sent) problems.push(`${variant} c=${concurrency}: ${delivered} messages recorded delivered, ${sent} sent`);
      // Usage: as many accepted as counted here (the platform variant's are counted when recorded); then back to 0.
      const usage = await usageOf(g);
      const counted = variant === 'platform' ? recordedTotal - usageTally.platform : w.accepted.length;
      if (usage.accepted !== counted || usage.rejected !== 0) {
        problems.push(`${variant} c=${concurrency}: usage recorded ${usage.accepted} accepted and ${usage.rejected} rejected, counted ${counted} accepted`);
      }
      usageTally[variant] += usage.accepted;
      await db('mail_usage_days').where({ service_id: g.serviceId }).update({ accepted: 0, rejected: 0 });

      const measured = w.accepted.filter((a) => a.measured);
      const toSink = measured.filter((a) => arrivals.has(a.key)).map((a) => arrivals.get(a.key)! - a.startedAt);
      const sinkCount = [...arrivals.values()].filter((at) => at >= w.opened && at < w.closed).length;
      const rate = measured.length / w.elapsed;
      lastRate[`${variant}/${concurrency}`] = rate;
      lastRate[variant] = Math.max(lastRate[variant] ?? 0, rate);
      const cpuMs: Record<string, number> = {};
      const cores: Record<string, number> = {};
      for (const [k, s] of Object.entries(w.cpu)) {
        cpuMs[k] = (s * 1000) / Math.max(1, measured.length);
        cores[k] = Math.round((s / w.elapsed) * 100) / 100;
      }
      return {
        rate,
        sinkRate: sinkCount / w.elapsed,
        accept: summarize(measured.map((a) => a.acceptMs)),
        toSink: summarize(toSink),
        errors: w.errors,
        firstError: w.firstError,
        cpuMs,
        cores,
      };
    };

    console.log(
      `\nClosed loops of distinct messages (one recipient, 1 KiB text): ${VARIANTS.join(', ')}; ${DURATION_S} s after ${WARMUP_S} s, ` +
        `${ROUNDS} rounds, load ${load()}`,
    );
    const verdicts: { label: string; ok: boolean; detail: string }[] = [];
    const tables: string[] = [];
    const CPU_GROUPS = ['plane', 'haraka', 'pg plane', 'pg haraka', 'sink', 'bench', 'pg bench', 'pg other', 'others'];
    for (const concurrency of CONCURRENCY) {
      const rounds: Record<string, RunResult[]> = Object.fromEntries(VARIANTS.map((v) => [v, []]));
      for (let round = 0; round < ROUNDS; round++) {
        const order = VARIANTS.map((_, j) => VARIANTS[(round + j) % VARIANTS.length]);
        const line: string[] = [];
        for (const v of order) {
          const r = await run(v, concurrency);
          rounds[v].push(r);
          line.push(`${v} ${f(r.rate, 0).trim()}/s${r.errors ? ` (errors ${r.errors}: ${r.firstError})` : ''}`);
        }
        console.log(`  ${String(concurrency).padStart(2)} in flight, round ${round + 1}: ${line.join(', ')}  [load ${load()}]`);
      }
      const medianRun = (name: string) => {
        const rates = rounds[name].map((r) => r.rate);
        return rounds[name][rates.indexOf(median(rates))];
      };
      for (const v of VARIANTS) {
        const m = medianRun(v);
        console.log(
          `  ${String(concurrency).padStart(2)} in flight ${v.padEnd(8)} median: ${f(m.rate)} accepted/s (sink ${f(m.sinkRate, 0).trim()}/s)  ` +
            `accept p50 ${f(m.accept.p50, 5)} p99 ${f(m.accept.p99, 5)} ms  to sink p50 ${f(m.toSink.p50, 5)} p99 ${f(m.toSink.p99, 5)} ms`,
        );
        console.log(
          `      CPU ms/message: ${CPU_GROUPS.filter((k) => k in m.cpuMs)
            .map((k) => `${k} ${f(m.cpuMs[k], 0).trim()}`)
            .join(', ')}; cores ${JSON.stringify(m.cores)}`,
        );
        tables.push(
          `| ${concurrency} | ${v} | ${f(m.rate, 0).trim()} | ${f(m.accept.p50, 0).trim()} / ${f(m.accept.p99, 0).trim()} | ` +
            `${f(m.toSink.p50, 0).trim()} / ${f(m.toSink.p99, 0).trim()} | ${f(m.cpuMs.plane ?? NaN, 0).trim()} | ${f(m.cpuMs.haraka, 0).trim()} | ` +
            `${f((m.cpuMs['pg plane'] ?? 0) + (m.cpuMs['pg haraka'] ?? 0) + (m.cpuMs['pg bench'] ?? 0) + (m.cpuMs['pg other'] ?? 0), 0).trim()} | ` +
            `${f(m.cpuMs.sink, 0).trim()} | ${f(m.cpuMs.bench, 0).trim()} | ${f(m.cores.others, 0).trim()} |`,
        );
      }
      if (VARIANTS.includes('plane')) {
        for (const against of VARIANTS.filter((v) => v !== 'plane')) {
          const ratio = medianRun('plane').rate / medianRun(against).rate;
          const perRound = rounds.plane.map((r, i) => (r.rate / rounds[against][i].rate).toFixed(2)).join(', ');
          const detail = `${pct(ratio)} (median rounds; round by round ${perRound})`;
          if (against === BASELINE)
            verdicts.push({
              label: `/emails accepted/s >= ${TARGET * 100} % of straight SMTP into Haraka (SMTP credential), ${concurrency} in flight`,
              ok: ratio >= TARGET,
              detail,
            });
          else console.log(`  (not the target) ${concurrency} in flight, plane against ${against}: ${detail}`);
        }
      }
    }

    // Checks over the whole run.
    await sleep(500);
    const last = await ask(sink.child, { type: 'take' }, 'taken');
    if ((last.arrivals as unknown[]).length > 0) problems.push(`the sink got ${(last.arrivals as unknown[]).length} messages after the windows`);
    if ((last.duplicates as unknown[]).length > 0) problems.push(`the sink got ${(last.duplicates as unknown[]).length} Message-IDs more than once`);
    if ((last.withoutId as number) > 0) problems.push(`the sink got ${last.withoutId as number} messages without a Message-ID`);
    const sentTotal = acceptedTotal.plane + acceptedTotal.smtp + acceptedTotal.platform;
    console.log(
      `\nchecks: accepted ${acceptedTotal.plane} by /emails (202), ${acceptedTotal.smtp} over SMTP, ${acceptedTotal.platform} as platform ` +
        `(${recordedTotal} recorded beforehand, ${recordedInline} of them in a window); the sink got ${last.total as number} distinct Message-IDs ` +
        `(${arrivedTotal} matched to a send) over ${last.connections as number} connections, ${(last.duplicates as unknown[]).length} duplicates; ` +
        `usage recorded: ${usageTally.plane} accepted for /emails, ${usageTally.smtp} over SMTP, ${usageTally.platform} recorded for platform`,
    );
    if (usageTally.plane !== acceptedTotal.plane) problems.push(`usage ${usageTally.plane} accepted for /emails, ${acceptedTotal.plane} answered 202`);
    if (usageTally.smtp !== acceptedTotal.smtp) problems.push(`usage ${usageTally.smtp} accepted over SMTP, ${acceptedTotal.smtp} accepted`);
    if (usageTally.platform !== recordedTotal) problems.push(`usage ${usageTally.platform} for platform, ${recordedTotal} recorded`);
    if ((last.total as number) !== sentTotal) problems.push(`the sink got ${last.total as number} distinct messages, ${sentTotal} were accepted`);
    console.log(
      problems.length ? problems.map((p) => `  PROBLEM: ${p}`).join('\n') : '  every accepted message reached the sink exactly once; usage = accepted',
    );
    let logBytes = 0;
    try {
      logBytes = statSync(mta.logFile).size;
    } catch {
      // none
    }
    console.log(`Haraka's log: ${(logBytes / 1024 / 1024).toFixed(1)} MiB, ${(logBytes / Math.max(1, sentTotal)) | 0} bytes per message`);
    console.log(
      `\n| In flight | Variant | accepted/s | accept p50 / p99 ms | to sink p50 / p99 ms | plane CPU ms/msg | Haraka | PostgreSQL | sink | bench | others (cores) |`,
    );
    console.log(`|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|`);
    for (const t of tables) console.log(t);
    console.log(`\n${watch.stop()}; load ${load()}\n`);
    for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
    if (problems.length) console.log(`  target every accepted message delivered exactly once, usage = accepted: ${problems.length} problems -> FAIL`);
    else console.log('  target every accepted message delivered exactly once, usage = accepted: yes -> PASS');
  } finally {
    await cleanUp();
  }
}

/** What the run started, undone once: on its end, or on SIGINT/SIGTERM. */
let cleanUp: () => Promise<void> = async () => undefined;

if (CHILD) {
  if (CHILD !== 'sink') throw new Error(`--child=${CHILD}: sink`);
  sinkChild().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  runMain(main, () => cleanUp());
}
