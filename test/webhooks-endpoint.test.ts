import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { temporal as proto } from '@temporalio/proto';
import { startStack, type Stack } from './helpers/stack';
import { createAccount, createApiKey, createUser } from './helpers/fixtures';
import { gate, startReceiver, waitFor, type Receiver } from './webhooks.support';
import { emitEvent } from '../domain/events';
import { newUlidId } from '../common/ids';
import { endpointWorkflowId, endpointWorkflowInput, WEBHOOK_ENDPOINT_WORKFLOW } from '../domain/webhooks/webhooks';
import { SEARCH_ATTRIBUTES } from '../infra/temporal';
import { webhookDeliveriesSignal, webhookEndpointStateQuery } from '../workflows/webhooks/webhook-endpoint.workflow';

/**
 * The endpoint workflow (one per webhook, `webhook-whk_<n>`) on the dev server: what an operator
 * sees in Temporal, one signal per webhook per batch of events instead of a workflow per delivery,
 * the per-endpoint concurrency cap that keeps a slow endpoint from holding back another, the
 * breaker, continue-as-new with deliveries waiting for their retry, and a delivery signalled twice.
 */
let stack: Stack;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({
    env: {
      WEBHOOK_RETRY_DELAYS: '300ms,300ms,300ms,300ms,300ms',
      WEBHOOK_TIMEOUT: '5s',
      WEBHOOK_SWEEP_INTERVAL: '500ms',
      WEBHOOK_ENDPOINT_CONCURRENCY: '4',
      WEBHOOK_BREAKER_THRESHOLD: '3',
      WEBHOOK_BREAKER_COOLDOWN: '700ms',
    },
  });
});
afterAll(() => stack?.close());
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
});

async function receiver(): Promise<Receiver> {
  const r = await startReceiver();
  receivers.push(r);
  return r;
}

async function tenant() {
  const { accountId } = await createAccount(stack.db);
  const { userId } = await createUser(stack.db, accountId, { isOwner: true });
  const { token } = await createApiKey(stack.db, accountId, userId, { scopes: ['account:read', 'account:write'] });
  const api = {
    get: (path: string) => stack.http.get(path, { token }),
    post: (path: string, body?: unknown) => stack.http.post(path, { token, body }),
  };
  const createWebhook = async (r: Receiver, events: string[] = ['*']) => {
    const res = await api.post('/v1/webhooks', { url: r.url, events });
    expect(res.status, res.text).toBe(201);
    r.secret = res.body.secret;
    return res.body as { id: string };
  };
  const deliveries = async (webhookId: string) => (await api.get(`/v1/webhooks/${webhookId}/deliveries?limit=100`)).body.data as any[];
  /** `count` events in one transaction: the dispatcher sees them as one batch. */
  const emit = (count: number) =>
    stack.db.transaction(async (trx) => {
      for (let i = 0; i < count; i++) {
        await emitEvent(trx, { accountId, type: 'service.suspended', data: { object: 'service', id: `svc_${i + 1}`, status: 'suspended' } });
      }
    });
  return { accountId, api, createWebhook, deliveries, emit };
}

const handleOf = (webhookId: string) => stack.temporal!.client.workflow.getHandle(`webhook-${webhookId}`);

/** The results of every attempt batch in a history: each attemptWebhookBatch activity's result. */
function attemptResults(history: proto.api.history.v1.IHistory): Array<{ id: string; outcome: string; status: number | null; error: string | null }> {
  return (history.events ?? [])
    .map((e) => e.activityTaskCompletedEventAttributes)
    .filter((a) => a?.result?.payloads?.length)
    .flatMap((a) => JSON.parse(Buffer.from(a!.result!.payloads![0].data!).toString('utf8')));
}

/** The delivery ids each attemptWebhookBatch activity was scheduled with (its input, shown in the UI). */
function attemptInputs(history: proto.api.history.v1.IHistory): string[] {
  return (history.events ?? [])
    .map((e) => e.activityTaskScheduledEventAttributes)
    .filter((a) => a?.activityType?.name === 'attemptWebhookBatch')
    .flatMap((a) => JSON.parse(Buffer.from(a!.input!.payloads![0].data!).toString('utf8')).deliveries.map((d: { id: string }) => d.id));
}

