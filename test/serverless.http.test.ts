import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServerlessDataPlane } from '../dataplane/serverless/server';
import { PostgresKvStore } from '../providers/simulator/kv.simulator';
import { SqliteEngine } from '../providers/sqlite/sqlite.engine';
import { startStack, type Stack } from './helpers/stack';
import { call, eventually, newTenant, type TestTenant, testPlane } from './serverless.support';

/**
 * Serverless kv and db end to end: the control plane's tenants, tokens and usage, and the data
 * planes (dataplane/serverless/server.ts, in the test's process) over the kv fallback store
 * (PostgreSQL) and real SQLite files. Redis and workerd are the real tier's
 * (test/serverless.real.test.ts); cron has test/serverless.cron.test.ts.
 */
let stack: Stack;
let plane: ServerlessDataPlane;
let base: string;
let dbRoot: string;
let kv: TestTenant;
let sql: TestTenant;

const usage = async (t: TestTenant, p: string) => {
  await plane.flush();
  return (await stack.http.get(`/v1/serverless/${p}/usage`, { token: t.key })).body;
};
const kvKey = (t: TestTenant, ns: string, key: string) => `${t.endpoint}/v1/ns/${ns}/keys/${key}`;
const query = (t: TestTenant, ns: string, body: object) => call(`${t.endpoint}/v1/ns/${ns}/query`, { method: 'POST', token: t.token, body });

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  dbRoot = await mkdtemp(path.join(tmpdir(), 'serverless-db-'));
  plane = testPlane(stack, {
    kv: new PostgresKvStore(stack.db),
    sql: new SqliteEngine({ rootDir: dbRoot, workers: 1, queryTimeoutMs: 2_000 }),
    flushMs: 200,
  });
  base = await plane.listen(0);
  kv = await newTenant(stack, base, 'kv');
  sql = await newTenant(stack, base, 'db');
}, 60_000);

afterAll(async () => {
  await plane?.close();
  await stack?.close();
  if (dbRoot) await rm(dbRoot, { recursive: true, force: true });
});

describe('serverless tenants on the control plane', () => {
  it('each primitive is its own tenant: 404 where the account has none, and never another account’s', async () => {
    const summary = await stack.http.get('/v1/serverless/kv', { token: kv.key });
    expect(summary.status, summary.text).toBe(200);
    expect(summary.body).toMatchObject({ object: 'serverless_kv', plan: 'serverless-kv', status: 'active', api_endpoint: `${base}/kv` });
    expect(summary.body).not.toHaveProperty('namespaces');
    for (const p of ['cron', 'db', 'functions']) expect((await stack.http.get(`/v1/serverless/${p}`, { token: kv.key })).status).toBe(404);
    expect((await stack.http.get('/v1/serverless/kv/usage', { token: sql.key })).status).toBe(404);
    expect((await stack.http.post('/v1/serverless/kv/keys', { token: sql.key })).status).toBe(404);
  });

  it('kv tokens: several live at once; a rotation with grace keeps them all until previous_valid_until, one with 0 ends them within a second', async () => {
    const a = await stack.http.post('/v1/serverless/kv/keys', { token: kv.key });
    expect(a.status, a.text).toBe(201);
    expect(a.body).toMatchObject({ object: 'serverless_token', previous_valid_until: null });
    expect(a.body.token).toMatch(/^kvt_[A-Za-z0-9]{40}$/);
    expect(a.headers.get('cache-control')).toContain('no-store');
    const url = kvKey(kv, 'tokens', 'k');
    for (const t of [kv.token, a.body.token]) expect((await call(url, { method: 'PUT', token: t, body: 'v' })).status).toBe(204);
    const graced = await stack.http.post('/v1/serverless/kv/keys/rotate', { token: kv.key, body: { grace_seconds: 2 } });
    expect(graced.status, graced.text).toBe(200);
    expect(Date.parse(graced.body.previous_valid_until) - Date.now()).toBeGreaterThan(1_000);
    for (const t of [kv.token, a.body.token, graced.body.token]) expect((await call(url, { token: t })).status).toBe(200);
    const ended = await eventually(
      async () => (await call(url, { token: a.body.token })).status,
      (s) => s === 401,
      6_000,
    );
    expect(ended).toBe(401);
    const hard = await stack.http.post('/v1/serverless/kv/keys/rotate', { token: kv.key, body: { grace_seconds: 0 } });
    expect(hard.body.previous_valid_until).toBeNull();
    await new Promise((r) => setTimeout(r, 1_000));
    const refused = await call(url, { token: graced.body.token });
    expect(refused.status).toBe(401);
    expect(refused.body.error).toMatchObject({ type: 'authentication_error', code: 'invalid_token' });
    expect(refused.body.error.request_id).toBe(refused.headers.get('x-request-id'));
    kv.token = hard.body.token;
    expect((await call(url, { token: kv.token })).status).toBe(200);
    // The data plane's tokens are not /v1 credentials, and /v1 keys are not data-plane tokens.
    expect((await stack.http.get('/v1/serverless/kv', { token: kv.token })).body.error.code).toBe('wrong_credential_type');
    expect((await call(url, { token: kv.key })).body.error.code).toBe('invalid_token');
    expect((await call(url, { token: null })).body.error.code).toBe('authentication_required');
    expect((await call(url, { token: sql.token })).body.error.code).toBe('invalid_token');
  });

  it('rejects bad grace_seconds', async () => {
    for (const grace_seconds of [-1, 604_801, 1.5, 'soon']) {
      const res = await stack.http.post('/v1/serverless/db/keys/rotate', { token: sql.key, body: { grace_seconds } });
      expect(res.status).toBe(400);
      expect(res.body.error.param).toBe('grace_seconds');
    }
  });
});

