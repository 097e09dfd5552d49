/**
 * Image delivery (issue #29): the delivery plane's cache hits against a bare static server, and its
 * transformations (cache misses) against sharp called directly.
 *
 *   npx tsx bench/images.bench.ts [--duration=5] [--warmup=1] [--rounds=3] [--widths=200,400,800] [--hits=1,16,64] [--misses=1,2,4]
 *   npx tsx bench/images.bench.ts --widths=400 --misses= --cpu-prof=/tmp/prof   # a V8 profile of the delivery plane (bench/cpu-profile.ts)
 *
 * Set-up, without vitest: a fresh database (createTestDatabase), one account with an image service
 * (a `services` row with family `other`, product `images-basic`, product_family `images`) built by
 * `ImagesProvisioner`, the origin pattern `img.localhost` (`addOrigin`) and a delivery token
 * (`createToken`). The source is a 2000 x 1333 JPEG made here (smooth random colour fields plus fine
 * noise, the same bytes every run, about 0.5 MB), served by a node:http origin in this process;
 * delivery URLs name it as `http://img.localhost:<port>/photo.jpg`, which the delivery plane resolves
 * to 127.0.0.1 without DNS (ALLOW_INSECURE_TARGETS=1). The delivery plane runs as `npm run images`
 * runs it: `dataplane/images/main.ts`, its own process (node --import tsx), on a temporary cache
 * directory. Load comes from this process: keep-alive connections of its own for the cache hits (see
 * httpLoad: autocannon was the bottleneck with binary bodies), fetch loops for the misses. An empty
 * list (`--widths=`, `--misses=`) skips that part.
 *
 * 1. Cache hits: `GET /v1/img?url=...&w=<width>&format=webp&q=80` with `Authorization: Bearer imgt_...`
 *    of an image already cached (checked: `X-Cache: HIT`), for each of `--widths`, at each
 *    connection count of `--hits` (keep-alive, no pipelining, `--warmup` s then
 *    `--duration` s), against a static server in a process of its own (node:http) answering the
 *    same bytes: from a Buffer in memory, and read from a file on every request (fs.readFile). For
 *    400 px, also the signed URL (`POST /v1/sign`) of the same image, without a token. `--rounds`
 *    rounds whose order rotates; the median round counts. Target: the delivery plane >= 50 % of
 *    the static server's requests/s (one verdict against each static server).
 * 2. Transformations: the 2000 px JPEG to a 400 px WebP (q 80), every request a miss: each source
 *    URL carries a query of its own (`photo.jpg?n=<unique>`), so the transformation is the same
 *    every time and nothing is ever cached for it. Against sharp in a process of its own doing
 *    `sharp(buf).rotate().resize({ width: 400 }).webp({ quality: 80 }).toBuffer()` at the same
 *    number in flight (`--misses`), with sharp's default thread count (libvips threads per image:
 *    1 on glibc Linux without jemalloc, as here) and with one per core; beside them
 *    dataplane/images/transform.ts's `transform()` alone (no HTTP, fetch or cache), and the delivery
 *    plane again in a child process that sets `sharp.concurrency(<cores>)` after transform.ts has set 1.
 *    Target: the delivery plane (main.ts) >= 80 % of direct sharp at its default.
 *
 * CPU per request comes from /proc (the server process; PostgreSQL's backends of the bench's
 * database). After the runs, the usage the delivery plane recorded is compared with the answers
 * counted here, and whether a test suite ran beside the bench is printed (looked for every 5 s).
 * The database, the temporary directories and every process started are removed at the end, and on
 * SIGINT/SIGTERM. Needs PostgreSQL (scripts/ensure-tools.sh). Results: docs/benchmarks.md ("Image delivery").
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { loadConfig } from '../common/config';
import { Keyring } from '../common/crypto';
import { createDb } from '../db/knex';
import { addOrigin, createToken } from '../domain/images/manage';
import { ImagesProvisioner } from '../domain/images/provisioner';
import { findTenant, usageDays } from '../domain/images/store';
import { provisionTargetOf } from '../domain/provisioning';
import { loadKeyring } from '../infra/master-key';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createService } from '../test/helpers/fixtures';
import { freeLoopbackPort } from '../providers/local-server';
import { ask, exitWithParent, runMain, startChild, type Child, type ChildMessage } from './children';
import { cpuDelta, cpuSnapshot, pgBackendPids, procCpuSeconds } from './cpu';
import { median, summarize, type Summary } from './stats';
import { IMAGES_NODE_FLAGS } from '../dataplane/images/node-flags';
import { vitestRunning, watchForSuites } from './suite-watch';
import { load, now, sleep, verdict } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const list = (s: string) => s.split(',').filter(Boolean).map(Number);
const DURATION_S = Number(arg('duration', '5'));
const WARMUP_S = Number(arg('warmup', '1'));
const ROUNDS = Number(arg('rounds', '3'));
const WIDTHS = list(arg('widths', '200,400,800'));
const HIT_CONNECTIONS = list(arg('hits', '1,16,64'));
const MISS_CONCURRENCY = list(arg('misses', '1,2,4'));
const CHILD = arg('child', '');
/** More Node flags for the delivery plane (e.g. `--plane-node-flags="--trace-gc"`), after IMAGES_NODE_FLAGS. */
const PLANE_NODE_FLAGS = arg('plane-node-flags', '').split(' ').filter(Boolean);
/** A directory for a V8 CPU profile of the delivery plane (main.ts started with --cpu-prof; written when it stops). */
const CPU_PROF = arg('cpu-prof', '');
const HIT_TARGET = 0.5;
const MISS_TARGET = 0.8;
const SOURCE_WIDTH = 2000;
const SOURCE_HEIGHT = 1333;
const MISS_WIDTH = 400;
const QUALITY = 80;
const CORES = os.availableParallelism();
const root = path.resolve(__dirname, '..');

