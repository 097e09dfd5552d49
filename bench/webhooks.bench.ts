/**
 * Webhook delivery benchmark: `npx tsx bench/webhooks.bench.ts [events] [webhooks]` (default 1000 x 3).
 *
 * Starts everything in this process on loopback: a fresh PostgreSQL database (on the server of
 * scripts/ensure-tools.sh), the Temporal dev server from .tools/, the API, the worker with its event
 * dispatcher, and one local HTTP receiver that verifies every signature with the docs example.
 * Registers the webhooks through the API (subscribed to `*`), writes the events into the outbox the
 * way the platform does (emitEvent in a transaction, NOTIFY at commit), and measures until every
 * (event, webhook) pair has been received and recorded as delivered. Prints deliveries per second,
 * latency percentiles, and checks that none is lost or duplicated.
 */
import { existsSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime } from '@temporalio/worker';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { createApi } from '../api/bootstrap';
import { createWorker } from '../workers/worker';
import { emitEvent } from '../domain/events';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createUser } from '../test/helpers/fixtures';
import { verifyWebhook } from '../docs/examples/verify-webhook';

const EVENTS = Number(process.argv[2] ?? 1000);
const WEBHOOKS = Number(process.argv[3] ?? 3);
const EMIT_CONCURRENCY = 16;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main() {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const root = path.resolve(__dirname, '..');
  const cli = path.join(root, '.tools/venv/bin/temporal');
  console.log(`webhook bench: ${EVENTS} events x ${WEBHOOKS} webhooks = ${EVENTS * WEBHOOKS} deliveries`);

  const database = await createTestDatabase();
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      executable: existsSync(cli) ? { type: 'existing-path', path: cli } : undefined,
      ip: '127.0.0.1',
      log: { format: 'pretty', level: 'error' },
    },
  });
  const taskQueue = `bench-${randomBytes(4).toString('hex')}`;
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    DATABASE_POOL_MAX: '20',
    TEMPORAL_TASK_QUEUE: taskQueue,
    TEMPORAL_SEARCH_ATTRIBUTES: '0',
    WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
  });
  const logger = createLogger(config.LOG_LEVEL, 'bench');

  // Receiver: records each (event, webhook) pair, verifies each signature.
  const secrets = new Map<string, string>(); // path -> secret
  const received = new Map<string, number>(); // `${event id} ${path}` -> count
  const latencies: number[] = [];
  let bad = 0;
  let lastAt = 0;
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
  receiver.keepAliveTimeout = 1;
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const receiverPort = (receiver.address() as AddressInfo).port;

  const api = await createApi(config, { db: database.db, temporalClient: env.client, logger });
  const server = await new Promise<http.Server>((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const apiUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  console.log('bundling workflows and starting the worker...');
  // Wired as in the worker process (workers/main.ts): its activities and dispatcher use a client on the
  // worker's NativeConnection, so delivery workflows start eagerly.
  const { worker, background } = await createWorker({ config, db: database.db, logger, connection: env.nativeConnection, taskQueue });
  for (const s of background) await s.start();
  const running = worker.run();

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

  // Emit: one transaction per event, as a state change would, EMIT_CONCURRENCY at a time.
  const expected = EVENTS * WEBHOOKS;
  const t0 = performance.now();
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

  const progress = setInterval(() => {
    void (async () => {
      const [u, r, d] = await Promise.all([
        database.db('events').whereNull('dispatched_at').count('* as n').first(),
        database.db('webhook_deliveries').count('* as n').first(),
        database.db('webhook_deliveries').where({ status: 'delivered' }).count('* as n').first(),
      ]);
      if (process.env.BENCH_PROGRESS)
        console.log(
          `t=${((performance.now() - t0) / 1000).toFixed(1)}s undispatched=${(u as any).n} rows=${(r as any).n} delivered=${(d as any).n} received=${received.size}`,
        );
    })();
  }, 2_000);
  const deadline = Date.now() + 10 * 60_000;
  while (received.size < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  const receivedMs = lastAt - t0;
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

  const duplicates = [...received.values()].filter((c) => c > 1).length;
  const rows = (await database.db('webhook_deliveries').count('* as n').first()) as { n: string };
  const undispatched = (await database.db('events').whereNull('dispatched_at').count('* as n').first()) as { n: string };
  latencies.sort((a, b) => a - b);
  const result = {
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
    emit_seconds: +(emitMs / 1000).toFixed(2),
    seconds_to_last_receipt: +(receivedMs / 1000).toFixed(2),
    seconds_to_all_recorded: +(recordedMs / 1000).toFixed(2),
    deliveries_per_second_received: Math.round(received.size / (receivedMs / 1000)),
    deliveries_per_second_recorded: Math.round(recorded / (recordedMs / 1000)),
    latency_ms: {
      p50: Math.round(percentile(latencies, 50)),
      p95: Math.round(percentile(latencies, 95)),
      p99: Math.round(percentile(latencies, 99)),
      max: Math.round(latencies.at(-1) ?? 0),
    },
  };
  console.log(JSON.stringify(result, null, 2));

  worker.shutdown();
  await running;
  for (const s of background) await s.stop();
  await new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  });
  await new Promise<void>((r) => receiver.close(() => r()));
  await api.close();
  await env.teardown();
  await database.drop();
  if (result.lost > 0 || bad > 0 || recorded < expected) {
    console.error('FAILED: deliveries lost, unrecorded or badly signed');
    process.exit(1);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