describe('what an operator sees in Temporal', () => {
  it('one workflow per webhook, named and searchable by it; its state query lists the deliveries in flight; each attempt is in its history', async () => {
    const t = await tenant();
    const r = await receiver();
    const held = gate();
    r.respond = async () => {
      await held.passed;
      return 200;
    };
    const hook = await t.createWebhook(r);
    const pings = [await t.api.post(`/v1/webhooks/${hook.id}/ping`), await t.api.post(`/v1/webhooks/${hook.id}/ping`)];
    await r.waitFor(2);
    const handle = handleOf(hook.id);
    const state = await handle.query(webhookEndpointStateQuery);
    expect(state.inFlight.sort()).toEqual(pings.map((p) => p.body.id).sort());
    expect(state.breaker).toEqual({ failures: 0, open_until: null });

    const described = await handle.describe();
    expect(described.type).toBe('webhookEndpointWorkflow');
    expect(described.typedSearchAttributes.get(SEARCH_ATTRIBUTES.resourceId)).toBe(hook.id);
    expect(described.typedSearchAttributes.get(SEARCH_ATTRIBUTES.operationType)).toBe('webhook.delivery');
    expect(described.typedSearchAttributes.get(SEARCH_ATTRIBUTES.accountId)).toBe(`cus_${t.accountId}`);
    expect(await described.memo).toMatchObject({ webhook: hook.id, account: `cus_${t.accountId}` });
    // Operators filter with the same query language the UI uses.
    const listed: string[] = [];
    for await (const wf of stack.temporal!.client.workflow.list({ query: `CloudResourceId = "${hook.id}"` })) listed.push(wf.workflowId);
    expect(listed).toContain(`webhook-${hook.id}`);

    held.open();
    await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds.length === 2 && ds.every((d) => d.status === 'delivered'),
    );
    // Nothing left to hold: the run ends (the next delivery starts a new one).
    expect(await handle.result()).toEqual({ attempts: 2, delivered: 2, failed: 0, dropped: 0 });
    const history = await handle.fetchHistory();
    const attempts = attemptResults(history);
    for (const p of pings) {
      expect(attemptInputs(history)).toContain(p.body.id);
      expect(attempts).toContainEqual(expect.objectContaining({ id: p.body.id, outcome: 'delivered', status: 200 }));
    }
  });
});

describe('fan-out', () => {
  it('a batch of events costs one signal per webhook, not a workflow per delivery', async () => {
    const t = await tenant();
    const [a, b] = [await receiver(), await receiver()];
    const [hookA, hookB] = [await t.createWebhook(a), await t.createWebhook(b)];
    await t.emit(50);
    await a.waitFor(50);
    await b.waitFor(50);
    for (const [r, hook] of [
      [a, hookA],
      [b, hookB],
    ] as const) {
      expect(new Set(r.received.map((d) => d.headers['cloud-event-id'])).size).toBe(50);
      expect(r.received.every((d) => d.verification.ok)).toBe(true);
      await waitFor(
        () => t.deliveries(hook.id),
        (ds) => ds.length === 50 && ds.every((d) => d.status === 'delivered'),
      );
      await handleOf(hook.id).result();
      const history = await handleOf(hook.id).fetchHistory();
      expect((history.events ?? []).filter((e) => e.workflowExecutionSignaledEventAttributes)).toHaveLength(1);
      expect(attemptResults(history)).toHaveLength(50);
    }
  });

  it('a slow endpoint uses at most WEBHOOK_ENDPOINT_CONCURRENCY sockets and does not hold back another endpoint', async () => {
    const t = await tenant();
    const slow = await receiver();
    const fast = await receiver();
    let open = 0;
    let peak = 0;
    slow.respond = async () => {
      peak = Math.max(peak, ++open);
      await new Promise((r) => setTimeout(r, 400));
      open--;
      return 200;
    };
    await t.createWebhook(slow);
    await t.createWebhook(fast);
    const started = Date.now();
    await t.emit(24);
    await fast.waitFor(24);
    const fastDone = Date.now() - started;
    await slow.waitFor(24, 30_000);
    const slowDone = Date.now() - started;
    expect(peak).toBeLessThanOrEqual(4); // WEBHOOK_ENDPOINT_CONCURRENCY in this file
    // The 24th request arrives after 5 rounds of 4 at 400 ms each.
    expect(slowDone).toBeGreaterThanOrEqual((24 / 4 - 1) * 400);
    expect(fastDone).toBeLessThan(slowDone - 1_000);
  });
});

