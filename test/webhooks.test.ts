import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { advanceSignal } from './fixtures/test-operation.workflow';
import { gate, startReceiver, waitFor, type Receiver } from './webhooks.support';
import { verifyWebhook } from '../docs/examples/verify-webhook';
import { newUlidId } from '../common/ids';
import type { Principal } from '../domain/principal';

/**
 * Webhooks end to end on the dev server: every endpoint over HTTP, the outbox dispatcher, delivery
 * workflows POSTing to real loopback receivers, retries (short delays here; the production schedule
 * runs under time skipping in webhooks-schedule.test.ts), redelivery, deletion, worker restarts.
 *
 * Time is the cost here. A workflow timer on the dev server fires about a second after it was set,
 * however short, so the schedule has one real wait (150 ms: attempt 2 comes after a timer) and then
 * none (0 ms: attempts 3 to 6 follow at once); a test that must see that nothing more arrives waits
 * until the account is settled (every event dispatched, no delivery queued) instead of sleeping.
 */
let stack: Stack;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({
    env: { WEBHOOK_RETRY_DELAYS: '150ms,0ms,0ms,0ms,0ms', WEBHOOK_TIMEOUT: '1500ms', WEBHOOK_SWEEP_INTERVAL: '200ms' },
  });
});
afterAll(() => stack?.close());
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

async function receiver(options?: Parameters<typeof startReceiver>[0]): Promise<Receiver> {
  const r = await startReceiver(options);
  receivers.push(r);
  return r;
}

/** A fresh account per test, so that fan-out and quotas of one test never reach another. */
async function tenant(scopes = ['account:read', 'account:write', 'operations:read', 'services:read']) {
  const { accountId } = await createAccount(stack.db);
  const { userId } = await createUser(stack.db, accountId, { isOwner: true });
  const { token } = await createApiKey(stack.db, accountId, userId, { scopes });
  const principal: Principal = await stack.api.deps.credentials.authenticate(`Bearer ${token}`);
  const api = {
    get: (path: string) => stack.http.get(path, { token }),
    post: (path: string, body?: unknown, headers?: Record<string, string>) => stack.http.post(path, { token, body, headers }),
    patch: (path: string, body: unknown) => stack.http.patch(path, { token, body }),
    delete: (path: string) => stack.http.delete(path, { token }),
  };
  const createWebhook = async (r: Receiver, events: string[] = ['*']) => {
    const res = await api.post('/v1/webhooks', { url: r.url, events });
    expect(res.status, res.text).toBe(201);
    r.secret = res.body.secret;
    return res.body as { id: string; secret: string; url: string };
  };
  const deliveries = async (webhookId: string) => (await api.get(`/v1/webhooks/${webhookId}/deliveries?limit=100`)).body.data as any[];
  return { accountId, userId, token, principal, api, createWebhook, deliveries };
}

const suspend = (serviceId: string) => stack.http.post(`/_dev/services/${serviceId}/suspend`);

/**
 * Waits until an account's webhooks have nothing more on the way: every event of the account
 * dispatched and none of its deliveries queued (a delivery is marked delivered or failed only once
 * its receiver answered). What a receiver has then is all it will get.
 */
async function settled(accountId: number): Promise<void> {
  const pending = async () => {
    const [events, deliveries] = await Promise.all([
      stack.db('events').where({ account_id: accountId }).whereNull('dispatched_at').count({ n: '*' }).first(),
      stack.db('webhook_deliveries').where({ account_id: accountId, status: 'queued' }).count({ n: '*' }).first(),
    ]);
    return Number(events!.n) + Number(deliveries!.n);
  };
  expect(await waitFor(pending, (n) => n === 0)).toBe(0);
}