describe('the kv data plane', () => {
  it('PUT, GET and DELETE raw bytes under a percent-encoded binary key; misses are 404; the answers carry X-Request-Id', async () => {
    const value = Buffer.from([0, 1, 2, 250, 255]);
    const url = kvKey(kv, 'app', '%00%FF%2Fslash%20key');
    const put = await call(url, { method: 'PUT', token: kv.token, body: value });
    expect(put.status, put.text).toBe(204);
    expect(put.headers.get('x-request-id')).toMatch(/^req_[0-9A-Z]{26}$/);
    const got = await call(url, { token: kv.token });
    expect(got.status).toBe(200);
    expect(got.raw.equals(value)).toBe(true);
    expect(got.headers.get('content-type')).toBe('application/octet-stream');
    expect((await call(kvKey(kv, 'other', '%00%FF%2Fslash%20key'), { token: kv.token })).status).toBe(404);
    expect((await call(url, { method: 'DELETE', token: kv.token })).status).toBe(204);
    expect((await call(url, { method: 'DELETE', token: kv.token })).status).toBe(204);
    const miss = await call(url, { token: kv.token });
    expect(miss.status).toBe(404);
    expect(miss.body.error).toMatchObject({ code: 'not_found', request_id: miss.headers.get('x-request-id') });
  });

  it('refuses bad names, keys and values with the spec’s codes', async () => {
    expect((await call(kvKey(kv, 'Bad_NS', 'k'), { token: kv.token })).body.error).toMatchObject({ code: 'validation_failed', param: 'ns' });
    expect((await call(kvKey(kv, 'app', 'x'.repeat(513)), { token: kv.token })).body.error).toMatchObject({ code: 'validation_failed', param: 'key' });
    expect((await call(kvKey(kv, 'app', '%zz'), { token: kv.token })).body.error).toMatchObject({ param: 'key' });
    expect((await call(`${kv.endpoint}/v1/ns/app/keys/a/b`, { token: kv.token })).status).toBe(404);
    const limit = (await stack.http.get('/v1/serverless/kv', { token: kv.key })).body.limits.max_value_bytes;
    const big = await call(kvKey(kv, 'app', 'big'), { method: 'PUT', token: kv.token, body: Buffer.alloc(limit + 1) });
    expect(big.status).toBe(413);
    expect((await call(kvKey(kv, 'app', 'k'), { method: 'POST', token: kv.token, body: 'x' })).status).toBe(405);
  });

  it("one tenant's token never reaches another tenant's keys", async () => {
    const mine = await call(kvKey(kv, 'shared', 'secret'), { method: 'PUT', token: kv.token, body: 'mine' });
    expect(mine.status, mine.text).toBe(204);
    const other = await newTenant(stack, base, 'kv');
    expect((await call(kvKey(other, 'shared', 'secret'), { token: other.token })).status).toBe(404);
    expect((await call(kvKey(other, 'shared', 'secret'), { method: 'DELETE', token: other.token })).status).toBe(204);
    expect((await call(kvKey(kv, 'shared', 'secret'), { token: kv.token })).text).toBe('mine');
  });

  it('meters every GET (misses too), every PUT and DELETE, and the storage peak, per UTC day', async () => {
    const t = await newTenant(stack, base, 'kv');
    await call(kvKey(t, 'm', 'a'), { method: 'PUT', token: t.token, body: 'x'.repeat(100) });
    await call(kvKey(t, 'm', 'b'), { method: 'PUT', token: t.token, body: 'y'.repeat(50) });
    await call(kvKey(t, 'm', 'a'), { token: t.token });
    await call(kvKey(t, 'm', 'nope'), { token: t.token });
    await call(kvKey(t, 'm', 'a'), { method: 'DELETE', token: t.token });
    const report = await eventually(
      () => usage(t, 'kv'),
      (u) => u.writes === 3,
    );
    // Stored bytes: len(ns) + 1 + len(key) + len(value) per entry; the peak was both entries.
    expect(report).toMatchObject({ object: 'serverless_usage', primitive: 'kv', reads: 2, writes: 3, storage_bytes_peak: 2 + 1 + 100 + (2 + 1 + 50) });
    expect(report.included).toMatchObject({ reads: 1_000_000, writes: 100_000, hard_cap: false });
    expect(report).toMatchObject({ overage: { reads: 0, writes: 0, storage_bytes_peak: 0 }, total_usd: 0 });
    expect(report.daily.at(-1)).toMatchObject({ date: new Date().toISOString().slice(0, 10), reads: 2, writes: 3 });
    expect(report.daily[0].date).toBe(report.period_start);
    const summary = (await stack.http.get('/v1/serverless/kv', { token: t.key })).body;
    expect(summary.month_usage).toMatchObject({ reads: 2, writes: 3 });
  });

  it('prices the overage of an uncapped plan; a hard-capped plan refuses writes at quota and bills nothing', async () => {
    const paid = await newTenant(stack, base, 'kv');
    const today = new Date().toISOString().slice(0, 10);
    await stack.db('serverless_usage_days').insert({ service_id: paid.serviceId, day: today, reads: 3_000_000, writes: 100_000 });
    expect(await usage(paid, 'kv')).toMatchObject({ overage: { reads: 2_000_000, writes: 0 }, total_usd: 1 });

    const free = await newTenant(stack, base, 'kv', { plan: 'serverless-kv-free' });
    await stack.db('serverless_usage_days').insert({ service_id: free.serviceId, day: today, writes: 999 });
    expect((await call(kvKey(free, 'q', 'last'), { method: 'PUT', token: free.token, body: 'ok' })).status).toBe(204);
    await plane.flush();
    const refused = await call(kvKey(free, 'q', 'more'), { method: 'PUT', token: free.token, body: 'no' });
    expect(refused.status).toBe(429);
    expect(refused.body.error.code).toBe('quota_exceeded');
    expect((await call(kvKey(free, 'q', 'last'), { method: 'DELETE', token: free.token })).status).toBe(429);
    expect((await call(kvKey(free, 'q', 'last'), { token: free.token })).text).toBe('ok');
    expect(await usage(free, 'kv')).toMatchObject({ writes: 1_000, included: { writes: 1_000, hard_cap: true }, overage: { writes: 0 }, total_usd: 0 });
  });
});

