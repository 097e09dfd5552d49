import { createHmac } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServerlessActivities } from '../activities/serverless/activities';
import type { ServerlessDataPlane } from '../dataplane/serverless/server';
import { startStack, type Stack } from './helpers/stack';
import { call, eventually, newTenant, type TestTenant, testPlane } from './serverless.support';

/**
 * Serverless cron on the Temporal dev server: schedules are Temporal Schedules whose firings POST
 * to a loopback receiver, signed; they keep firing across a worker restart and a token rotation,
 * stop at deletion, and a free plan skips firings past its quota.
 */
let stack: Stack;
let plane: ServerlessDataPlane;
let base: string;
let receiver: http.Server;
let receiverUrl: string;
let tenant: TestTenant;
const received: Array<{ at: number; path: string; headers: http.IncomingHttpHeaders; body: string }> = [];

const schedules = () => `${tenant.endpoint}/v1/schedules`;
const arrivals = (path: string) => received.filter((r) => r.path === path);

beforeAll(async () => {
  stack = await startStack({ temporal: 'dev', env: { CRON_MIN_INTERVAL: '1', ALLOW_INSECURE_TARGETS: '1' } });
  receiver = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      received.push({ at: Date.now(), path: req.url ?? '/', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(req.url === '/fail' ? 500 : 200).end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  plane = testPlane(stack);
  base = await plane.listen(0);
  tenant = await newTenant(stack, base, 'cron');
}, 120_000);

afterAll(async () => {
  await plane?.close();
  await new Promise((r) => receiver?.close(r));
  await stack?.close();
});

describe('serverless cron', () => {
  it('refuses bad schedules with the field, and requests without a live cron token', async () => {
    const bad = async (body: object) => (await call(schedules(), { method: 'POST', token: tenant.token, body })).body.error;
    expect(await bad({ destination: `${receiverUrl}/x`, interval_seconds: 0 })).toMatchObject({ code: 'validation_failed', param: 'interval_seconds' });
    expect(await bad({ destination: `${receiverUrl}/x`, cron: '61 * * * *' })).toMatchObject({ code: 'validation_failed', param: 'cron' });
    expect(await bad({ destination: `${receiverUrl}/x`, cron: '* * * *' })).toMatchObject({ param: 'cron' });
    expect(await bad({ destination: `${receiverUrl}/x`, cron: '* * * * *', interval_seconds: 5 })).toMatchObject({ param: 'cron' });
    expect(await bad({ destination: 'http://10.0.0.1/hook', interval_seconds: 5 })).toMatchObject({ param: 'destination' });
    expect(await bad({ destination: 'ftp://example.com/x', interval_seconds: 5 })).toMatchObject({ param: 'destination' });
    expect(await bad({ destination: `${receiverUrl}/x`, interval_seconds: 5, body: { not: 'a string' } })).toMatchObject({ param: 'body' });
    expect((await call(schedules(), { token: null })).body.error.code).toBe('authentication_required');
    expect((await call(schedules(), { token: 'kvt_' + 'a'.repeat(40) })).body.error.code).toBe('invalid_token');
    expect((await call(schedules(), { token: 'crt_' + 'a'.repeat(40) })).status).toBe(401);
  });

  it('fires at its interval, POSTing the body byte for byte, signed with the schedule secret; listed and counted', async () => {
    const body = '{"job":"nightly","é":1}';
    const made = await call(schedules(), { method: 'POST', token: tenant.token, body: { destination: `${receiverUrl}/signed`, interval_seconds: 1, body } });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ object: 'cron_schedule', destination: `${receiverUrl}/signed`, cron: null, interval_seconds: 1, body });
    expect(made.body.secret).toMatch(/^cs_[A-Za-z0-9]{40}$/);
    expect(Date.parse(made.body.next_run_at)).toBeGreaterThan(Date.now() - 2_000);
    const runs = await eventually(
      async () => arrivals('/signed'),
      (r) => r.length >= 2,
      10_000,
    );
    expect(runs.length).toBeGreaterThanOrEqual(2);
    const first = runs[0];
    expect(first.body).toBe(body);
    expect(first.headers['cloud-schedule']).toBe(made.body.id);
    const [, t, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(String(first.headers['cloud-signature']))!;
    expect(v1).toBe(createHmac('sha256', made.body.secret).update(`${t}.${body}`).digest('hex'));

    const one = await call(`${schedules()}/${made.body.id}`, { token: tenant.token });
    expect(one.status).toBe(200);
    expect(one.body.secret).toBeUndefined();
    const list = await call(schedules(), { token: tenant.token });
    expect(list.body).toMatchObject({ object: 'list', has_more: false });
    expect(list.body.data.map((s: { id: string }) => s.id)).toContain(made.body.id);
    const summary = await stack.http.get('/v1/serverless/cron', { token: tenant.key });
    expect(summary.body).toMatchObject({ object: 'serverless_cron', schedule_count: 1, limits: { min_interval_seconds: 1 } });
    const usage = await eventually(
      async () => (await stack.http.get('/v1/serverless/cron/usage', { token: tenant.key })).body,
      (u) => u.executions >= runs.length,
    );
    expect(usage).toMatchObject({ object: 'serverless_usage', primitive: 'cron', skipped: 0, included: { skipped: null, hard_cap: false } });
    expect(usage.daily.at(-1).executions).toBe(usage.executions);
  });

  it('keeps firing across a worker restart and a key rotation; the old token stops within a second', async () => {
    const made = await call(schedules(), { method: 'POST', token: tenant.token, body: { destination: `${receiverUrl}/steady`, interval_seconds: 1 } });
    expect(made.status, made.text).toBe(201);
    await eventually(
      async () => arrivals('/steady').length,
      (n) => n >= 1,
      10_000,
    );
    await stack.stopWorker();
    await new Promise((r) => setTimeout(r, 1_500));
    await stack.startWorker();
    const afterRestart = arrivals('/steady').length;
    expect(
      await eventually(
        async () => arrivals('/steady').length,
        (n) => n >= afterRestart + 2,
        10_000,
      ),
    ).toBeGreaterThanOrEqual(afterRestart + 2);

    const old = tenant.token;
    const rotated = await stack.http.post('/v1/serverless/cron/keys/rotate', { token: tenant.key, body: { grace_seconds: 0 } });
    expect(rotated.status, rotated.text).toBe(200);
    expect(rotated.body).toMatchObject({ object: 'serverless_token', previous_valid_until: null });
    expect(rotated.body.token).toMatch(/^crt_[A-Za-z0-9]{40}$/);
    expect(rotated.headers.get('cache-control')).toContain('no-store');
    tenant.token = rotated.body.token;
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await call(schedules(), { token: old })).body.error.code).toBe('invalid_token');
    expect((await call(schedules(), { token: tenant.token })).status).toBe(200);
    const afterRotate = arrivals('/steady').length;
    expect(
      await eventually(
        async () => arrivals('/steady').length,
        (n) => n >= afterRotate + 2,
        10_000,
      ),
    ).toBeGreaterThanOrEqual(afterRotate + 2);

    // Deleted: no run starts more than 2 s after the answer.
    expect((await call(`${schedules()}/${made.body.id}`, { method: 'DELETE', token: tenant.token })).status).toBe(204);
    const deletedAt = Date.now();
    await new Promise((r) => setTimeout(r, 3_500));
    expect(arrivals('/steady').filter((r) => r.at > deletedAt + 2_000)).toEqual([]);
    expect((await call(`${schedules()}/${made.body.id}`, { token: tenant.token })).status).toBe(404);
    await expect(stack.api.deps.temporal.client.schedule.getHandle(`serverless-cron:${made.body.id}`).describe()).rejects.toThrow();
  });

  it('rotation with grace: both tokens work until previous_valid_until', async () => {
    const before = tenant.token;
    const graced = await stack.http.post('/v1/serverless/cron/keys/rotate', { token: tenant.key, body: { grace_seconds: 2 } });
    expect(Date.parse(graced.body.previous_valid_until) - Date.now()).toBeGreaterThan(1_000);
    expect((await call(schedules(), { token: before })).status).toBe(200);
    expect((await call(schedules(), { token: graced.body.token })).status).toBe(200);
    tenant.token = graced.body.token;
    const stopped = await eventually(
      async () => (await call(schedules(), { token: before })).status,
      (s) => s === 401,
      6_000,
    );
    expect(stopped).toBe(401);
    expect((await call(schedules(), { token: tenant.token })).status).toBe(200);
  });

  it('on the free plan, firings past the included executions are skipped and recorded, not sent', async () => {
    const free = await newTenant(stack, base, 'cron', { plan: 'serverless-cron-free' });
    const today = new Date().toISOString().slice(0, 10);
    await stack.db('serverless_usage_days').insert({ service_id: free.serviceId, day: today, executions: 99 });
    const made = await call(`${free.endpoint}/v1/schedules`, {
      method: 'POST',
      token: free.token,
      body: { destination: `${receiverUrl}/free`, interval_seconds: 1 },
    });
    expect(made.status, made.text).toBe(201);
    const usage = await eventually(
      async () => (await stack.http.get('/v1/serverless/cron/usage', { token: free.key })).body,
      (u) => u.skipped >= 2,
      10_000,
    );
    expect(usage).toMatchObject({ executions: 100, included: { executions: 100, hard_cap: true }, overage: { executions: 0 }, total_usd: 0 });
    expect(arrivals('/free')).toHaveLength(1);
    const runs = await stack.db('serverless_cron_runs').where({ schedule_id: made.body.id }).orderBy('scheduled_at');
    expect(runs.map((r) => r.outcome)).toContain('skipped');
    await call(`${free.endpoint}/v1/schedules/${made.body.id}`, { method: 'DELETE', token: free.token });
  });

  it('a firing POSTs at most once, whatever the retries: a retried run answers its outcome, one cut short is not repeated', async () => {
    const made = await call(schedules(), { method: 'POST', token: tenant.token, body: { destination: `${receiverUrl}/once`, cron: '0 0 1 1 *', body: 'x' } });
    expect(made.status, made.text).toBe(201);
    const { fireCronSchedule } = createServerlessActivities({ db: stack.db, keyring: stack.api.deps.keyring, config: stack.config });
    const input = { scheduleId: made.body.id, runKey: `serverless-cron-run:${made.body.id}-manual`, scheduledAt: new Date().toISOString() };
    expect(await fireCronSchedule(input)).toBe('delivered');
    expect(await fireCronSchedule(input)).toBe('delivered');
    expect(arrivals('/once')).toHaveLength(1);
    // A worker lost between the claim and the outcome: the retry does not POST again.
    await stack
      .db('serverless_cron_runs')
      .insert({ run_key: 'cut-short', schedule_id: made.body.id, service_id: tenant.serviceId, scheduled_at: new Date(), outcome: 'sending' });
    expect(await fireCronSchedule({ ...input, runKey: 'cut-short' })).toBe('failed');
    expect(arrivals('/once')).toHaveLength(1);
    expect(await stack.db('serverless_cron_runs').where({ run_key: 'cut-short' }).first()).toMatchObject({
      outcome: 'failed',
      error: expect.stringContaining('interrupted'),
    });
    // Deleted: a firing that starts afterwards sends nothing and counts nothing.
    await call(`${schedules()}/${made.body.id}`, { method: 'DELETE', token: tenant.token });
    expect(await fireCronSchedule({ ...input, runKey: 'after-delete' })).toBe('gone');
    expect(arrivals('/once')).toHaveLength(1);
  });

  it('another tenant cannot see or delete the schedules', async () => {
    const mine = await call(schedules(), { method: 'POST', token: tenant.token, body: { destination: `${receiverUrl}/mine`, cron: '0 3 * * *' } });
    expect(mine.status, mine.text).toBe(201);
    const other = await newTenant(stack, base, 'cron');
    expect((await call(`${other.endpoint}/v1/schedules/${mine.body.id}`, { token: other.token })).status).toBe(404);
    expect((await call(`${other.endpoint}/v1/schedules/${mine.body.id}`, { method: 'DELETE', token: other.token })).status).toBe(404);
    expect((await call(`${other.endpoint}/v1/schedules`, { token: other.token })).body.data).toEqual([]);
    expect((await call(`${schedules()}/${mine.body.id}`, { token: tenant.token })).status).toBe(200);
  });
});
