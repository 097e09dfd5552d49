/**
 * Object storage on a real SeaweedFS (issue #25): presigning, the policy layer's cost on the data
 * path, and how fast a deleted key's presigned URLs stop working.
 *
 *   npx tsx bench/objectstorage.bench.ts [--duration=5] [--rounds=3] [--presign=1,8,32] [--s3=1,4] [--revocations=10] [--starts=3]
 *
 * In one process, as test/helpers/stack.ts builds a stack without Temporal (which it cannot import
 * outside vitest): a fresh database, the API (`createApi`, listening on loopback) standing in for
 * this machine's host, so that it runs the SeaweedFS of a temporary directory itself
 * (`OBJECTSTORAGE_BACKEND=seaweedfs`), and one account whose object storage is provisioned as an
 * order would (test/objectstorage.support.ts). Rate limits are raised through RATE_LIMIT_*. Then:
 *
 * 0. SeaweedFS's start: `SeaweedServer.start` until ready on an empty data directory (as root this
 *    includes its account's `useradd`) and its stop, `--starts` times; the first time, also a start
 *    again on the same (now used) directory.
 * 1. `POST /v1/object-storage/buckets/{bucket}/presign` over HTTP, `--duration` seconds at each
 *    concurrency of `--presign` (after 1 s of warm-up), from a worker thread running fetch loops (so
 *    the load is not generated on the API's event loop): requests/s, p50/p99; beside each, a
 *    `GET /v1/object-storage/buckets/{bucket}` (the same API path without the key and the signing).
 *    Then the in-process `presign()` alone, sequential and 8 at a time, and its two halves: the reads
 *    (the key, the bucket) and the signing (a client and `getSignedUrl`, no database), and
 *    `getSignedUrl` on one client kept.
 *    No target is set for presigning.
 * 2. 1 MiB PUT then GET of the same object (one op), with the AWS SDK v3, by three identities: the
 *    admin identity of the server (server.json), an issued unscoped key and an issued key scoped to
 *    the bucket, at each concurrency of `--s3`, `--duration` seconds each after 1 s of warm-up,
 *    `--rounds` rounds whose order rotates (each identity goes first, second and third once in
 *    three rounds). Reports the median round per identity; target: issued keys >= 90 % of admin.
 * 3. `--revocations` times: a new key scoped to the bucket (and when it first signs), a presigned GET
 *    URL of it that answers 200, then `DELETE /v1/object-storage/keys/{id}`; from its answer the URL
 *    is fetched every 5 ms until 403: min/median/max. Target (DECISIONS): within 2 s.
 * Then the RSS of the SeaweedFS process (VmRSS, VmHWM from /proc) and its data directory's size, and
 * whether a test suite ran beside the bench (looked for every 5 s). Everything it made (directories,
 * the database, the server's OS account) is removed at the end, and on SIGINT/SIGTERM. Needs PostgreSQL and SeaweedFS (scripts/ensure-tools.sh).
 * Results: docs/benchmarks.md ("Object storage").
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { createApi } from '../api/bootstrap';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { HostAgent, hostRegistrationOf } from '../domain/hosts/agent';
import { presign } from '../domain/objectstorage/manage';
import { ObjectStorageProvisioner } from '../domain/objectstorage/provisioner';
import { findActiveKey, findStorage, requireBucket } from '../domain/objectstorage/store';
import { provisionTargetOf } from '../domain/provisioning';
import { ALL_SCOPES } from '../domain/scopes';
import { placedFamilies } from '../families';
import { accountNameFor, removeAccount } from '../providers/os-accounts';
import { SeaweedServer, stopSeaweedServer } from '../providers/seaweedfs/seaweedfs.server';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createService, createUser } from '../test/helpers/fixtures';
import { httpClient } from '../test/helpers/http';
import { vitestRunning, watchForSuites } from './suite-watch';
import { runMain } from './children';
import { median, summarize, type Summary } from './stats';
import { load, now, sleep, verdict } from './kit';

const arg = (name: string, fallback: string) => process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const list = (s: string) => s.split(',').map(Number);
const DURATION_S = Number(arg('duration', '5'));
const ROUNDS = Number(arg('rounds', '3'));
const PRESIGN_CONCURRENCY = list(arg('presign', '1,8,32'));
const S3_CONCURRENCY = list(arg('s3', '1,4'));
const REVOCATIONS = Number(arg('revocations', '10'));
const STARTS = Number(arg('starts', '3'));
const WARMUP_S = 1;
const OBJECT_BYTES = 1024 * 1024;
const ISSUED_TARGET = 0.9;
const REVOCATION_TARGET_MS = 2_000;
const POLL_MS = 5;
const HUGE = '100000000';

/** Whether a test suite (vitest) runs on this machine now: from /proc, without a process of our own. */
const f = (n: number, width = 8) => (Number.isFinite(n) ? n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0) : '-').padStart(width);
const latency = (s: Summary) => `p50 ${f(s.p50)}  p99 ${f(s.p99)}  mean ${f(s.mean)}  max ${f(s.max)} ms`;