describe('webhook endpoints', () => {
  it('create, get, list, update, rotate, delete: the secret only on create and rotate', async () => {
    const t = await tenant();
    const r = await receiver();
    const created = await t.api.post('/v1/webhooks', { url: r.url, events: ['service.suspended', 'operation.completed', 'service.suspended'] });
    expect(created.status).toBe(201);
    expect(created.headers.get('location')).toBe(`/v1/webhooks/${created.body.id}`);
    expect(created.headers.get('cache-control')).toBe('no-store');
    expect(created.body).toMatchObject({
      object: 'webhook',
      url: r.url,
      events: ['service.suspended', 'operation.completed'],
      enabled: true,
      consecutive_failures: 0,
    });
    expect(created.body.id).toMatch(/^whk_\d+$/);
    expect(created.body.secret).toMatch(/^whsec_[0-9A-Za-z]{40}$/);
    const secret: string = created.body.secret;

    // Sealed at rest, never shown again.
    const stored = await stack
      .db('webhooks')
      .where({ id: Number(created.body.id.slice(4)) })
      .first();
    expect(stored.secret_sealed).not.toContain(secret);
    expect(stack.api.deps.keyring.decrypt('webhook-secret', stored.secret_sealed)).toBe(secret);
    const got = await t.api.get(`/v1/webhooks/${created.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body).not.toHaveProperty('secret');
    expect(got.text).not.toContain(secret);
    expect((await t.api.get(`/v1/webhooks/${created.body.id.slice(4)}`)).body.id).toBe(created.body.id);
    const list = await t.api.get('/v1/webhooks');
    expect(list.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(list.body.data.map((w: any) => w.id)).toEqual([created.body.id]);
    expect(list.text).not.toContain(secret);

    const patched = await t.api.patch(`/v1/webhooks/${created.body.id}`, { events: ['*'], enabled: false });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ events: ['*'], enabled: false });
    expect(patched.body).not.toHaveProperty('secret');

    const rotated = await t.api.post(`/v1/webhooks/${created.body.id}/rotate-secret`);
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).toMatch(/^whsec_/);
    expect(rotated.body.secret).not.toBe(secret);
    expect(rotated.headers.get('cache-control')).toBe('no-store');

    // Neither secret reaches the audit log.
    await stack.api.deps.audit.flush(); // the audit writer batches its rows
    const audit = JSON.stringify(await stack.db('audit_logs').where({ account_id: t.accountId }));
    expect(audit).not.toContain(secret);
    expect(audit).not.toContain(rotated.body.secret);

    expect((await t.api.delete(`/v1/webhooks/${created.body.id}`)).status).toBe(204);
    expect((await t.api.get(`/v1/webhooks/${created.body.id}`)).status).toBe(404);
    expect((await t.api.delete(`/v1/webhooks/${created.body.id}`)).body.error.code).toBe('not_found');
  });

  it('validates the body: url, events, unknown fields', async () => {
    const t = await tenant();
    const bad = async (body: unknown, param: string) => {
      const res = await t.api.post('/v1/webhooks', body);
      expect(res.status, res.text).toBe(400);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'validation_failed', param });
      expect(res.body.error.request_id).toBe(res.headers.get('x-request-id'));
      return res.body.error;
    };
    await bad({ url: 'https://127.0.0.1/x', events: ['service.teleported'] }, 'events.0');
    await bad({ url: 'https://127.0.0.1/x', events: [] }, 'events');
    await bad({ url: 'https://127.0.0.1/x' }, 'events');
    await bad({ url: 'not a url', events: ['*'] }, 'url');
    await bad({ url: 'ftp://127.0.0.1/x', events: ['*'] }, 'url');
    await bad({ url: 'https://user:pw@127.0.0.1/x', events: ['*'] }, 'url');
    await bad({ url: `https://127.0.0.1/${'x'.repeat(2100)}`, events: ['*'] }, 'url');
    expect(JSON.stringify(await bad({ url: 'https://127.0.0.1/x', events: ['*'], secret: 'mine' }, 'body'))).toContain('secret');
    await bad({ url: 'https://10.1.2.3/hook', events: ['*'] }, 'url');
    const w = await t.api.post('/v1/webhooks', { url: 'https://127.0.0.1/x', events: ['*'] });
    expect(w.status).toBe(201);
    const patch = await t.api.patch(`/v1/webhooks/${w.body.id}`, { url: 'https://192.168.1.10/x' });
    expect(patch.status).toBe(400);
    expect(patch.body.error.param).toBe('url');
    expect((await t.api.patch(`/v1/webhooks/${w.body.id}`, { events: ['nope'] })).body.error.param).toBe('events.0');
    expect((await t.api.patch(`/v1/webhooks/${w.body.id}`, { enabled: 'yes' })).body.error.param).toBe('enabled');
    expect((await t.api.get('/v1/webhooks?limit=0')).body.error.param).toBe('limit');
    expect((await t.api.get(`/v1/webhooks/${w.body.id}/deliveries?status=lost`)).body.error.param).toBe('status');
  });

  it('allows 10 webhooks per account; the 11th is 429 quota_exceeded', async () => {
    const t = await tenant();
    const made = await Promise.all(Array.from({ length: 10 }, (_, i) => t.api.post('/v1/webhooks', { url: `https://127.0.0.1/h${i}`, events: ['*'] })));
    expect(made.map((r) => r.status)).toEqual(Array(10).fill(201));
    const eleventh = await t.api.post('/v1/webhooks', { url: 'https://127.0.0.1/h11', events: ['*'] });
    expect(eleventh.status).toBe(429);
    expect(eleventh.body.error).toMatchObject({ type: 'rate_limit_error', code: 'quota_exceeded' });
    // Pages of the list, newest first.
    const page1 = await t.api.get('/v1/webhooks?limit=4');
    expect(page1.body.data).toHaveLength(4);
    expect(page1.body.has_more).toBe(true);
    const page2 = await t.api.get(`/v1/webhooks?limit=100&cursor=${encodeURIComponent(page1.body.next_cursor)}`);
    const ids = [...page1.body.data, ...page2.body.data].map((w: any) => Number(w.id.slice(4)));
    expect(ids).toHaveLength(10);
    expect([...ids].sort((a, b) => b - a)).toEqual(ids);
    // Room again after a delete.
    await t.api.delete(`/v1/webhooks/${made[0].body.id}`);
    expect((await t.api.post('/v1/webhooks', { url: 'https://127.0.0.1/again', events: ['*'] })).status).toBe(201);
  });

  it('needs account:read to read and account:write to change; other accounts see 404', async () => {
    const owner = await tenant();
    const w = await owner.api.post('/v1/webhooks', { url: 'https://127.0.0.1/x', events: ['*'] });
    const reader = await createApiKey(stack.db, owner.accountId, owner.userId, { scopes: ['account:read'] });
    expect((await stack.http.get(`/v1/webhooks/${w.body.id}`, { token: reader.token })).status).toBe(200);
    const denied = await stack.http.post('/v1/webhooks', { token: reader.token, body: { url: 'https://127.0.0.1/y', events: ['*'] } });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'account:write' });
    const stranger = await tenant();
    for (const path of [`/v1/webhooks/${w.body.id}`, `/v1/webhooks/${w.body.id}/deliveries`]) {
      expect((await stranger.api.get(path)).status).toBe(404);
    }
    expect((await stranger.api.post(`/v1/webhooks/${w.body.id}/ping`)).status).toBe(404);
    expect((await stranger.api.delete(`/v1/webhooks/${w.body.id}`)).status).toBe(404);
    expect((await stranger.api.get('/v1/webhooks')).body.data).toEqual([]);
    expect((await owner.api.get(`/v1/webhooks/${w.body.id}/deliveries/dlv_01JD0000000000000000000000`)).status).toBe(404);
    expect((await owner.api.get(`/v1/webhooks/${w.body.id}/deliveries/garbage`)).status).toBe(404);
  });
});