const f = (n: number, width = 8) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0) : '-').padStart(width);
const pct = (ratio: number) => `${(ratio * 100).toFixed(1)} %`;

/** Whether a test suite (vitest) runs on this machine now: from /proc, without a process of our own. */
interface LoopResult {
  rate: number;
  summary: Summary;
  errors: number;
  firstError: string;
  /** CPU seconds of the probed process(es) within the measured window. */
  cpuSeconds: number;
  elapsed: number;
}

/** Runs `fn` back to back from `concurrency` loops for `seconds` after `warmup` seconds: completions within the window, their latencies, and `cpu()`'s growth over it. */
async function closedLoop(concurrency: number, seconds: number, warmup: number, fn: () => Promise<unknown>, cpu: () => number = () => 0): Promise<LoopResult> {
  const samples: number[] = [];
  let errors = 0;
  let firstError = '';
  let measuring = false;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const start = now();
      try {
        await fn();
        if (measuring) samples.push(now() - start);
      } catch (err) {
        if (measuring) {
          errors++;
          firstError ||= (err as Error).message;
        }
      }
    }
  };
  const loops = Array.from({ length: concurrency }, loop);
  await sleep(warmup * 1000);
  measuring = true;
  const cpuBefore = cpu();
  const started = now();
  await sleep(seconds * 1000);
  measuring = false;
  const elapsed = (now() - started) / 1000;
  const cpuSeconds = cpu() - cpuBefore;
  stop = true;
  await Promise.all(loops);
  return { rate: samples.length / elapsed, summary: summarize(samples), errors, firstError, cpuSeconds, elapsed };
}

