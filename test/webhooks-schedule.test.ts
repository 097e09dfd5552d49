import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createService } from './helpers/fixtures';
import { startReceiver, waitFor, type Receiver } from './webhooks.support';

/**
 * The retry schedule at its production delays (30 s, 2 min, 10 min, 1 h, 6 h; WEBHOOK_TIMEOUT 10 s)
 * under the time-skipping test server: seven and three-quarter hours pass in moments, with real
 * HTTP attempts to a loopback receiver between the timers. The schedule runs in the webhook's
 * endpoint workflow (`webhook-whk_<n>`), which ends once it holds nothing.
 */
let stack: Stack;
let receiver: Receiver;

beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping', env: { WEBHOOK_SWEEP_INTERVAL: '500ms' } });
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await stack?.close();
});

const PRODUCTION_DELAYS = [30_000, 120_000, 600_000, 3_600_000, 21_600_000];

/** When each attempt (an attemptWebhookBatch activity) was scheduled, in workflow (skipped) time. */
function attemptTimes(history: Awaited<ReturnType<ReturnType<NonNullable<Stack['temporal']>['client']['workflow']['getHandle']>['fetchHistory']>>): number[] {
  return (history.events ?? [])
    .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'attemptWebhookBatch')
    .map((e) => Number(e.eventTime!.seconds) * 1000 + Math.floor((e.eventTime!.nanos ?? 0) / 1e6));
}

/**
 * The endpoint workflow of a webhook, once it exists: the delivery row is written first, and the
 * dispatcher signals (or starts) the workflow a moment later.
 */
async function endpointWorkflow(hookId: string) {
  const handle = stack.temporal!.client.workflow.getHandle(`webhook-${hookId}`);
  await waitFor(
    () =>
      handle.describe().then(
        () => true,
        () => false,
      ),
    (started) => started,
  );
  return handle;
}

describe('webhook retry schedule at production delays', () => {
  it('makes 6 attempts 30 s, 2 min, 10 min, 1 h and 6 h apart, then the delivery is failed', async () => {
    expect(stack.config.WEBHOOK_RETRY_DELAYS).toEqual(PRODUCTION_DELAYS);
    expect(stack.config.WEBHOOK_TIMEOUT).toBe(10_000);
    receiver.respond = () => 500;
    const res = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: receiver.url, events: ['service.suspended'] } });
    expect(res.status, res.text).toBe(201);
    receiver.secret = res.body.secret;
    const svc = await createService(stack.db, stack.owner.accountId);
    await stack.http.post(`/_dev/services/${svc.id}/suspend`);

    const [row] = await waitFor(
      () => stack.db('webhook_deliveries').select('id'),
      (rows) => rows.length === 1,
    );
    const handle = await endpointWorkflow(res.body.id);
    const before = await stack.temporal!.currentTimeMs();
    // Awaiting the result lets the test server skip time while the workflow sleeps.
    expect(await handle.result()).toEqual({ attempts: 6, delivered: 0, failed: 1, dropped: 0 });
    const elapsed = (await stack.temporal!.currentTimeMs()) - before;
    expect(elapsed).toBeGreaterThanOrEqual(PRODUCTION_DELAYS.reduce((a, b) => a + b, 0) - 60_000);

    // The schedule is in the workflow history: five timers with the production delays.
    const history = await handle.fetchHistory();
    const timers = (history.events ?? [])
      .filter((e) => e.timerStartedEventAttributes)
      .map((e) => Number(e.timerStartedEventAttributes!.startToFireTimeout!.seconds) * 1000);
    expect(timers).toEqual(PRODUCTION_DELAYS);
    const scheduledAt = attemptTimes(history);
    expect(scheduledAt).toHaveLength(6);
    // In workflow time, each attempt starts at least its delay after the previous one.
    for (let i = 1; i < 6; i++) expect(scheduledAt[i] - scheduledAt[i - 1]).toBeGreaterThanOrEqual(PRODUCTION_DELAYS[i - 1]);

    // Six real attempts, same body, each correctly signed.
    expect(receiver.received).toHaveLength(6);
    expect(new Set(receiver.received.map((d) => d.body)).size).toBe(1);
    for (const d of receiver.received) expect(d.verification.ok).toBe(true);

    const delivery = (await stack.http.get(`/v1/webhooks/${res.body.id}/deliveries/${row.id}`, { token: stack.owner.key })).body;
    expect(delivery).toMatchObject({ status: 'failed', attempts: 6, last_status: 500, next_attempt_at: null, delivered_at: null });
    expect(delivery.last_error).toMatch(/^HTTP 500/);
    expect(delivery.body).toBe(receiver.received[0].body);
    expect((await stack.http.get(`/v1/webhooks/${res.body.id}`, { token: stack.owner.key })).body.consecutive_failures).toBe(1);
  });

  it('a receiver that recovers during the 1 h wait gets attempt 5 through', async () => {
    receiver.received.length = 0;
    receiver.respond = (n) => (n < 5 ? 503 : 200);
    const res = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: receiver.url, events: ['service.active'] } });
    receiver.secret = res.body.secret;
    const svc = await createService(stack.db, stack.owner.accountId, { status: 'suspended' });
    await stack.http.post(`/_dev/services/${svc.id}/unsuspend`);
    const [row] = await waitFor(
      () =>
        stack
          .db('webhook_deliveries')
          .where({ webhook_id: Number(res.body.id.slice(4)) })
          .select('id'),
      (rows) => rows.length === 1,
    );
    const handle = await endpointWorkflow(res.body.id);
    expect(await handle.result()).toEqual({ attempts: 5, delivered: 1, failed: 0, dropped: 0 });
    const history = await handle.fetchHistory();
    const timers = (history.events ?? []).filter((e) => e.timerStartedEventAttributes);
    expect(timers.map((e) => Number(e.timerStartedEventAttributes!.startToFireTimeout!.seconds) * 1000)).toEqual(PRODUCTION_DELAYS.slice(0, 4));
    const scheduledAt = attemptTimes(history);
    expect(scheduledAt).toHaveLength(5);
    expect(scheduledAt[4] - scheduledAt[0]).toBeGreaterThanOrEqual(30_000 + 120_000 + 600_000 + 3_600_000);
    expect(receiver.received).toHaveLength(5);
    const delivery = (await stack.http.get(`/v1/webhooks/${res.body.id}/deliveries/${row.id}`, { token: stack.owner.key })).body;
    expect(delivery).toMatchObject({ status: 'delivered', attempts: 5, last_status: 200, last_error: null });
  });
});