describe('deliveries', () => {
  it('POSTs the exact stored body, signed, with the Cloud-* headers; the record shows it delivered', async () => {
    const t = await tenant();
    const r = await receiver();
    const hook = await t.createWebhook(r, ['service.suspended']);
    const svc = await createService(stack.db, t.accountId);
    expect((await suspend(svc.id)).status).toBe(200);

    const [got] = await r.waitFor(1);
    expect(got.method).toBe('POST');
    expect(got.path).toBe('/hook');
    expect(got.verification).toMatchObject({ ok: true });
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['cloud-event']).toBe('service.suspended');
    expect(got.headers['cloud-signature']).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/);
    expect(got.headers.host).toBe(`localhost:${r.port}`);
    const envelope = JSON.parse(got.body);
    expect(envelope).toMatchObject({
      object: 'event',
      type: 'service.suspended',
      data: { object: 'service', id: svc.id, status: 'suspended' },
    });
    expect(envelope.id).toMatch(/^evt_[0-9A-Z]{26}$/);
    expect(new Date(envelope.created_at).toISOString()).toBe(envelope.created_at);
    expect(got.headers['cloud-event-id']).toBe(envelope.id);
    const t0 = Number(/t=(\d+)/.exec(got.headers['cloud-signature'] as string)![1]);
    expect(Math.abs(t0 - Date.now() / 1000)).toBeLessThan(30);

    const delivery = await waitFor(
      async () => (await t.api.get(`/v1/webhooks/${hook.id}/deliveries/${got.headers['cloud-delivery']}`)).body,
      (d) => d.status === 'delivered',
    );
    expect(delivery).toMatchObject({
      object: 'webhook_delivery',
      id: got.headers['cloud-delivery'],
      webhook: hook.id,
      event_id: envelope.id,
      event_type: 'service.suspended',
      status: 'delivered',
      attempts: 1,
      last_status: 200,
      last_error: null,
      next_attempt_at: null,
    });
    expect(delivery.id).toMatch(/^dlv_[0-9A-Z]{26}$/);
    expect(delivery.body).toBe(got.body);
    expect(delivery.delivered_at).not.toBeNull();
    expect(delivery.created_at).not.toBeNull();
    const list = await t.deliveries(hook.id);
    expect(list.map((d) => d.id)).toEqual([delivery.id]);
    expect(list[0].body).toBe(got.body);
    // A signature does not verify with another secret, nor for another body.
    expect(verifyWebhook(got.body, got.headers['cloud-signature'] as string, 'whsec_wrong').ok).toBe(false);
    expect(verifyWebhook(`${got.body} `, got.headers['cloud-signature'] as string, hook.secret).ok).toBe(false);
  });

  it('all five event types reach their subscribers; `*` gets every one; a disabled webhook none', async () => {
    const t = await tenant();
    const all = await receiver();
    const onlySuspended = await receiver();
    const ops = await receiver();
    const disabled = await receiver();
    const allHook = await t.createWebhook(all, ['*']);
    await t.createWebhook(onlySuspended, ['service.suspended']);
    const opsHook = await t.createWebhook(ops, ['operation.completed', 'service.terminated']);
    const off = await t.createWebhook(disabled, ['*']);
    await t.api.patch(`/v1/webhooks/${off.id}`, { enabled: false });

    const svc = await createService(stack.db, t.accountId);
    await suspend(svc.id);
    await stack.http.post(`/_dev/services/${svc.id}/unsuspend`);
    await stack.http.post(`/_dev/services/${svc.id}/terminate`);
    // An operation that runs in a workflow, and one that finishes inside the request.
    const op = await stack.api.deps.operations.start({
      principal: t.principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
    });
    const handle = stack.temporal!.client.workflow.getHandle(op.id);
    await handle.signal(advanceSignal, { finish: 'succeed' });
    await handle.result();
    const inline = await stack.api.deps.operations.recordCompleted({
      principal: t.principal,
      type: 'test.inline' as never,
      status: 'failed',
      error: { code: 'upstream_error', message: 'x' },
    });
    const ping = await t.api.post(`/v1/webhooks/${allHook.id}/ping`);
    expect(ping.status).toBe(201);

    await all.waitFor(6);
    await ops.waitFor(3);
    await onlySuspended.waitFor(1);
    await settled(t.accountId);
    const types = (rv: Receiver) => rv.received.map((d) => d.headers['cloud-event']).sort();
    expect(types(all)).toEqual(['operation.completed', 'operation.completed', 'service.active', 'service.suspended', 'service.terminated', 'webhook.ping']);
    expect(types(onlySuspended)).toEqual(['service.suspended']);
    expect(types(ops)).toEqual(['operation.completed', 'operation.completed', 'service.terminated']);
    expect(disabled.received).toHaveLength(0);
    for (const rv of [all, onlySuspended, ops])
      for (const d of rv.received) expect(d.verification.ok, d.verification.ok ? '' : d.verification.reason).toBe(true);

    const completed = all.received.filter((d) => d.headers['cloud-event'] === 'operation.completed').map((d) => JSON.parse(d.body).data);
    expect(completed).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ object: 'operation', id: op.id, type: 'test.operation' as never, status: 'succeeded', result: { answer: 42 } }),
        expect.objectContaining({ object: 'operation', id: inline.id, type: 'test.inline' as never, status: 'failed' }),
      ]),
    );
    const pinged = all.received.find((d) => d.headers['cloud-event'] === 'webhook.ping')!;
    expect(JSON.parse(pinged.body)).toMatchObject({ type: 'webhook.ping', data: { object: 'ping', webhook: allHook.id } });
    expect(pinged.headers['cloud-delivery']).toBe(ping.body.id);
    expect(ping.body).toMatchObject({ object: 'webhook_delivery', webhook: allHook.id, event_type: 'webhook.ping', status: 'queued', attempts: 0 });
    expect(ping.headers.get('location')).toBe(`/v1/webhooks/${allHook.id}/deliveries/${ping.body.id}`);
    expect(ping.body.body).toBe(pinged.body);
    // The same event carries the same body to every subscriber.
    const terminatedBodies = [all, ops].map((rv) => rv.received.find((d) => d.headers['cloud-event'] === 'service.terminated')!.body);
    expect(terminatedBodies[0]).toBe(terminatedBodies[1]);
    expect((await t.deliveries(opsHook.id)).every((d) => d.status === 'delivered')).toBe(true);
  });

  it('ping goes to one webhook only, whatever it subscribes to; a disabled webhook cannot be pinged', async () => {
    const t = await tenant();
    const a = await receiver();
    const b = await receiver();
    const hookA = await t.createWebhook(a, ['service.active']);
    await t.createWebhook(b, ['*']);
    expect((await t.api.post(`/v1/webhooks/${hookA.id}/ping`)).status).toBe(201);
    await a.waitFor(1);
    await settled(t.accountId);
    expect(a.received.map((d) => d.headers['cloud-event'])).toEqual(['webhook.ping']);
    expect(b.received).toHaveLength(0);
    await t.api.patch(`/v1/webhooks/${hookA.id}`, { enabled: false });
    const refused = await t.api.post(`/v1/webhooks/${hookA.id}/ping`);
    expect(refused.status).toBe(409);
    expect(refused.body.error.code).toBe('conflict');
  });

  it('retries a failing receiver with the same body and a fresh signature, then delivers', async () => {
    const t = await tenant();
    const r = await receiver();
    r.respond = (n) => (n <= 2 ? 503 : 200);
    const hook = await t.createWebhook(r);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(3);
    const [d] = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds[0]?.status === 'delivered',
    );
    expect(d).toMatchObject({ status: 'delivered', attempts: 3, last_status: 200, last_error: null, next_attempt_at: null });
    expect(new Set(r.received.map((x) => x.body)).size).toBe(1);
    expect(new Set(r.received.map((x) => x.headers['cloud-delivery'])).size).toBe(1);
    for (const x of r.received) expect(x.verification.ok).toBe(true);
    // Attempts are spaced by the schedule (150 ms before attempt 2 here).
    expect(r.received[1].at - r.received[0].at).toBeGreaterThanOrEqual(140);
    expect((await t.api.get(`/v1/webhooks/${hook.id}`)).body.consecutive_failures).toBe(0);
  });

  it('records each failed attempt (status, error, next attempt) while the schedule runs', async () => {
    const t = await tenant();
    const r = await receiver();
    const held = gate();
    r.respond = async (n) => {
      if (n === 2) await held.passed; // hold attempt 2 while the test reads the record of attempt 1
      return n === 1 ? 500 : 200;
    };
    const hook = await t.createWebhook(r);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(2);
    const [d] = await t.deliveries(hook.id);
    expect(d).toMatchObject({ status: 'queued', attempts: 1, last_status: 500 });
    expect(d.last_error).toMatch(/^HTTP 500/);
    expect(d.next_attempt_at).not.toBeNull();
    expect(d.delivered_at).toBeNull();
    held.open();
    const [done] = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds[0]?.status === 'delivered',
    );
    expect(done).toMatchObject({ attempts: 2, last_status: 200, last_error: null, next_attempt_at: null });
  });

  it('fails after 6 attempts, counts consecutive failures, resets them on re-enable, and redelivers', async () => {
    const t = await tenant();
    const r = await receiver();
    r.respond = () => 500;
    const hook = await t.createWebhook(r);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    const failed = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds.length === 2 && ds.every((d) => d.status === 'failed'),
    );
    for (const d of failed) expect(d).toMatchObject({ status: 'failed', attempts: 6, last_status: 500, next_attempt_at: null, delivered_at: null });
    expect(r.received).toHaveLength(12);
    expect((await t.api.get(`/v1/webhooks/${hook.id}`)).body.consecutive_failures).toBe(2);

    // A queued delivery cannot be redelivered; a failed one can, to a healthy receiver now.
    r.respond = () => 200;
    const again = await t.api.post(`/v1/webhooks/${hook.id}/deliveries/${failed[0].id}/redeliver`);
    expect(again.status, again.text).toBe(200);
    expect(again.body).toMatchObject({ id: failed[0].id, status: 'queued', body: failed[0].body });
    const redelivered = await waitFor(
      async () => (await t.api.get(`/v1/webhooks/${hook.id}/deliveries/${failed[0].id}`)).body,
      (d) => d.status === 'delivered',
    );
    expect(redelivered).toMatchObject({ status: 'delivered', attempts: 7, last_status: 200, last_error: null });
    expect(r.received.at(-1)!.body).toBe(failed[0].body);
    expect(r.received.at(-1)!.verification.ok).toBe(true);
    // A delivered one can be redelivered too.
    const twice = await t.api.post(`/v1/webhooks/${hook.id}/deliveries/${failed[0].id}/redeliver`);
    expect(twice.status).toBe(200);
    await waitFor(
      async () => (await t.api.get(`/v1/webhooks/${hook.id}/deliveries/${failed[0].id}`)).body,
      (d) => d.status === 'delivered' && d.attempts === 8,
    );
    expect((await t.api.get(`/v1/webhooks/${hook.id}`)).body.consecutive_failures).toBe(0);

    // consecutive_failures: counted, and reset when a disabled webhook is enabled again.
    r.respond = () => 500;
    await t.api.post(`/v1/webhooks/${hook.id}/deliveries/${failed[1].id}/redeliver`);
    const queued = await t.api.post(`/v1/webhooks/${hook.id}/deliveries/${failed[1].id}/redeliver`);
    expect(queued.status).toBe(409);
    await waitFor(
      async () => (await t.api.get(`/v1/webhooks/${hook.id}`)).body,
      (w) => w.consecutive_failures === 1,
    );
    expect((await t.api.patch(`/v1/webhooks/${hook.id}`, { enabled: true })).body.consecutive_failures).toBe(1);
    expect((await t.api.patch(`/v1/webhooks/${hook.id}`, { enabled: false })).body.consecutive_failures).toBe(1);
    const redeliverDisabled = await t.api.post(`/v1/webhooks/${hook.id}/deliveries/${failed[1].id}/redeliver`);
    expect(redeliverDisabled.status).toBe(409);
    expect((await t.api.patch(`/v1/webhooks/${hook.id}`, { enabled: true })).body.consecutive_failures).toBe(0);
  });

  it('treats a timeout, a redirect and a refused connection as failed attempts with a clear last_error', async () => {
    const t = await tenant();
    // Attempt 2 waits at the receiver until the test has read the record of attempt 1.
    const held = gate();
    const slow = await receiver();
    slow.respond = async (n) => {
      if (n === 1) await new Promise((r) => setTimeout(r, 2_500)); // past WEBHOOK_TIMEOUT (1.5 s here)
      if (n === 2) await held.passed;
      return 200;
    };
    const redirect = await receiver();
    redirect.respond = async (n) => {
      if (n === 2) await held.passed;
      return n === 1 ? 302 : 200;
    };
    const slowHook = await t.createWebhook(slow, ['webhook.ping']);
    const redirectHook = await t.createWebhook(redirect, ['webhook.ping']);
    await t.api.post(`/v1/webhooks/${slowHook.id}/ping`);
    await t.api.post(`/v1/webhooks/${redirectHook.id}/ping`);
    const [afterTimeout] = await waitFor(
      () => t.deliveries(slowHook.id),
      (ds) => ds[0]?.attempts >= 1,
    );
    expect(afterTimeout.last_status).toBeNull();
    expect(afterTimeout.last_error).toMatch(/timed out after 1500 ms/);
    const [afterRedirect] = await waitFor(
      () => t.deliveries(redirectHook.id),
      (ds) => ds[0]?.attempts >= 1,
    );
    expect(afterRedirect.last_status).toBe(302);
    expect(afterRedirect.last_error).toMatch(/redirect.*not followed/);
    held.open();
    for (const hook of [slowHook, redirectHook]) {
      const [d] = await waitFor(
        () => t.deliveries(hook.id),
        (ds) => ds[0]?.status === 'delivered',
      );
      expect(d.attempts).toBe(2);
    }
    // Nobody listens on this port any more.
    const gone = await receiver();
    const goneHook = await t.createWebhook(gone, ['webhook.ping']);
    await gone.close();
    await t.api.post(`/v1/webhooks/${goneHook.id}/ping`);
    const [refused] = await waitFor(
      () => t.deliveries(goneHook.id),
      (ds) => ds[0]?.attempts >= 1,
    );
    expect(refused.last_status).toBeNull();
    expect(refused.last_error).toMatch(/connection error: .*ECONNREFUSED/);
  });

  it('rotate-secret: later attempts are signed with the new secret only', async () => {
    const t = await tenant();
    const r = await receiver();
    const hook = await t.createWebhook(r, ['webhook.ping']);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(1);
    const rotated = await t.api.post(`/v1/webhooks/${hook.id}/rotate-secret`);
    await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(2);
    const [first, second] = r.received;
    expect(verifyWebhook(first.body, first.headers['cloud-signature'] as string, hook.secret).ok).toBe(true);
    expect(verifyWebhook(second.body, second.headers['cloud-signature'] as string, hook.secret).ok).toBe(false);
    expect(verifyWebhook(second.body, second.headers['cloud-signature'] as string, rotated.body.secret).ok).toBe(true);
  });

  it('deleting a webhook drops its pending deliveries and ends its delivery workflow', async () => {
    const t = await tenant();
    const r = await receiver();
    r.respond = () => 500;
    const hook = await t.createWebhook(r, ['webhook.ping']);
    const ping = await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(1);
    expect((await t.api.delete(`/v1/webhooks/${hook.id}`)).status).toBe(204);
    expect(await stack.db('webhook_deliveries').where({ id: ping.body.id })).toEqual([]);
    const handle = stack.temporal!.client.workflow.getHandle(`webhook-${hook.id}`);
    const closed = await waitFor(
      () => handle.describe(),
      (d) => d.status.name !== 'RUNNING',
    );
    expect(['TERMINATED', 'COMPLETED']).toContain(closed.status.name);
    const seen = r.received.length;
    await new Promise((res) => setTimeout(res, 1_000));
    expect(r.received.length).toBeLessThanOrEqual(seen + 1); // at most the attempt already in flight
  });
});