describe('the db data plane', () => {
  it('namespaces: PUT makes one (201, then 200), listed by GET /v1/serverless/db; DELETE removes it and its file', async () => {
    const made = await call(`${sql.endpoint}/v1/ns/shop`, { method: 'PUT', token: sql.token });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ object: 'db_namespace', name: 'shop' });
    expect((await call(`${sql.endpoint}/v1/ns/shop`, { method: 'PUT', token: sql.token })).status).toBe(200);
    expect((await call(`${sql.endpoint}/v1/ns/temp`, { method: 'PUT', token: sql.token })).status).toBe(201);
    expect((await stack.http.get('/v1/serverless/db', { token: sql.key })).body.namespaces).toEqual(['shop', 'temp']);
    expect((await call(`${sql.endpoint}/v1/ns/temp`, { method: 'DELETE', token: sql.token })).status).toBe(204);
    expect((await call(`${sql.endpoint}/v1/ns/temp`, { method: 'DELETE', token: sql.token })).status).toBe(404);
    expect((await query(sql, 'temp', { sql: 'select 1' })).status).toBe(404);
    expect(await readdir(path.join(dbRoot, sql.handle))).not.toContain('temp.db');
    expect((await call(`${sql.endpoint}/v1/ns/Not_Valid`, { method: 'PUT', token: sql.token })).body.error.param).toBe('ns');
  });

  it('runs parameterised statements with D1’s answer shape, scripts as one transaction, and meters rows read and written', async () => {
    const t = await newTenant(stack, base, 'db');
    await call(`${t.endpoint}/v1/ns/app`, { method: 'PUT', token: t.token });
    const script = await query(t, 'app', {
      sql: "create table items(id integer primary key, name text, qty integer); insert into items(name, qty) values ('a', 1), ('b', 2);",
    });
    expect(script.status, script.text).toBe(200);
    expect(script.body).toEqual({ results: [] });
    const insert = await query(t, 'app', { sql: 'insert into items(name, qty) values (?, ?)', params: ['c; drop table items', 3] });
    expect(insert.body.results).toEqual([{ columns: [], rows: [], changes: 1, last_insert_rowid: 3 }]);
    const select = await query(t, 'app', { sql: 'select name, qty from items where qty >= :min order by id', params: { min: 2 } });
    expect(select.body.results[0]).toMatchObject({
      columns: ['name', 'qty'],
      rows: [
        { name: 'b', qty: 2 },
        { name: 'c; drop table items', qty: 3 },
      ],
      changes: 0,
    });
    const update = await query(t, 'app', { sql: 'update items set qty = qty + 1' });
    expect(update.body.results[0].changes).toBe(3);
    const report = await eventually(
      () => usage(t, 'db'),
      (u) => u.rows_written === 6,
    );
    expect(report).toMatchObject({ primitive: 'db', rows_read: 2, rows_written: 2 + 1 + 3 });
    expect(report.storage_bytes_peak).toBeGreaterThan(0);
  });

  it('answers the spec’s errors: sql_error with the engine’s message, a script with params, an absent namespace', async () => {
    await call(`${sql.endpoint}/v1/ns/errs`, { method: 'PUT', token: sql.token });
    const syntax = await query(sql, 'errs', { sql: 'selec 1' });
    expect(syntax.status).toBe(400);
    expect(syntax.body.error.code).toBe('sql_error');
    expect(syntax.body.error.message).toMatch(/syntax error/);
    const scripted = await query(sql, 'errs', { sql: 'create table t(a); insert into t values (?);', params: [1] });
    expect(scripted.body.error).toMatchObject({ code: 'validation_failed', param: 'params' });
    expect((await query(sql, 'errs', { sql: 'select * from t' })).body.error.code).toBe('sql_error');
    expect((await query(sql, 'absent', { sql: 'select 1' })).body.error.code).toBe('not_found');
    expect((await query(sql, 'errs', {})).body.error.param).toBe('sql');
    const notJson = await call(`${sql.endpoint}/v1/ns/errs/query`, { method: 'POST', token: sql.token, body: '{' });
    expect(notJson.body.error.code).toBe('invalid_json');
  });

  it("a tenant's SQL cannot reach another tenant's database, by token or by ATTACH", async () => {
    await call(`${sql.endpoint}/v1/ns/private`, { method: 'PUT', token: sql.token });
    await query(sql, 'private', { sql: "create table secret(v text); insert into secret values ('s3cret');" });
    const other = await newTenant(stack, base, 'db');
    expect((await query(other, 'private', { sql: 'select * from secret' })).status).toBe(404);
    await call(`${other.endpoint}/v1/ns/mine`, { method: 'PUT', token: other.token });
    const file = path.join(dbRoot, sql.handle, 'private.db');
    const attach = await query(other, 'mine', { sql: `attach database '${file}' as x` });
    expect(attach.body.error.code).toBe('sql_error');
    const vacuum = await query(other, 'mine', { sql: `vacuum into '${path.join(dbRoot, sql.handle, 'stolen.db')}'` });
    expect(vacuum.body.error.code).toBe('sql_error');
    expect(await readdir(path.join(dbRoot, sql.handle))).not.toContain('stolen.db');
  });

  it('on a hard-capped plan at quota, statements that write are refused and reads go on', async () => {
    const free = await newTenant(stack, base, 'db', { plan: 'serverless-db-free' });
    await call(`${free.endpoint}/v1/ns/q`, { method: 'PUT', token: free.token });
    await query(free, 'q', { sql: 'create table t(a); insert into t values (1);' });
    await stack
      .db('serverless_usage_days')
      .insert({ service_id: free.serviceId, day: new Date().toISOString().slice(0, 10), rows_written: 10_000 })
      .onConflict(['service_id', 'day'])
      .merge();
    await plane.flush();
    await new Promise((r) => setTimeout(r, 250));
    const write = await query(free, 'q', { sql: 'insert into t values (2)' });
    expect(write.status, write.text).toBe(429);
    expect(write.body.error.code).toBe('quota_exceeded');
    expect((await query(free, 'q', { sql: 'select count(*) as n from t' })).body.results[0].rows).toEqual([{ n: 1 }]);
    expect((await call(`${free.endpoint}/v1/ns/more`, { method: 'PUT', token: free.token })).status).toBe(429);
  });
});

