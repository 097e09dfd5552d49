import { afterAll, beforeAll, describe, expect } from 'vitest';
import { replayTests, type RecordedRun } from './helpers/replay';
import { startStack, type Stack } from './helpers/stack';
import { startReceiver, waitFor, type Receiver } from './webhooks.support';

/**
 * Replay of `webhookDeliveryWorkflow` histories (delivered at once, delivered after a retry, failed
 * after every attempt) against the current workflow code, and of the checked-in ones under
 * test/fixtures/webhook-histories/. Production retry delays under the time-skipping server.
 */
let stack: Stack;
const receivers: Receiver[] = [];
const recorded: Record<string, RecordedRun> = {};

async function deliveryOf(status: (n: number) => number): Promise<string> {
  const receiver = await startReceiver();
  receivers.push(receiver);
  receiver.respond = status;
  const hook = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: receiver.url, events: ['service.suspended'] } });
  expect(hook.status, hook.text).toBe(201);
  receiver.secret = hook.body.secret;
  expect((await stack.http.post(`/v1/webhooks/${hook.body.id}/ping`, { token: stack.owner.key })).status).toBe(201);
  const list = await waitFor(
    () => stack.http.get(`/v1/webhooks/${hook.body.id}/deliveries`, { token: stack.owner.key }),
    (res) => res.body.data.length === 1,
  );
  return list.body.data[0].id;
}

async function record(name: string, deliveryId: string, outcome: string): Promise<void> {
  const handle = stack.temporal!.client.workflow.getHandle(deliveryId);
  // The dispatcher writes the delivery row before it starts the delivery's workflow.
  await waitFor(
    () =>
      handle.describe().then(
        () => true,
        () => false,
      ),
    (started) => started,
  );
  expect(await handle.result()).toBe(outcome);
  recorded[name] = { workflowId: deliveryId, workflowType: 'webhookDeliveryWorkflow', history: await handle.fetchHistory() };
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping', env: { WEBHOOK_SWEEP_INTERVAL: '200ms' } });
  await record('delivered', await deliveryOf(() => 200), 'delivered');
  await record('delivered-after-a-retry', await deliveryOf((n) => (n === 1 ? 503 : 200)), 'delivered');
  await record('failed-after-every-attempt', await deliveryOf(() => 500), 'failed');
});
afterAll(async () => {
  for (const r of receivers) await r.close();
  await stack?.close();
});

describe('webhook delivery replay', () => {
  replayTests({
    fixtures: 'webhook-histories',
    expected: ['delivered', 'delivered-after-a-retry', 'failed-after-every-attempt'],
    recorded: () => recorded,
    tamper: { run: 'delivered-after-a-retry', localActivityMarker: true },
  });
});