/** The source: 2000 x 1333, smooth random colour fields with fine noise (photograph-like sizes), JPEG q 85; the same bytes every run. */
async function sourceJpeg(): Promise<Buffer> {
  let seed = 29;
  const random = () => {
    // mulberry32
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const coarse = Buffer.alloc(40 * 27 * 3);
  for (let i = 0; i < coarse.length; i++) coarse[i] = Math.floor(random() * 256);
  const smooth = await sharp(coarse, { raw: { width: 40, height: 27, channels: 3 } })
    .resize(SOURCE_WIDTH, SOURCE_HEIGHT, { kernel: 'cubic' })
    .raw()
    .toBuffer();
  for (let i = 0; i < smooth.length; i++) smooth[i] = Math.max(0, Math.min(255, smooth[i] + Math.floor(random() * 25) - 12));
  return sharp(smooth, { raw: { width: SOURCE_WIDTH, height: SOURCE_HEIGHT, channels: 3 } })
    .jpeg({ quality: 85 })
    .toBuffer();
}

interface LoadResult {
  ok: number;
  non2xx: number;
  errors: number;
  samples: number[];
  seconds: number;
}

/**
 * The cache hits' load: `connections` keep-alive HTTP/1.1 connections, each sending the same GET as
 * soon as the previous answer's last byte arrives (no pipelining), for `seconds`. Only the status
 * line and Content-Length are read; body bytes are counted and dropped. (autocannon 8 appends every
 * body chunk to a string, `req.body += data` in lib/pipelinedRequestsQueue.js: about 0.4 ms of its
 * CPU per 36 KB binary answer here, so that it, not the server, was measured.) `window` is called when
 * the measured window opens and closes; answers still in flight when it closes are not counted.
 */
async function httpLoad(target: string, headers: Record<string, string>, connections: number, seconds: number, window?: () => void): Promise<LoadResult> {
  const url = new URL(target);
  const request = Buffer.from(
    `GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n${Object.entries(headers)
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('')}\r\n`,
  );
  const result: LoadResult = { ok: 0, non2xx: 0, errors: 0, samples: [], seconds: 0 };
  let measuring = true;
  const connection = () =>
    new Promise<void>((resolve) => {
      const socket = net.connect(Number(url.port), url.hostname);
      socket.setNoDelay(true);
      let pending: Buffer | null = null;
      let remaining = -1;
      let status = 0;
      let sentAt = 0;
      const send = () => {
        if (!measuring) return void socket.end();
        sentAt = now();
        socket.write(request);
      };
      const fail = () => {
        if (measuring) result.errors++;
        socket.destroy();
      };
      socket.on('connect', send);
      socket.on('data', (chunk: Buffer) => {
        let buf = pending ? Buffer.concat([pending, chunk]) : chunk;
        pending = null;
        if (remaining < 0) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) {
            pending = buf;
            return;
          }
          const head = buf.toString('latin1', 0, end);
          const length = /\r\ncontent-length:\s*(\d+)/i.exec(head);
          if (!length) return fail();
          status = Number(head.slice(9, 12));
          remaining = Number(length[1]);
          buf = buf.subarray(end + 4);
        }
        remaining -= buf.length;
        if (remaining > 0) return;
        // Nothing may follow the body: one request at a time.
        if (remaining < 0) return fail();
        remaining = -1;
        if (measuring) {
          if (status >= 200 && status < 300) result.ok++;
          else result.non2xx++;
          result.samples.push(now() - sentAt);
        }
        send();
      });
      socket.on('error', fail);
      socket.on('close', () => resolve());
    });
  window?.();
  const started = now();
  const running = Array.from({ length: connections }, connection);
  await sleep(seconds * 1000);
  measuring = false;
  result.seconds = (now() - started) / 1000;
  window?.();
  await Promise.all(running);
  return result;
}

// --- child processes: this file again, with --child=... -------------------------------------------