describe('the service’s status reaches the data planes', () => {
  it('suspended: 403 service_suspended; terminated: 401 invalid_token, and the data is removed', async () => {
    const t = await newTenant(stack, base, 'kv');
    const d = await newTenant(stack, base, 'db', { accountId: t.accountId, key: t.key });
    await call(kvKey(t, 'n', 'k'), { method: 'PUT', token: t.token, body: 'v' });
    await call(`${d.endpoint}/v1/ns/gone`, { method: 'PUT', token: d.token });
    await stack.db('services').whereIn('id', [t.serviceId, d.serviceId]).update({ status: 'suspended' });
    const suspended = await eventually(
      async () => (await call(kvKey(t, 'n', 'k'), { token: t.token })).body,
      (b) => b?.error?.code === 'service_suspended',
      5_000,
    );
    expect(suspended.error).toMatchObject({ type: 'authorization_error', code: 'service_suspended' });
    await stack.db('services').whereIn('id', [t.serviceId, d.serviceId]).update({ status: 'terminated' });
    const ended = await eventually(
      async () => (await call(kvKey(t, 'n', 'k'), { token: t.token })).body,
      (b) => b?.error?.code === 'invalid_token',
      5_000,
    );
    expect(ended.error.code).toBe('invalid_token');
    await plane.reap();
    expect(await stack.db('sim_kv_entries').where({ tenant: t.handle })).toEqual([]);
    expect(await readdir(dbRoot)).not.toContain(d.handle);
    expect((await stack.db('serverless_tenants').whereIn('service_id', [t.serviceId, d.serviceId])).every((r) => r.dropped_at !== null)).toBe(true);
  });
});

describe('usage metering', () => {
  it('keeps writing after a flush that held only fractions of a unit (execution time)', async () => {
    const { UsageMeter } = await import('../dataplane/serverless/meter');
    const t = await newTenant(stack, base, 'functions');
    const meter = new UsageMeter(stack.db, 60_000);
    meter.add(t.serviceId, { invocations: 1, execution_ms: 0.4 });
    await meter.flush();
    // Only 0.4 ms is pending now: this flush writes nothing (and awaits nothing).
    await meter.flush();
    meter.add(t.serviceId, { invocations: 2, execution_ms: 0.7 });
    await meter.flush();
    const row = await stack.db('serverless_usage_days').where({ service_id: t.serviceId }).first();
    expect({ invocations: Number(row.invocations), execution_ms: Number(row.execution_ms) }).toEqual({ invocations: 3, execution_ms: 1 });
    await meter.close();
  });
});