/** Runs `fn` back to back from `concurrency` loops for `seconds` after `warmup` seconds: completions within the window and their latencies. */
async function closedLoop(
  concurrency: number,
  seconds: number,
  warmup: number,
  fn: () => Promise<void | Record<string, number>>,
): Promise<{ rate: number; samples: number[]; parts: Record<string, number[]>; errors: number }> {
  const samples: number[] = [];
  const parts: Record<string, number[]> = {};
  let errors = 0;
  let measuring = false;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const start = now();
      try {
        const timed = await fn();
        if (measuring) {
          samples.push(now() - start);
          for (const [part, ms] of Object.entries(timed ?? {})) (parts[part] ??= []).push(ms);
        }
      } catch (err) {
        if (measuring) errors++;
        if (errors === 1 && measuring) console.error(`  (first error: ${(err as Error).message})`);
      }
      // A call that never waits on I/O (the signing alone) would otherwise never let the timers run.
      await new Promise((r) => setImmediate(r));
    }
  };
  const loops = Array.from({ length: concurrency }, loop);
  await sleep(warmup * 1000);
  measuring = true;
  const started = now();
  await sleep(seconds * 1000);
  measuring = false;
  const elapsed = (now() - started) / 1000;
  stop = true;
  await Promise.all(loops);
  return { rate: samples.length / elapsed, samples, parts, errors };
}