describe('the dispatcher', () => {
  it('a worker stopped mid-schedule loses no delivery; events emitted meanwhile arrive after restart', async () => {
    const t = await tenant();
    const r = await receiver();
    r.respond = (n) => (n === 1 ? 500 : 200);
    const hook = await t.createWebhook(r);
    const svc = await createService(stack.db, t.accountId);
    await suspend(svc.id);
    await r.waitFor(1);
    await stack.stopWorker();
    try {
      // No dispatcher listens now: this NOTIFY is lost; only the sweep after restart can find the event.
      await stack.http.post(`/_dev/services/${svc.id}/unsuspend`);
      await new Promise((res) => setTimeout(res, 800));
      expect(r.received).toHaveLength(1);
    } finally {
      await stack.startWorker();
    }
    await r.waitFor(3);
    const ds = await waitFor(
      () => t.deliveries(hook.id),
      (list) => list.length === 2 && list.every((d) => d.status === 'delivered'),
    );
    expect(ds.map((d) => d.event_type).sort()).toEqual(['service.active', 'service.suspended']);
    const suspended = ds.find((d) => d.event_type === 'service.suspended');
    expect(suspended.attempts).toBe(2);
    expect(r.received.every((d) => d.verification.ok)).toBe(true);
  });

  it('the sweep finds events whose NOTIFY never came, and a re-run creates no duplicates', async () => {
    const t = await tenant();
    const r = await receiver();
    const hook = await t.createWebhook(r, ['service.terminated']);
    // Written straight into the outbox without pg_notify.
    const id = newUlidId('evt');
    await stack.db('events').insert({
      id,
      account_id: t.accountId,
      type: 'service.terminated',
      data: JSON.stringify({ object: 'service', id: 'svc_999', status: 'terminated' }),
    });
    await r.waitFor(1, 5_000);
    expect(r.received.map((d) => d.headers['cloud-event-id'])).toEqual([id]);
    await waitFor(
      () => stack.db('events').where({ id }).first(),
      (e) => e.dispatched_at !== null,
    );

    // As if a dispatcher died after fanning out but before marking the event dispatched.
    await stack.db('events').where({ id }).update({ dispatched_at: null });
    await waitFor(
      () => stack.db('events').where({ id }).first(),
      (e) => e.dispatched_at !== null,
      5_000,
    );
    await settled(t.accountId);
    expect(await stack.db('webhook_deliveries').where({ event_id: id })).toHaveLength(1);
    expect(r.received).toHaveLength(1);

    // As if it died after creating the delivery row but before starting its workflow.
    const id2 = newUlidId('evt');
    await stack.db.transaction(async (trx) => {
      await trx('events').insert({ id: id2, account_id: t.accountId, type: 'service.terminated', data: JSON.stringify({ object: 'service', id: 'svc_998' }) });
      await trx('webhook_deliveries').insert({
        id: newUlidId('dlv'),
        webhook_id: Number(hook.id.slice(4)),
        account_id: t.accountId,
        event_id: id2,
        event_type: 'service.terminated',
        body: JSON.stringify({
          id: id2,
          object: 'event',
          type: 'service.terminated',
          created_at: new Date().toISOString(),
          data: { object: 'service', id: 'svc_998' },
        }),
      });
    });
    await r.waitFor(2, 5_000);
    await settled(t.accountId);
    expect(r.received.map((d) => d.headers['cloud-event-id'])).toEqual([id, id2]);
    expect(await stack.db('webhook_deliveries').where({ event_id: id2 })).toHaveLength(1);
  });

  it('does not send a webhook the events from before it was registered', async () => {
    const t = await tenant();
    const svc = await createService(stack.db, t.accountId);
    await stack.api.deps.operations.recordCompleted({ principal: t.principal, type: 'test.before' as never, status: 'succeeded' });
    await settled(t.accountId);
    const r = await receiver();
    await t.createWebhook(r);
    await suspend(svc.id);
    await r.waitFor(1);
    await settled(t.accountId);
    expect(r.received.map((d) => d.headers['cloud-event'])).toEqual(['service.suspended']);
  });
});
