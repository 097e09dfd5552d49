import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kvStoreOf, serverlessDirs } from '../dataplane/serverless/main';
import type { ServerlessDataPlane } from '../dataplane/serverless/server';
import { redisTenantCredentials } from '../providers/redis/kv.redis';
import { redisAdminConnection, stopRedisServer } from '../providers/redis/redis.server';
import { SqliteEngine } from '../providers/sqlite/sqlite.engine';
import { WorkerdRuntime } from '../providers/workerd/runtime';
import { startStack, type Stack } from './helpers/stack';
import { call, eventually, newTenant, type TestTenant, testPlane } from './serverless.support';

/**
 * The serverless data planes on their real backends, as `npm start` runs them: kv on this host's
 * redis-server (started by the plane's configuration, one ACL user per tenant) and functions on
 * workerd under bubblewrap. The same plane the stack tier tests on simulated kv (serverless.http).
 */
let stack: Stack;
let plane: ServerlessDataPlane;
let base: string;
const root = mkdtempSync(path.join(tmpdir(), 'serverless-real-'));
chmodSync(root, 0o711); // the functions' sandboxes (uid 65534) pass through it

const hello = (v: number) => `export default {
  async fetch(request) {
    const url = new URL(request.url);
    return Response.json({ v: ${v}, path: url.pathname, query: url.search, auth: request.headers.get('authorization') });
  },
};`;

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { SERVERLESS_DATA_DIR: root, KV_BACKEND: 'redis' } });
  const dirs = serverlessDirs(stack.config);
  plane = testPlane(stack, {
    kv: await kvStoreOf(stack.config, stack.db),
    sql: new SqliteEngine({ rootDir: dirs.db, workers: 1 }),
    functions: new WorkerdRuntime({ dataDir: dirs.functions, timeoutMs: 3_000 }),
    flushMs: 200,
  });
  base = await plane.listen(0);
}, 60_000);

afterAll(async () => {
  await plane?.close();
  await stopRedisServer(serverlessDirs(stack.config).redis);
  await stack?.close();
  rmSync(root, { recursive: true, force: true });
});

describe('kv on Redis', () => {
  let a: TestTenant;
  let b: TestTenant;
  beforeAll(async () => {
    a = await newTenant(stack, base, 'kv');
    b = await newTenant(stack, base, 'kv');
  });

  it('stores through the plane, and the tenants are fenced in Redis itself by their ACL users', async () => {
    expect((await call(`${a.endpoint}/v1/ns/app/keys/secret`, { method: 'PUT', token: a.token, body: 'a-only' })).status).toBe(204);
    expect((await call(`${a.endpoint}/v1/ns/app/keys/secret`, { token: a.token })).text).toBe('a-only');
    expect((await call(`${b.endpoint}/v1/ns/app/keys/secret`, { token: b.token })).status).toBe(404);
    // B's Redis user, logged in directly, cannot read A's key nor list keys.
    const admin = redisAdminConnection(serverlessDirs(stack.config).redis)!;
    await call(`${b.endpoint}/v1/ns/app/keys/mine`, { method: 'PUT', token: b.token, body: 'b' });
    const creds = redisTenantCredentials(admin.password, b.handle);
    const asB = createClient({ socket: { host: admin.host, port: admin.port }, username: creds.username, password: creds.password });
    await asB.connect();
    try {
      await expect(asB.get(`kv:${a.handle}:app:secret`)).rejects.toThrow(/NOPERM/);
      await expect(asB.sendCommand(['SCAN', '0'])).rejects.toThrow(/NOPERM/);
      await expect(asB.sendCommand(['KEYS', '*'])).rejects.toThrow(/NOPERM/);
    } finally {
      await asB.quit();
    }
    await plane.flush();
    const report = (await stack.http.get('/v1/serverless/kv/usage', { token: a.key })).body;
    expect(report).toMatchObject({ reads: 1, writes: 1, storage_bytes_peak: 'app'.length + 1 + 'secret'.length + 'a-only'.length });
  });
});