/** The HTTP load generator: fetch loops in a worker thread (plain JavaScript), so that the API's event loop serves requests and nothing else. */
const LOAD_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const { url, method, headers, body, concurrency, warmupMs, durationMs } = workerData;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
(async () => {
  const samples = [];
  const statuses = {};
  let errors = 0;
  let measuring = false;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const start = performance.now();
      try {
        const res = await fetch(url, { method, headers, body });
        await res.arrayBuffer();
        if (measuring) {
          samples.push(performance.now() - start);
          statuses[res.status] = (statuses[res.status] || 0) + 1;
        }
      } catch {
        if (measuring) errors++;
      }
    }
  };
  const loops = Array.from({ length: concurrency }, loop);
  await sleep(warmupMs);
  measuring = true;
  const started = performance.now();
  await sleep(durationMs);
  measuring = false;
  const elapsed = (performance.now() - started) / 1000;
  stop = true;
  await Promise.all(loops);
  parentPort.postMessage({ samples, statuses, errors, elapsed });
})();
`;

function httpLoad(options: {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  concurrency: number;
}): Promise<{ samples: number[]; statuses: Record<string, number>; errors: number; elapsed: number }> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(LOAD_WORKER, { eval: true, workerData: { ...options, warmupMs: WARMUP_S * 1000, durationMs: DURATION_S * 1000 } });
    worker.once('message', (m) => {
      resolve(m);
      void worker.terminate();
    });
    worker.once('error', reject);
  });
}

/** The AWS SDK v3 client a customer would configure (test/objectstorage.support.ts), for one identity. */
function s3ClientOf(endpoint: string, region: string, credentials: { accessKeyId: string; secretAccessKey: string }): S3Client {
  return new S3Client({
    endpoint,
    region,
    forcePathStyle: true,
    credentials,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    maxAttempts: 1,
  });
}

/** VmRSS and VmHWM of a process, in MiB. */
async function memoryOf(pid: number): Promise<{ rss: number; hwm: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
}

/** The OS account a SeaweedFS of `dataDir` ran as (when run by root), removed with its directory. */
const removeServerAccount = (dataDir: string) => removeAccount(accountNameFor('s3', path.resolve(dataDir), 'seaweedfs'));

/** SeaweedFS's own directory, started and stopped: the time to ready on an empty directory, to stop, and (the first time) to start again on the same directory. */
async function measureStarts(): Promise<void> {
  console.log(`\nSeaweedFS start (SeaweedServer.start until its S3 gateway refuses an anonymous listing, polled every 100 ms) and stop, load ${load()}`);
  for (let i = 0; i < STARTS; i++) {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), 'os-bench-start-'));
    const options = { dataDir, bindAddress: '127.0.0.1', region: 'us-east-1' };
    cleanUp = async () => {
      await stopSeaweedServer(dataDir);
      await rm(dataDir, { recursive: true, force: true });
      await removeServerAccount(dataDir);
    };
    try {
      let begun = now();
      const server = await SeaweedServer.start(options);
      const cold = now() - begun;
      const fresh = await memoryOf(server.pid);
      begun = now();
      await server.stop();
      const stop = now() - begun;
      let again = '';
      if (i === 0) {
        begun = now();
        const restarted = await SeaweedServer.start(options);
        const took = now() - begun;
        begun = now();
        await restarted.stop();
        again = `; started again on that directory ${f(took)} ms, stopped ${f(now() - begun)} ms`;
      }
      console.log(`  ${i + 1}: empty directory to ready ${f(cold)} ms (RSS then ${fresh.rss.toFixed(0)} MiB), stopped ${f(stop)} ms${again}`);
    } finally {
      await cleanUp();
    }
  }
}

async function main(): Promise<void> {
  const watch = watchForSuites();
  console.log(
    `objectstorage bench: ${os.cpus().length} x ${os.cpus()[0]?.model}, Node ${process.version}, load ${load()}, ` +
      `vitest running now: ${await vitestRunning()}; ${DURATION_S} s windows, ${ROUNDS} rounds`,
  );
  await measureStarts();

  const database = await createTestDatabase();
  const scratch = mkdtempSync(path.join(os.tmpdir(), 'os-bench-'));
  // A directory of its own under the temporary directory, as the stacks make it: its server's account must pass through its parent.
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'os-bench-s3-'));
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    TEMPORAL_TASK_QUEUE: `bench-${randomBytes(4).toString('hex')}`,
    TEMPORAL_SEARCH_ATTRIBUTES: '0',
    CLOUD_DEV_ENDPOINTS: '1',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
    NODE_ENV: 'test',
    LB_DATA_DIR: path.join(scratch, 'lb'),
    DBAAS_DATA_DIR: path.join(scratch, 'dbaas'),
    OBJECTSTORAGE_DATA_DIR: dataDir,
    OBJECTSTORAGE_BACKEND: 'seaweedfs',
    OBJECTSTORAGE_SNAPSHOT_INTERVAL: '1h',
    DNS_BACKEND: 'simulator',
    LB_BACKEND: 'simulator',
    DBAAS_BACKEND: 'simulator',
    RATE_LIMIT_DEFAULT_PER_KEY: HUGE,
    RATE_LIMIT_DEFAULT_PER_ACCOUNT: HUGE,
    RATE_LIMIT_MUTATIONS_PER_KEY: HUGE,
    RATE_LIMIT_MUTATIONS_PER_ACCOUNT: HUGE,
  });
  const logger = createLogger(config.LOG_LEVEL, 'bench');
  // No Temporal, hence no worker: the API stands in for this machine's host and runs its SeaweedFS itself.
  const host = config.HOST_NAME;
  const api = await createApi(config, { db: database.db, logger, host });
  const registration = hostRegistrationOf(config, [...placedFamilies(config).keys()]);
  const standIn = new HostAgent({ db: database.db, logger, local: api.deps.providers.localServers, registration });
  await standIn.start();
  const server: Server = await new Promise((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const http = httpClient(url);
  let cleaned: Promise<void> | null = null;
  cleanUp = () =>
    (cleaned ??= (async () => {
      await new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections();
      });
      await standIn.stop();
      await api.close();
      await stopSeaweedServer(dataDir);
      await rm(scratch, { recursive: true, force: true });
      await rm(dataDir, { recursive: true, force: true });
      await removeServerAccount(dataDir);
      await database.drop();
    })());
  try {
    const { accountId } = await createAccount(database.db);
    const { userId } = await createUser(database.db, accountId, { isOwner: true });
    const token = (
      await createApiKey(database.db, accountId, userId, { scopes: ALL_SCOPES.filter((s) => !s.startsWith('apikeys:') && !s.startsWith('users:')) })
    ).token;
    const call = async (method: string, p: string, body?: unknown, expected?: number) => {
      const res = await http.request(method, p, { token, body });
      if (expected !== undefined && res.status !== expected) throw new Error(`${method} ${p}: ${res.status} ${res.text}`);
      return res;
    };

    // The account's object storage, provisioned as an order would; SeaweedFS starts on the first call.
    const service = await createService(database.db, accountId, { family: 'objectstorage', product: 'objectstorage-250' });
    const provisioner = new ObjectStorageProvisioner(database.db, api.deps.providers.objectstorage, api.deps.providers.hosts);
    const target = (await provisionTargetOf(database.db, service.serviceId))!;
    let started = now();
    await provisioner.provision(target);
    if (!(await provisioner.isActive(target))) throw new Error('the object storage is not active');
    console.log(`\nstack: provisioning the first storage (SeaweedFS started on an empty directory by it) took ${f(now() - started)} ms`);
    const weed = await SeaweedServer.find(dataDir);
    if (!weed) throw new Error('no SeaweedFS found');
    const afterStart = await memoryOf(weed.pid);
    const storage = (await call('GET', '/v1/object-storage', undefined, 200)).body as { s3_endpoint: string; region: string; bucket_prefix: string };
    const bucket = `${storage.bucket_prefix}bench`;
    await call('POST', '/v1/object-storage/buckets', { name: bucket }, 201);
    const newKey = async (name: string, scope?: string) => {
      const begun = now();
      const res = await call('POST', '/v1/object-storage/keys', { name, ...(scope ? { scope } : {}) }, 201);
      return { ...(res.body as { id: string; access_key_id: string; secret_access_key: string }), createMs: now() - begun };
    };
    /** Milliseconds from now until the key signs a listing (DECISIONS: within 5 s). */
    const untilSigns = async (client: S3Client): Promise<number> => {
      const begun = now();
      for (;;) {
        try {
          await client.send(new ListObjectsV2Command({ Bucket: bucket, MaxKeys: 1 }));
          return now() - begun;
        } catch (err) {
          if (now() - begun > 10_000) throw err;
          await sleep(POLL_MS);
        }
      }
    };
    const credentialsOf = (k: { access_key_id: string; secret_access_key: string }) => ({ accessKeyId: k.access_key_id, secretAccessKey: k.secret_access_key });
    const unscopedKey = await newKey('bench unscoped');
    const scopedKey = await newKey('bench scoped', bucket);
    const admin = SeaweedServer.settingsOf(dataDir)!.admin;
    const clients: Record<string, S3Client> = {
      admin: s3ClientOf(storage.s3_endpoint, storage.region, admin),
      unscoped: s3ClientOf(storage.s3_endpoint, storage.region, credentialsOf(unscopedKey)),
      scoped: s3ClientOf(storage.s3_endpoint, storage.region, credentialsOf(scopedKey)),
    };
    console.log(`  issued keys sign after ${f(await untilSigns(clients.unscoped))} ms (unscoped) and ${f(await untilSigns(clients.scoped))} ms (scoped)`);
    await clients.admin.send(new PutObjectCommand({ Bucket: bucket, Key: 'small.txt', Body: 'presigned' }));

    // 1. Presign over HTTP, then in process.
    const presignBody = JSON.stringify({ key: 'small.txt', method: 'GET', key_id: scopedKey.id, ttl_seconds: 600 });
    const check = await call('POST', `/v1/object-storage/buckets/${bucket}/presign`, JSON.parse(presignBody), 200);
    if ((await fetch(check.body.url)).status !== 200) throw new Error('the presigned URL does not answer 200');
    console.log(
      `\n1. POST /v1/object-storage/buckets/{bucket}/presign over HTTP, and GET /v1/object-storage/buckets/{bucket} for comparison, ${DURATION_S} s each after ${WARMUP_S} s (fetch loops in a worker thread), load ${load()}`,
    );
    // Beside each presign window, the same path without the key and the signing: one bucket read (`storageTarget` + `requireBucket`).
    const bucketUrl = `${url}/v1/object-storage/buckets/${bucket}`;
    for (const concurrency of PRESIGN_CONCURRENCY) {
      for (const [label, request] of [
        ['presign', { url: `${bucketUrl}/presign`, method: 'POST', body: presignBody }],
        ['GET bucket', { url: bucketUrl, method: 'GET' }],
      ] as const) {
        const r = await httpLoad({ ...request, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, concurrency });
        const other = Object.entries(r.statuses).filter(([status]) => status !== '200');
        console.log(
          `  ${label.padEnd(10)} ${String(concurrency).padStart(3)} in flight: ${f(r.samples.length / r.elapsed)} req/s  ${latency(summarize(r.samples))}` +
            `${other.length || r.errors ? `  NOT 200: ${JSON.stringify(Object.fromEntries(other))}, errors ${r.errors}` : ''}`,
        );
      }
    }
    const row = (await findStorage(database.db, service.serviceId))!;
    const keyId = Number(scopedKey.id.replace(/^s3k_/, ''));
    const presignOnce = async () => {
      await presign({ db: database.db, keyring: api.deps.keyring }, row, { bucket, key: 'small.txt', method: 'GET', keyId, ttlSeconds: 600 });
    };
    const readsOnce = async () => {
      await findActiveKey(database.db, row.service_id, keyId);
      await requireBucket(database.db, row.service_id, bucket);
    };
    const signer = () =>
      new S3Client({
        endpoint: row.s3_endpoint,
        region: row.region,
        forcePathStyle: true,
        credentials: credentialsOf(scopedKey),
        requestChecksumCalculation: 'WHEN_REQUIRED',
      });
    const signOnce = async () => {
      const client = signer();
      await getSignedUrl(client, new GetObjectCommand({ Bucket: bucket, Key: 'small.txt' }), { expiresIn: 600 });
      client.destroy();
    };
    // What a client kept per key would save: getSignedUrl on one client made once.
    const kept = signer();
    const signKept = async () => {
      await getSignedUrl(kept, new GetObjectCommand({ Bucket: bucket, Key: 'small.txt' }), { expiresIn: 600 });
    };
    console.log(`  in process, ${DURATION_S} s each after ${WARMUP_S} s:`);
    for (const [label, fn, concurrency] of [
      ['presign()', presignOnce, 1],
      ['presign()', presignOnce, 8],
      ['  its reads (key, bucket)', readsOnce, 1],
      ['  its signing (client + getSignedUrl)', signOnce, 1],
      ['  getSignedUrl alone, one client kept', signKept, 1],
    ] as const) {
      const r = await closedLoop(concurrency, DURATION_S, WARMUP_S, fn);
      console.log(
        `  ${`${label}, ${concurrency} at a time`.padEnd(54)} ${f(r.rate)} calls/s  ${latency(summarize(r.samples))}${r.errors ? `  errors ${r.errors}` : ''}`,
      );
    }

    kept.destroy();

    // 2. 1 MiB PUT + GET by each identity, rounds in rotating order.
    const body = randomBytes(OBJECT_BYTES);
    let putBytes = 0;
    const identities = Object.keys(clients);
    /** One op: a PUT of 1 MiB, then a GET of the same object read to its end (64 keys per identity, overwritten in turn). */
    const opOf = (identity: string) => {
      let i = 0;
      return async () => {
        const Key = `${identity}/o${i++ % 64}`;
        const begun = now();
        await clients[identity].send(new PutObjectCommand({ Bucket: bucket, Key, Body: body }));
        putBytes += OBJECT_BYTES;
        const put = now();
        const got = await clients[identity].send(new GetObjectCommand({ Bucket: bucket, Key }));
        const bytes = await got.Body!.transformToByteArray();
        if (bytes.length !== OBJECT_BYTES) throw new Error(`GET ${Key}: ${bytes.length} bytes`);
        return { put: put - begun, get: now() - put };
      };
    };
    console.log(`\n2. 1 MiB PUT then GET of the same object (one op), ${DURATION_S} s per identity after ${WARMUP_S} s, ${ROUNDS} rounds, load ${load()}`);
    const verdicts: { label: string; ok: boolean; detail: string }[] = [];
    for (const concurrency of S3_CONCURRENCY) {
      const rounds: Record<string, { rate: number; summary: Summary; put: Summary; get: Summary; errors: number }[]> = Object.fromEntries(
        identities.map((k) => [k, []]),
      );
      for (let round = 0; round < ROUNDS; round++) {
        const order = identities.map((_, j) => identities[(round + j) % identities.length]);
        const line: string[] = [];
        for (const identity of order) {
          const r = await closedLoop(concurrency, DURATION_S, WARMUP_S, opOf(identity));
          rounds[identity].push({
            rate: r.rate,
            summary: summarize(r.samples),
            put: summarize(r.parts.put ?? []),
            get: summarize(r.parts.get ?? []),
            errors: r.errors,
          });
          line.push(`${identity} ${f(r.rate, 0)} ops/s (p50 ${f(summarize(r.samples).p50, 0)} ms)${r.errors ? ` errors ${r.errors}` : ''}`);
        }
        console.log(`  ${concurrency} in flight, round ${round + 1}: ${line.join(', ')}  [load ${load()}]`);
      }
      const medianRound = (identity: string) => {
        const rates = rounds[identity].map((r) => r.rate);
        return rounds[identity][rates.indexOf(median(rates))];
      };
      for (const identity of identities) {
        const m = medianRound(identity);
        console.log(
          `  ${concurrency} in flight, ${identity.padEnd(8)} median round: ${f(m.rate)} ops/s  ${latency(m.summary)}  (${f(m.rate * 2 * (OBJECT_BYTES / 1048576), 0)} MiB/s moved); PUT p50 ${f(m.put.p50, 0)} p99 ${f(m.put.p99, 0)}, GET p50 ${f(m.get.p50, 0)} p99 ${f(m.get.p99, 0)} ms`,
        );
      }
      for (const identity of ['unscoped', 'scoped']) {
        const ratio = medianRound(identity).rate / medianRound('admin').rate;
        const perRound = rounds[identity].map((r, i) => (r.rate / rounds.admin[i].rate).toFixed(2)).join(', ');
        verdicts.push({
          label: `${identity} key >= ${ISSUED_TARGET * 100} % of admin, 1 MiB PUT+GET, ${concurrency} in flight`,
          ok: ratio >= ISSUED_TARGET,
          detail: `${(ratio * 100).toFixed(1)} % (median rounds; round by round ${perRound})`,
        });
      }
    }

    // 3. Key deletion to refusal of its presigned URL.
    console.log(
      `\n3. DELETE /v1/object-storage/keys/{id} answered -> its presigned GET URL refused (403), polled every ${POLL_MS} ms, ${REVOCATIONS} times, load ${load()}`,
    );
    const refusals: number[] = [];
    const deletes: number[] = [];
    const signs: number[] = [];
    const creates: number[] = [];
    for (let i = 0; i < REVOCATIONS; i++) {
      const key = await newKey(`revoked ${i}`, bucket);
      creates.push(key.createMs);
      signs.push(await untilSigns(s3ClientOf(storage.s3_endpoint, storage.region, credentialsOf(key))));
      const signed = await call(
        'POST',
        `/v1/object-storage/buckets/${bucket}/presign`,
        { key: 'small.txt', method: 'GET', key_id: key.id, ttl_seconds: 600 },
        200,
      );
      const before = await fetch(signed.body.url);
      await before.arrayBuffer();
      if (before.status !== 200) throw new Error(`the URL answered ${before.status} before the deletion`);
      started = now();
      await call('DELETE', `/v1/object-storage/keys/${key.id}`, undefined, 204);
      const answered = now();
      deletes.push(answered - started);
      let polls = 0;
      let status = 0;
      let code = '';
      while (now() - answered < 10_000) {
        polls++;
        const res = await fetch(signed.body.url);
        const text = await res.text();
        status = res.status;
        if (status === 403) {
          code = /<Code>([^<]*)<\/Code>/.exec(text)?.[1] ?? '';
          break;
        }
        await sleep(POLL_MS);
      }
      const took = now() - answered;
      refusals.push(status === 403 ? took : Infinity);
      console.log(
        `  ${String(i + 1).padStart(2)}: DELETE ${f(deletes[i])} ms, refused ${f(took)} ms after its answer (${polls} fetch${polls === 1 ? '' : 'es'}, last ${status} ${code})`,
      );
    }
    const sortedRefusals = [...refusals].sort((a, b) => a - b);
    console.log(
      `  refusal after DELETE's answer: min ${f(sortedRefusals[0])}  median ${f(median(refusals))}  max ${f(sortedRefusals[sortedRefusals.length - 1])} ms; ` +
        `DELETE itself ${latency(summarize(deletes))}`,
    );
    console.log(`  key creation (POST /keys) ${latency(summarize(creates))}; the new key signed after: ${latency(summarize(signs))}`);
    verdicts.push({
      label: `presigned URL refused within ${REVOCATION_TARGET_MS / 1000} s of its key's deletion, ${REVOCATIONS} of ${REVOCATIONS}`,
      ok: refusals.every((r) => r < REVOCATION_TARGET_MS),
      detail: `max ${f(sortedRefusals[sortedRefusals.length - 1]).trim()} ms`,
    });

    const after = await memoryOf(weed.pid);
    const disk = Number(spawnSync('du', ['-sb', path.join(dataDir, 'data')], { encoding: 'utf8' }).stdout.split('\t')[0]);
    console.log(
      `\nSeaweedFS (pid ${weed.pid}): RSS ${afterStart.rss.toFixed(0)} MiB after the first provisioning, ${after.rss.toFixed(0)} MiB after the runs (peak ${after.hwm.toFixed(0)} MiB)`,
    );
    console.log(
      `  ${(putBytes / 1048576 / 1024).toFixed(1)} GiB PUT over the runs (64 keys per identity, overwritten); its data directory holds ${(disk / 1048576 / 1024).toFixed(1)} GiB`,
    );
    console.log(`${watch.stop()}; load ${load()}\n`);
    for (const v of verdicts) console.log(`  target ${v.label}: ${v.detail} -> ${verdict(v.ok)}`);
    for (const client of Object.values(clients)) client.destroy();
  } finally {
    await cleanUp();
  }
}

/** What the run started, undone once: on its end, or on SIGINT/SIGTERM. */
let cleanUp: () => Promise<void> = async () => undefined;
runMain(main, () => cleanUp());