describe('breaker', () => {
  it('after 3 failed attempts in a row due attempts are recorded as not sent; a probe after the cool-down closes it', async () => {
    const t = await tenant();
    const r = await receiver();
    let down = true;
    r.respond = () => (down ? 500 : 200);
    const hook = await t.createWebhook(r);
    await t.emit(5);
    await r.waitFor(5);
    // The 5 first attempts failed: the circuit is open, and attempts that come due are recorded without a request.
    const open = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds.some((d) => /^not sent/.test(d.last_error ?? '')),
    );
    const notSent = open.find((d) => /^not sent/.test(d.last_error ?? ''))!;
    expect(notSent).toMatchObject({ status: 'queued', last_status: null });
    expect(notSent.attempts).toBeGreaterThanOrEqual(2);
    expect(notSent.last_error).toMatch(/^not sent: the circuit for this endpoint is open after \d+ failed attempts in a row/);
    expect(r.received.length).toBeLessThan(open.reduce((sum, d) => sum + d.attempts, 0));
    down = false;
    // After the cool-down one attempt goes out as a probe; its 2xx closes the circuit and the rest follow.
    const done = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds.every((d) => d.status === 'delivered'),
    );
    expect(done.every((d) => d.last_status === 200 && d.last_error === null)).toBe(true);
    expect(r.received.length).toBeLessThan(done.reduce((sum, d) => sum + d.attempts, 0));
    expect(new Set(r.received.slice(5).map((d) => d.headers['cloud-delivery'])).size).toBe(5);
  });
});

describe('state across runs and signals', () => {
  async function queuedDeliveries(accountId: number, webhookId: number, count: number): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const eventId = newUlidId('evt');
      const id = newUlidId('dlv');
      const body = JSON.stringify({ id: eventId, object: 'event', type: 'service.suspended', created_at: new Date().toISOString(), data: {} });
      await stack
        .db('webhook_deliveries')
        .insert({ id, webhook_id: webhookId, account_id: accountId, event_id: eventId, event_type: 'service.suspended', body });
      ids.push(id);
    }
    return ids;
  }

  it('continues as new when its history grows, carrying the deliveries that wait for a retry', async () => {
    const t = await tenant();
    const r = await receiver();
    const failedOnce = new Set<string>();
    r.respond = (_n, d) => {
      const id = d.headers['cloud-delivery'] as string;
      if (failedOnce.has(id)) return 200;
      failedOnce.add(id);
      return 503;
    };
    const hook = await t.createWebhook(r, ['webhook.ping']);
    const webhookId = Number(hook.id.slice(4));
    const ids = await queuedDeliveries(t.accountId, webhookId, 8);
    const client = stack.temporal!.client;
    const first = await client.workflow.signalWithStart(WEBHOOK_ENDPOINT_WORKFLOW, {
      workflowId: endpointWorkflowId(webhookId),
      taskQueue: stack.taskQueue,
      args: [{ ...endpointWorkflowInput(stack.config, webhookId), historyLimit: 12, breaker: { threshold: 100, cooldownMs: 1_000 } }],
      signal: webhookDeliveriesSignal,
      signalArgs: [{ deliveries: [{ id: ids[0] }] }],
    });
    for (const id of ids.slice(1)) await first.signal(webhookDeliveriesSignal, { deliveries: [{ id }] });
    const done = await waitFor(
      () => t.deliveries(hook.id),
      (ds) => ds.length === 8 && ds.every((d) => d.status === 'delivered'),
    );
    for (const d of done) expect(d).toMatchObject({ attempts: 2, last_status: 200 });
    expect(r.received).toHaveLength(16);
    const firstRun = await client.workflow.getHandle(first.workflowId, first.signaledRunId).fetchHistory();
    expect(firstRun.events!.at(-1)!.workflowExecutionContinuedAsNewEventAttributes).toBeTruthy();
    const summary = await client.workflow.getHandle(first.workflowId).result();
    expect(summary).toEqual({ attempts: 16, delivered: 8, failed: 0, dropped: 0 });
  });

  it('a delivery signalled again while it is held is not attempted twice', async () => {
    const t = await tenant();
    const r = await receiver();
    const held = gate();
    r.respond = async () => {
      await held.passed;
      return 200;
    };
    const hook = await t.createWebhook(r, ['webhook.ping']);
    const ping = await t.api.post(`/v1/webhooks/${hook.id}/ping`);
    await r.waitFor(1);
    const handle = handleOf(hook.id);
    await handle.signal(webhookDeliveriesSignal, { deliveries: [{ id: ping.body.id }] });
    await handle.signal(webhookDeliveriesSignal, { deliveries: [{ id: ping.body.id }] });
    held.open();
    await handle.result();
    expect(r.received).toHaveLength(1);
    expect((await t.deliveries(hook.id))[0]).toMatchObject({ status: 'delivered', attempts: 1 });
  });
});