describe('functions on workerd', () => {
  let t: TestTenant;
  const fn = (name: string) => `${t.endpoint}/v1/functions/${name}`;
  beforeAll(async () => {
    t = await newTenant(stack, base, 'functions');
  });

  it('deploys a module to a stable public URL that answers with the rest of the path; the token never reaches it', async () => {
    const deployed = await call(fn('hello'), { method: 'PUT', token: t.token, body: hello(1) });
    expect(deployed.status, deployed.text).toBe(201);
    expect(deployed.body).toMatchObject({ object: 'function', name: 'hello', url: `${base}/functions/run/${t.handle}/hello` });
    const answer = await call(`${deployed.body.url}/some/path?x=1`, { headers: { authorization: 'Bearer should-not-pass' } });
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ v: 1, path: '/some/path', query: '?x=1', auth: null });
    expect(answer.headers.get('x-request-id')).toMatch(/^req_/);
    expect((await stack.http.get('/v1/serverless/functions', { token: t.key })).body).toMatchObject({ object: 'serverless_functions', deployed_count: 1 });
  });

  it('replaces the code without dropping a request; a module that does not load is 400 script_invalid and the old one serves on', async () => {
    const url = `${base}/functions/run/${t.handle}/hello`;
    let stop = false;
    const seen: Array<number | string> = [];
    const load = (async () => {
      while (!stop) {
        const answers = await Promise.all(Array.from({ length: 4 }, () => call(url)));
        for (const r of answers) seen.push(r.status === 200 ? r.body.v : `status ${r.status}`);
      }
    })();
    await new Promise((r) => setTimeout(r, 200));
    const v2 = await call(fn('hello'), { method: 'PUT', token: t.token, body: hello(2) });
    expect(v2.status, v2.text).toBe(200);
    await new Promise((r) => setTimeout(r, 200));
    stop = true;
    await load;
    expect(seen.filter((s) => typeof s === 'string')).toEqual([]);
    expect(seen.at(-1)).toBe(2);
    expect(seen.indexOf(2)).toBeGreaterThan(0);
    expect(seen.slice(seen.indexOf(2)).every((v) => v === 2)).toBe(true);

    const broken = await call(fn('hello'), { method: 'PUT', token: t.token, body: 'export default { fetch( {' });
    expect(broken.status).toBe(400);
    expect(broken.body.error).toMatchObject({ code: 'script_invalid' });
    expect(broken.body.error.message).not.toContain(root);
    expect((await call(url)).body.v).toBe(2);
  });

  it('meters invocations, errors (an uncaught exception is a 500) and execution time', async () => {
    const m = await newTenant(stack, base, 'functions');
    const ok = (await call(`${m.endpoint}/v1/functions/ok`, { method: 'PUT', token: m.token, body: hello(1) })).body.url;
    const bad = (
      await call(`${m.endpoint}/v1/functions/bad`, { method: 'PUT', token: m.token, body: "export default { fetch() { throw new Error('boom'); } };" })
    ).body.url;
    for (let i = 0; i < 3; i++) expect((await call(ok)).status).toBe(200);
    expect((await call(bad)).status).toBe(500);
    const report = await eventually(
      async () => {
        await plane.flush();
        return (await stack.http.get('/v1/serverless/functions/usage', { token: m.key })).body;
      },
      (u) => u.invocations === 4,
      15_000,
    );
    expect(report).toMatchObject({ primitive: 'functions', invocations: 4, errors: 1, included: { errors: null } });
    expect(report.execution_ms).toBeGreaterThanOrEqual(0);
  });

  it('a rotated token keeps the functions serving; another tenant cannot touch them; a deleted one is 404 within 5 s', async () => {
    const url = `${base}/functions/run/${t.handle}/hello`;
    const rotated = await stack.http.post('/v1/serverless/functions/keys/rotate', { token: t.key, body: {} });
    expect(rotated.body.token).toMatch(/^fnt_/);
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await call(url)).status).toBe(200);
    expect((await call(fn('hello'), { method: 'DELETE', token: t.token })).status).toBe(401);
    t.token = rotated.body.token;
    const other = await newTenant(stack, base, 'functions');
    expect((await call(`${other.endpoint}/v1/functions/hello`, { method: 'DELETE', token: other.token })).status).toBe(404);
    expect((await call(url)).status).toBe(200);
    expect((await call(fn('hello'), { method: 'DELETE', token: t.token })).status).toBe(204);
    expect(
      await eventually(
        async () => (await call(url)).status,
        (s) => s === 404,
        5_000,
      ),
    ).toBe(404);
    expect((await call(`${base}/functions/run/${t.handle}/never`)).status).toBe(404);
    expect((await call(`${base}/functions/run/nosuchtenant/hello`)).status).toBe(404);
  });

  it('on a hard-capped plan at quota, invocations answer 429', async () => {
    const free = await newTenant(stack, base, 'functions', { plan: 'serverless-functions-free' });
    const url = (await call(`${free.endpoint}/v1/functions/f`, { method: 'PUT', token: free.token, body: hello(1) })).body.url;
    expect((await call(url)).status).toBe(200);
    await stack
      .db('serverless_usage_days')
      .insert({ service_id: free.serviceId, day: new Date().toISOString().slice(0, 10), invocations: 10_000 })
      .onConflict(['service_id', 'day'])
      .merge();
    await plane.flush();
    await new Promise((r) => setTimeout(r, 250));
    const refused = await call(url);
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('quota_exceeded');
  });
});