/** Child processes exit with the bench (a killed bench leaves nothing behind). */
/** `--child=static`: a bare node:http server answering the same bytes, from memory (`/mem/<w>`) or read from disk per request (`/disk/<w>`). */
async function staticChild(): Promise<void> {
  const files = JSON.parse(process.env.BENCH_STATIC_FILES ?? '{}') as Record<string, string>;
  const memory = new Map(Object.entries(files).map(([w, file]) => [w, readFileSync(file)]));
  const server = http.createServer((req, res) => {
    const m = /^\/(mem|disk)\/(\d+)$/.exec(req.url ?? '');
    const file = m ? files[m[2]] : undefined;
    if (!m || !file) {
      res.statusCode = 404;
      res.end();
      return;
    }
    const send = (body: Buffer) => {
      res.writeHead(200, { 'Content-Type': 'image/webp', 'Content-Length': body.length });
      res.end(body);
    };
    if (m[1] === 'mem') send(memory.get(m[2])!);
    else
      readFile(file).then(send, () => {
        res.statusCode = 500;
        res.end();
      });
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  exitWithParent();
  process.send!({ type: 'ready', port: (server.address() as AddressInfo).port });
}

/**
 * `--child=sharp --variant=direct|transform --threads=default|<n>`: transformations in this process.
 * `direct` is the plain sharp call; `transform` is dataplane/images/transform.ts (metadata first, the
 * pixel limit, `failOn`), whose import sets `sharp.concurrency(1)`. `--threads` is set after the imports.
 */
async function sharpChild(): Promise<void> {
  const variant = arg('variant', 'direct');
  const threads = arg('threads', 'default');
  let run: (input: Buffer) => Promise<unknown>;
  if (variant === 'transform') {
    const { transform } = await import('../dataplane/images/transform');
    run = (input) => transform(input, { url: 'http://img.localhost/photo.jpg', w: MISS_WIDTH, h: null, fit: 'inside', format: 'webp', q: QUALITY });
  } else {
    run = (input) => sharp(input).rotate().resize({ width: MISS_WIDTH }).webp({ quality: QUALITY }).toBuffer();
  }
  if (threads !== 'default') sharp.concurrency(Number(threads));
  const source = readFileSync(process.env.BENCH_SOURCE!);
  exitWithParent();
  process.on('message', (m: ChildMessage) => {
    if (m.type !== 'run') return;
    const cpu = () => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    };
    void closedLoop(Number(m.concurrency), Number(m.seconds), Number(m.warmup), () => run(source), cpu).then((r) => process.send!({ type: 'ran', ...r }));
  });
  process.send!({ type: 'ready', threads: sharp.concurrency() });
}

/** `--child=plane --threads=<n>`: the delivery plane wired as main.ts wires it, with `sharp.concurrency(n)` set after transform.ts set 1. */
async function planeChild(): Promise<void> {
  const { ImageDeliveryServer } = await import('../dataplane/images/server');
  sharp.concurrency(Number(arg('threads', String(CORES))));
  const config = loadConfig();
  const db = createDb(config.DATABASE_URL);
  const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
  const server = ImageDeliveryServer.fromConfig(config, db, keyring);
  const url = await server.listen(0, '127.0.0.1');
  exitWithParent(async () => {
    await server.close();
    await db.destroy();
  });
  process.send!({ type: 'ready', port: Number(new URL(url).port), threads: sharp.concurrency() });
}

/** This file as a child process (`--child=<kind>`), once it says it is ready. */
// --- the bench --------------------------------------------------------------------------------------

interface HitRun {
  rate: number;
  p50: number;
  p99: number;
  non2xx: number;
  errors: number;
  /** Server CPU per answered request (ms), PostgreSQL's per request (ms), and cores used by each group. */
  serverCpuMs: number;
  pgCpuMs: number;
  cores: Record<string, number>;
}

async function main(): Promise<void> {
  const runStartedOn = new Date().toISOString().slice(0, 10);
  const watch = watchForSuites();
  console.log(
    `images bench: ${CORES} x ${os.cpus()[0]?.model}, Node ${process.version}, sharp ${sharp.versions.sharp} (libvips ${sharp.versions.vips}), ` +
      `load ${load()}, vitest running now: ${await vitestRunning()}; ${DURATION_S} s windows after ${WARMUP_S} s, ${ROUNDS} rounds`,
  );
  const database = await createTestDatabase();
  const db = database.db;
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'images-bench-'));
  const children: Child[] = [];
  let plane: ChildProcess | null = null;
  let origin: http.Server | null = null;
  let cleaned: Promise<void> | null = null;
  cleanUp = () =>
    (cleaned ??= (async () => {
      for (const c of children) await c.stop().catch(() => undefined);
      const p = plane;
      if (p && p.exitCode === null && p.signalCode === null) {
        const exited = new Promise((resolve) => p.once('exit', resolve));
        p.kill('SIGTERM');
        await exited;
      }
      const o = origin;
      if (o) {
        o.closeAllConnections();
        await new Promise((resolve) => o.close(resolve));
      }
      await rm(scratch, { recursive: true, force: true });
      await database.drop();
    })());
  try {
    // The tenant: an image service built as an order would build it, one origin pattern, one token.
    const masterKey = randomBytes(32).toString('hex');
    const keyring = Keyring.fromString(masterKey);
    const planePort = await freeLoopbackPort();
    const endpoint = `http://127.0.0.1:${planePort}`;
    const { accountId } = await createAccount(db);
    const { serviceId } = await createService(db, accountId, { family: 'other', product: 'images-basic' });
    await db('services').where({ id: serviceId }).update({ product_family: 'images' });
    await new ImagesProvisioner(db, keyring, endpoint).provision((await provisionTargetOf(db, serviceId))!);
    const tenant = (await findTenant(db, serviceId))!;
    await addOrigin(db, tenant, 'img.localhost');
    const { token } = await createToken(db, tenant);
    const auth = { authorization: `Bearer ${token}` };

    // The origin, in this process.
    const source = await sourceJpeg();
    const sourceFile = path.join(scratch, 'photo.jpg');
    writeFileSync(sourceFile, source);
    let originRequests = 0;
    origin = http.createServer((_req, res) => {
      originRequests++;
      res.writeHead(200, { 'Content-Type': 'image/jpeg', 'Content-Length': source.length });
      res.end(source);
    });
    await new Promise<void>((resolve) => origin!.listen(0, '127.0.0.1', resolve));
    const originPort = (origin.address() as AddressInfo).port;
    const sourceUrl = (unique?: string) => `http://img.localhost:${originPort}/photo.jpg${unique ? `?n=${unique}` : ''}`;
    const imgUrl = (base: string, w: number, src = sourceUrl()) => `${base}/v1/img?url=${encodeURIComponent(src)}&w=${w}&format=webp&q=${QUALITY}`;
    // The code measured: the commit, and whether the delivery plane's files differ from it.
    const git = (...args: string[]) => execFileSync('git', args, { cwd: root, encoding: 'utf8' }).trim();
    const dirty = git('status', '--porcelain', '--', 'dataplane/images', 'domain/images', 'db/migrations') !== '';
    console.log(
      `commit ${git('rev-parse', '--short', 'HEAD')}${dirty ? ' with uncommitted changes under dataplane/images, domain/images or db/migrations' : ''}`,
    );
    console.log(`database ${new URL(database.url).pathname.slice(1)}, scratch ${scratch}`);
    console.log(`source: ${SOURCE_WIDTH} x ${SOURCE_HEIGHT} JPEG, ${source.length} bytes, served by a node:http origin in this process`);

    // The delivery plane, as `npm run images` runs it.
    const planeEnv = {
      DATABASE_URL: database.url,
      HOST: '127.0.0.1',
      IMAGES_CACHE_DIR: path.join(scratch, 'cache'),
      ALLOW_INSECURE_TARGETS: '1',
      CLOUD_MASTER_KEY: masterKey,
      LOG_LEVEL: 'warn',
      NODE_ENV: 'development',
    };
    const startedAt = now();
    const profile = CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(CPU_PROF)}`] : [];
    plane = spawn(process.execPath, [...profile, ...IMAGES_NODE_FLAGS, ...PLANE_NODE_FLAGS, '--import', 'tsx', 'dataplane/images/main.ts'], {
      cwd: root,
      env: { ...process.env, ...planeEnv, IMAGES_PORT: String(planePort) },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const planePid = plane.pid!;
    for (;;) {
      if (plane.exitCode !== null) throw new Error(`dataplane/images/main.ts exited (${plane.exitCode})`);
      const ok = await fetch(`${endpoint}/healthz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) break;
      if (now() - startedAt > 30_000) throw new Error('the delivery plane did not answer /healthz within 30 s');
      await sleep(100);
    }
    console.log(`delivery plane: dataplane/images/main.ts (pid ${planePid}) answering after ${f(now() - startedAt, 0).trim()} ms`);

    // What the delivery plane answered, to compare with the usage it records.
    let answered = 0;
    let transformed = 0;
    // A load window closes without counting the answers still in flight: the plane counts up to this many more.
    let uncounted = 0;
    const get = async (url: string, headers: Record<string, string> = auth) => {
      const res = await fetch(url, { headers });
      const body = Buffer.from(await res.arrayBuffer());
      if (res.status !== 200) throw new Error(`GET ${url}: ${res.status} ${body.toString('utf8').slice(0, 300)}`);
      answered++;
      if (res.headers.get('x-cache') === 'MISS') transformed++;
      return { body, cache: res.headers.get('x-cache'), type: res.headers.get('content-type') };
    };

    // 1. Cache hits.
    const staticDir = path.join(scratch, 'static');
    mkdirSync(staticDir);
    const files: Record<string, string> = {};
    for (const w of WIDTHS) {
      const first = await get(imgUrl(endpoint, w));
      const again = await get(imgUrl(endpoint, w));
      if (again.cache !== 'HIT' || !again.body.equals(first.body)) throw new Error(`w=${w}: the second GET was ${again.cache}`);
      files[w] = path.join(staticDir, `${w}.webp`);
      writeFileSync(files[w], again.body);
      const meta = await sharp(again.body).metadata();
      console.log(`  cached: w=${w} -> ${meta.width} x ${meta.height} ${again.type}, ${again.body.length} bytes (first GET ${first.cache})`);
    }
    // The signed URL of the 400 px image (POST /v1/sign), a cache hit too.
    let signedUrl = '';
    if (WIDTHS.includes(MISS_WIDTH)) {
      const signRes = await fetch(`${endpoint}/v1/sign`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ url: sourceUrl(), w: MISS_WIDTH, format: 'webp', q: QUALITY, expires_in: 3600 }),
      });
      const signed = (await signRes.json()) as { url: string };
      if (signRes.status !== 200) throw new Error(`POST /v1/sign: ${signRes.status} ${JSON.stringify(signed)}`);
      if ((await get(signed.url, {})).cache !== 'HIT') throw new Error('the signed URL is not a cache hit');
      signedUrl = signed.url;
    }
    const statics = await startChild(__filename, ['--child=static'], { env: { BENCH_STATIC_FILES: JSON.stringify(files) } });
    children.push(statics);
    const staticBase = `http://127.0.0.1:${statics.ready.port as number}`;
    const staticPid = statics.child.pid!;

    const hitRun = async (url: string, headers: Record<string, string>, connections: number, serverPid: number, countAnswers: boolean): Promise<HitRun> => {
      if (WARMUP_S > 0) {
        const warm = await httpLoad(url, headers, connections, WARMUP_S);
        if (countAnswers) {
          answered += warm.ok;
          uncounted += connections;
        }
      }
      const pgPids = await pgBackendPids(db);
      const groups = { server: () => [serverPid], postgres: () => pgPids, bench: () => [process.pid] };
      const snapshots: Array<Record<string, number>> = [];
      const r = await httpLoad(url, headers, connections, DURATION_S, () => snapshots.push(cpuSnapshot(groups)));
      const [before, after] = snapshots;
      if (countAnswers) {
        answered += r.ok;
        uncounted += connections;
      }
      const latency = summarize(r.samples);
      return {
        rate: r.ok / r.seconds,
        p50: latency.p50,
        p99: latency.p99,
        non2xx: r.non2xx,
        errors: r.errors,
        serverCpuMs: ((after.server - before.server) * 1000) / Math.max(1, r.ok),
        pgCpuMs: ((after.postgres - before.postgres) * 1000) / Math.max(1, r.ok),
        cores: cpuDelta(before, after, r.seconds),
      };
    };

    console.log(
      `\n1. Cache hits: GET /v1/img (token; 400 px also signed) against the static server (memory, disk), keep-alive connections from this process, ` +
        `${DURATION_S} s after ${WARMUP_S} s, ${ROUNDS} rounds, load ${load()}`,
    );
    const verdicts: { label: string; ok: boolean; detail: string }[] = [];
    for (const w of WIDTHS) {
      const targets: Array<{ name: string; url: string; headers: Record<string, string>; pid: number; plane: boolean }> = [
        { name: 'plane', url: imgUrl(endpoint, w), headers: auth, pid: planePid, plane: true },
        ...(w === MISS_WIDTH ? [{ name: 'signed', url: signedUrl, headers: {}, pid: planePid, plane: true }] : []),
        { name: 'memory', url: `${staticBase}/mem/${w}`, headers: auth, pid: staticPid, plane: false },
        { name: 'disk', url: `${staticBase}/disk/${w}`, headers: auth, pid: staticPid, plane: false },
      ];
      for (const connections of HIT_CONNECTIONS) {
        const rounds: Record<string, HitRun[]> = Object.fromEntries(targets.map((t) => [t.name, []]));
        for (let round = 0; round < ROUNDS; round++) {
          const order = targets.map((_, j) => targets[(round + j) % targets.length]);
          const line: string[] = [];
          for (const t of order) {
            const r = await hitRun(t.url, t.headers, connections, t.pid, t.plane);
            rounds[t.name].push(r);
            line.push(`${t.name} ${f(r.rate, 0).trim()}/s${r.non2xx || r.errors ? ` (NOT 2xx ${r.non2xx}, errors ${r.errors})` : ''}`);
          }
          console.log(`  w=${w} ${String(connections).padStart(2)} conn, round ${round + 1}: ${line.join(', ')}  [load ${load()}]`);
        }
        const medianRun = (name: string) => {
          const rates = rounds[name].map((r) => r.rate);
          return rounds[name][rates.indexOf(median(rates))];
        };
        for (const t of targets) {
          const m = medianRun(t.name);
          const row =
            `  w=${w} ${String(connections).padStart(2)} conn ${t.name.padEnd(6)} median: ${f(m.rate)} req/s  p50 ${f(m.p50, 4)} p99 ${f(m.p99, 4)} ms  ` +
            `server CPU ${f(m.serverCpuMs, 5)} ms/req${t.plane ? `, PostgreSQL ${f(m.pgCpuMs, 5)} ms/req` : ''}  cores ${JSON.stringify(m.cores)}`;
          console.log(row);
        }
        for (const name of targets.filter((t) => t.plane).map((t) => t.name)) {
          for (const against of ['memory', 'disk']) {
            const ratio = medianRun(name).rate / medianRun(against).rate;
            const perRound = rounds[name].map((r, i) => (r.rate / rounds[against][i].rate).toFixed(2)).join(', ');
            verdicts.push({
              label: `cache hit ${name === 'plane' ? 'with a token' : 'signed URL'} >= ${HIT_TARGET * 100} % of the static server (${against}), w=${w}, ${connections} conn`,
              ok: ratio >= HIT_TARGET,
              detail: `${pct(ratio)} (median rounds; round by round ${perRound})`,
            });
          }
        }
      }
    }

    // 2. Transformations (every request a miss).
    if (MISS_CONCURRENCY.length > 0) {
      // The plane's own child runs with the plane's flags; sharp's children as a plain process would.
      const planeThreads = await startChild(__filename, [`--child=plane`, `--threads=${CORES}`], {
        env: { ...planeEnv, IMAGES_CACHE_DIR: path.join(scratch, 'cache-threads') },
        execArgv: [...IMAGES_NODE_FLAGS, ...PLANE_NODE_FLAGS],
      });
      children.push(planeThreads);
      const planeThreadsBase = `http://127.0.0.1:${planeThreads.ready.port as number}`;
      const sharps: Record<string, Child> = {};
      for (const [name, args] of [
        ['sharp', ['--variant=direct', '--threads=default']],
        ['sharp-cores', ['--variant=direct', `--threads=${CORES}`]],
        ['transform', ['--variant=transform', '--threads=default']],
      ] as const) {
        sharps[name] = await startChild(__filename, ['--child=sharp', ...args], { env: { BENCH_SOURCE: sourceFile } });
        children.push(sharps[name]);
      }
      const threadsOf: Record<string, number> = {
        plane: 1,
        'plane-cores': planeThreads.ready.threads as number,
        sharp: sharps.sharp.ready.threads as number,
        'sharp-cores': sharps['sharp-cores'].ready.threads as number,
        transform: sharps.transform.ready.threads as number,
      };
      console.log(
        `\n2. Transformations: ${SOURCE_WIDTH} px JPEG -> ${MISS_WIDTH} px WebP q ${QUALITY}, every request a miss (a source URL of its own), ` +
          `${DURATION_S} s after ${WARMUP_S} s, ${ROUNDS} rounds, load ${load()}\n` +
          `  libvips threads per image: ${Object.entries(threadsOf)
            .map(([k, v]) => `${k} ${v}`)
            .join(', ')} (sharp's default in a fresh process here: ${threadsOf.sharp})`,
      );
      let unique = 0;
      const planeMiss = (base: string) => async () => {
        const res = await fetch(imgUrl(base, MISS_WIDTH, sourceUrl(`${Date.now()}-${unique++}`)), { headers: auth });
        await res.arrayBuffer();
        if (res.status !== 200 || res.headers.get('x-cache') !== 'MISS') throw new Error(`${res.status} ${res.headers.get('x-cache')}`);
        answered++;
        transformed++;
      };
      const variants: Array<{ name: string; label: string; run: (c: number) => Promise<LoopResult> }> = [
        {
          name: 'plane',
          label: 'delivery plane (main.ts)',
          run: (c) => closedLoop(c, DURATION_S, WARMUP_S, planeMiss(endpoint), () => procCpuSeconds(planePid)),
        },
        {
          name: 'plane-cores',
          label: `delivery plane, sharp.concurrency(${threadsOf['plane-cores']})`,
          run: (c) => closedLoop(c, DURATION_S, WARMUP_S, planeMiss(planeThreadsBase), () => procCpuSeconds(planeThreads.child.pid!)),
        },
        ...(['sharp', 'sharp-cores', 'transform'] as const).map((name) => ({
          name,
          label: name === 'transform' ? 'transform() alone (transform.ts)' : `sharp direct, ${threadsOf[name]} thread${threadsOf[name] === 1 ? '' : 's'}`,
          run: async (c: number) =>
            (await ask(sharps[name].child, { type: 'run', concurrency: c, seconds: DURATION_S, warmup: WARMUP_S }, 'ran')) as unknown as LoopResult,
        })),
      ];
      for (const concurrency of MISS_CONCURRENCY) {
        const rounds: Record<string, LoopResult[]> = Object.fromEntries(variants.map((v) => [v.name, []]));
        for (let round = 0; round < ROUNDS; round++) {
          const order = variants.map((_, j) => variants[(round + j) % variants.length]);
          const line: string[] = [];
          for (const v of order) {
            const r = await v.run(concurrency);
            rounds[v.name].push(r);
            line.push(`${v.name} ${f(r.rate, 0).trim()}/s${r.errors ? ` (errors ${r.errors}: ${r.firstError})` : ''}`);
          }
          console.log(`  ${concurrency} in flight, round ${round + 1}: ${line.join(', ')}  [load ${load()}]`);
        }
        const medianRun = (name: string) => {
          const rates = rounds[name].map((r) => r.rate);
          return rounds[name][rates.indexOf(median(rates))];
        };
        for (const v of variants) {
          const m = medianRun(v.name);
          const row =
            `  ${concurrency} in flight, ${v.label.padEnd(36)} median: ${f(m.rate)} /s  p50 ${f(m.summary.p50)} p99 ${f(m.summary.p99)} mean ${f(m.summary.mean)} ms  ` +
            `CPU ${f((m.cpuSeconds * 1000) / Math.max(1, m.rate * m.elapsed), 6)} ms per transformation (${f(m.cpuSeconds / m.elapsed, 5).trim()} cores)`;
          console.log(row);
        }
        for (const [name, against] of [
          ['plane', 'sharp'],
          ['plane-cores', 'sharp-cores'],
        ] as const) {
          const ratio = medianRun(name).rate / medianRun(against).rate;
          const perRound = rounds[name].map((r, i) => (r.rate / rounds[against][i].rate).toFixed(2)).join(', ');
          const detail = `${pct(ratio)} (median rounds; round by round ${perRound})`;
          if (name === 'plane')
            verdicts.push({
              label: `transformations >= ${MISS_TARGET * 100} % of direct sharp (its default threads), ${concurrency} in flight`,
              ok: ratio >= MISS_TARGET,
              detail,
            });
          else
            console.log(
              `  (not a target) ${concurrency} in flight, the plane with ${threadsOf[name]} threads against sharp with ${threadsOf[against]}: ${detail}`,
            );
        }
      }
    }

    // The usage the delivery planes recorded (both stopped first: their last counts flushed).
    for (const c of children) await c.stop();
    children.length = 0;
    const exited = new Promise((resolve) => plane!.once('exit', resolve));
    plane.kill('SIGTERM');
    await exited;
    // Every UTC day the run touched (a run can cross midnight).
    const days = await usageDays(db, serviceId, runStartedOn, new Date().toISOString().slice(0, 10));
    const usage = days.reduce((sum, d) => ({ deliveries: sum.deliveries + d.deliveries, transformations: sum.transformations + d.transformations }), {
      deliveries: 0,
      transformations: 0,
    });
    console.log(
      `\nusage recorded: ${usage.deliveries} deliveries and ${usage.transformations} transformations (${days.length} UTC day${days.length === 1 ? '' : 's'}); ` +
        `counted here: ${answered} answers 200 (and up to ${uncounted} in flight when a load window closed) and ${transformed} misses ` +
        `(the origin answered ${originRequests} fetches)`,
    );
    console.log(`${watch.stop()}; load ${load()}\n`);
    for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
  } finally {
    await cleanUp();
  }
}

/** What the run started, undone once: on its end, or on SIGINT/SIGTERM. */
let cleanUp: () => Promise<void> = async () => undefined;

if (CHILD) {
  const run = CHILD === 'static' ? staticChild : CHILD === 'sharp' ? sharpChild : CHILD === 'plane' ? planeChild : null;
  if (!run) throw new Error(`--child=${CHILD}: static, sharp or plane`);
  run().catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
} else {
  runMain(main, () => cleanUp());
}
