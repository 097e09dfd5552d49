import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { createAccount, createApiKey, createSession, createUser } from './helpers/fixtures';

/**
 * The API as `npm start` runs it with API_PROCESSES=2: `api/server.ts` forks two processes on one
 * port (node:cluster). Every request goes on a connection of its own, so the kernel's round robin
 * spreads them over both processes; what one process knows alone (its caches, its counters) would
 * show. Rate limits hold across them (the counts are shared, not per process), an Idempotency-Key
 * runs its request once whichever process gets it, and a revoked key stops working in every process
 * within the credential cache's bound.
 */
let database: TestDatabase;
let api: ChildProcess;
let port: number;
let owner: { accountId: number; userId: number; session: string };
const root = path.resolve(__dirname, '..');

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

/** One request on a connection of its own (no keep-alive). */
function request(method: string, urlPath: string, token: string, body?: unknown, headers: Record<string, string> = {}) {
  return new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: any }>((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: urlPath,
        agent: false,
        headers: { authorization: `Bearer ${token}`, connection: 'close', ...(payload ? { 'content-type': 'application/json' } : {}), ...headers },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text ? JSON.parse(text) : null });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

beforeAll(async () => {
  database = await createTestDatabase();
  port = await freePort();
  const { accountId } = await createAccount(database.db);
  const { userId } = await createUser(database.db, accountId, { isOwner: true });
  owner = { accountId, userId, session: (await createSession(database.db, accountId, userId)).token };
  api = spawn(path.join(root, 'node_modules/.bin/tsx'), ['api/server.ts'], {
    cwd: root,
    env: {
      ...process.env,
      NODE_ENV: 'test',
      DATABASE_URL: database.url,
      PORT: String(port),
      HOST: '127.0.0.1',
      API_PROCESSES: '2',
      WEBHOOK_ALLOW_INSECURE_TARGETS: '1',
      // Temporal is not needed for these routes; the client connects lazily.
      TEMPORAL_ADDRESS: '127.0.0.1:1',
      LOG_LEVEL: 'warn',
      RATE_LIMIT_DEFAULT_PER_KEY: '12',
      RATE_LIMIT_DEFAULT_PER_ACCOUNT: '1000',
      RATE_LIMIT_WINDOW: '60s',
      CREDENTIAL_CACHE_TTL: '500ms',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  // Both processes listening: two answers from distinct request-serving processes cannot be told
  // apart from outside, so wait until the port answers and then a little for the second one.
  const until = Date.now() + 60_000;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) =>
      http.get({ host: '127.0.0.1', port, path: '/readyz', agent: false }, (res) => resolve(res.statusCode === 200)).on('error', () => resolve(false)),
    );
    if (ok) break;
    if (Date.now() > until) throw new Error('the API did not come up');
    await new Promise((r) => setTimeout(r, 250));
  }
  await new Promise((r) => setTimeout(r, 3_000));
}, 90_000);

afterAll(async () => {
  if (api && api.exitCode === null) {
    const exited = new Promise((resolve) => api.once('exit', resolve));
    api.kill('SIGTERM');
    await exited;
  }
  await database?.drop();
});

describe('API_PROCESSES=2', () => {
  it('keeps a per-key rate limit across processes: 12 of 36 requests pass, the rest are 429', async () => {
    const key = await createApiKey(database.db, owner.accountId, owner.userId, { scopes: ['services:read'] });
    const answers = await Promise.all(Array.from({ length: 36 }, () => request('GET', '/v1/services', key.token)));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(12);
    expect(statuses.filter((s) => s === 429)).toHaveLength(24);
    for (const a of answers.filter((x) => x.status === 429)) expect(a.body.error.code).toBe('rate_limited');
    expect(Math.min(...answers.filter((a) => a.status === 200).map((a) => Number(a.headers['ratelimit-remaining'])))).toBe(0);
  });

  it('runs a mutation once per Idempotency-Key, whichever process takes each retry', async () => {
    const key = await createApiKey(database.db, owner.accountId, owner.userId, { scopes: ['account:read', 'account:write'] });
    const hook = await request('POST', '/v1/webhooks', key.token, { url: 'https://127.0.0.1/hook', events: ['*'] });
    expect(hook.status).toBe(201);
    const answers = await Promise.all(
      Array.from({ length: 7 }, () => request('POST', `/v1/webhooks/${hook.body.id}/ping`, key.token, undefined, { 'idempotency-key': 'ping-once' })),
    );
    // One ping ran; the others were replayed, or refused while it was still running.
    const rows = await database.db('webhook_deliveries').where({ webhook_id: Number(hook.body.id.slice(4)) });
    expect(rows).toHaveLength(1);
    const created = answers.filter((a) => a.status === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    for (const a of created) expect(a.body.id).toBe(rows[0].id);
    expect(created.filter((a) => a.headers['idempotent-replayed'] !== 'true')).toHaveLength(1);
    for (const a of answers.filter((x) => x.status !== 201)) expect([a.status, a.body.error.code]).toEqual([409, 'idempotency_key_in_use']);
    // (Under the per-key budget of 12 this file sets: 1 + 7 + 3 requests.)
    const late = await Promise.all(
      Array.from({ length: 3 }, () => request('POST', `/v1/webhooks/${hook.body.id}/ping`, key.token, undefined, { 'idempotency-key': 'ping-once' })),
    );
    for (const a of late) expect([a.status, a.headers['idempotent-replayed'], a.body.id]).toEqual([201, 'true', rows[0].id]);
  });

  it('refuses a revoked key in every process within the credential cache bound', async () => {
    const key = await createApiKey(database.db, owner.accountId, owner.userId, { scopes: ['services:read'] });
    // Both processes have the key in their caches.
    for (const a of await Promise.all(Array.from({ length: 6 }, () => request('GET', '/v1/services?limit=1', key.token)))) expect(a.status).toBe(200);
    const revoked = await request('POST', `/v1/api-keys/${key.id}/revoke`, owner.session);
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    await new Promise((r) => setTimeout(r, 600)); // CREDENTIAL_CACHE_TTL 500ms
    const after = await Promise.all(Array.from({ length: 8 }, () => request('GET', '/v1/services?limit=1', key.token)));
    for (const a of after) expect([a.status, a.body.error.code]).toEqual([401, 'api_key_revoked']);
  });
});
