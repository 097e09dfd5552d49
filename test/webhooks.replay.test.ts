import path from 'node:path';
import { afterAll, beforeAll, describe, expect } from 'vitest';
import { bundleWorkflowCode } from '@temporalio/worker';
import type { WorkflowHandle } from '@temporalio/client';
import { createWorker, type AgentWorkers } from '../workers/worker';
import { newUlidId } from '../common/ids';
import { endpointWorkflowInput } from '../domain/webhooks/webhooks';
import { replayTests, type RecordedRun } from './helpers/replay';
import { startStack, type Stack } from './helpers/stack';
import { workflowBundle } from './helpers/temporal';
import { startReceiver, waitFor, type Receiver } from './webhooks.support';

/**
 * Replay of the webhook workflows under the time-skipping server at production delays.
 *
 * The per-delivery workflow of the previous design (webhookDeliveryWorkflow): runs recorded here by
 * its old code (test/fixtures/legacy/, the workflow as it was at kit-ready) and the histories checked
 * in before the endpoint workflow replaced it (test/fixtures/webhook-histories/) must replay against
 * the current code, which takes the old path for them (their histories carry no hand-over patch
 * marker); and a run in flight across the change (attempt 1 under the old code, then the current
 * code at its next attempt) hands its delivery over to the endpoint workflow, which delivers it.
 *
 * The endpoint workflow (webhookEndpointWorkflow): delivered, retried then delivered, failed after
 * every attempt, and a circuit that opens (attempts recorded without a request) and closes on a probe.
 */
const PRODUCTION_DELAYS = [30_000, 120_000, 600_000, 3_600_000, 21_600_000];
let stack: Stack;
const receivers: Receiver[] = [];
const legacyRuns: Record<string, RecordedRun> = {};
const endpointRuns: Record<string, RecordedRun> = {};
const legacyQueue = `legacy-${newUlidId('q').slice(-8).toLowerCase()}`;

async function receiverFor(events: string[], respond: (n: number) => number) {
  const receiver = await startReceiver();
  receivers.push(receiver);
  receiver.respond = respond;
  const hook = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: receiver.url, events } });
  expect(hook.status, hook.text).toBe(201);
  receiver.secret = hook.body.secret;
  return { receiver, webhookId: Number(hook.body.id.slice(4)), hookId: hook.body.id as string };
}

/** A queued delivery row with no event behind it: the dispatcher never sees it, only the run started here does. */
async function queuedDelivery(webhookId: number): Promise<string> {
  const eventId = newUlidId('evt');
  const id = newUlidId('dlv');
  const body = JSON.stringify({ id: eventId, object: 'event', type: 'webhook.ping', created_at: new Date().toISOString(), data: { object: 'ping' } });
  await stack
    .db('webhook_deliveries')
    .insert({ id, webhook_id: webhookId, account_id: stack.owner.accountId, event_id: eventId, event_type: 'webhook.ping', body });
  return id;
}

/** A run of the old per-delivery workflow, started the way the old dispatcher started it. */
function startLegacyRun(deliveryId: string): Promise<WorkflowHandle> {
  return stack.temporal!.client.workflow.start('webhookDeliveryWorkflow', {
    workflowId: deliveryId,
    taskQueue: legacyQueue,
    args: [{ deliveryId, retryDelaysMs: PRODUCTION_DELAYS, timeoutMs: 10_000 }],
  });
}

/** No workflow cache, hence no sticky queue: a run's next task goes to whichever worker polls the queue. */
async function workerOn(taskQueue: string, code: string): Promise<{ worker: AgentWorkers; running: Promise<void> }> {
  const { worker } = await createWorker({
    config: stack.config,
    db: stack.db,
    logger: stack.api.deps.logger,
    connection: stack.temporal!.nativeConnection,
    temporalClient: stack.temporal!.client,
    taskQueue,
    workflowBundle: { code },
    workerOptions: { maxCachedWorkflows: 0 },
  });
  return { worker, running: worker.run() };
}

async function record(into: Record<string, RecordedRun>, name: string, handle: WorkflowHandle, workflowType: string) {
  into[name] = { workflowId: handle.workflowId, workflowType, history: await handle.fetchHistory() };
}

beforeAll(async () => {
  stack = await startStack({
    temporal: 'time-skipping',
    env: { WEBHOOK_SWEEP_INTERVAL: '200ms', WEBHOOK_BREAKER_THRESHOLD: '3', WEBHOOK_BREAKER_COOLDOWN: '60s' },
  });

  // The old design, run by its own code.
  const { code: legacyCode } = await bundleWorkflowCode({
    workflowsPath: path.join(__dirname, 'fixtures/legacy/webhook-delivery-v1.workflow.ts'),
    logger: { info() {}, warn() {}, error: console.error, debug() {}, trace() {}, log() {} } as never,
  });
  let legacy = await workerOn(legacyQueue, legacyCode);
  for (const [name, respond, outcome] of [
    ['delivered', () => 200, 'delivered'],
    ['delivered-after-a-retry', (n: number) => (n === 1 ? 503 : 200), 'delivered'],
    ['failed-after-every-attempt', () => 500, 'failed'],
  ] as const) {
    const { webhookId } = await receiverFor(['service.terminated'], respond);
    const handle = await startLegacyRun(await queuedDelivery(webhookId));
    expect(await handle.result()).toBe(outcome);
    await record(legacyRuns, name, handle, 'webhookDeliveryWorkflow');
  }

  // A run in flight when the code changes: attempt 1 under the old code, then the current code.
  const inFlight = await receiverFor(['service.terminated'], (n) => (n === 1 ? 503 : 200));
  const deliveryId = await queuedDelivery(inFlight.webhookId);
  const handle = await startLegacyRun(deliveryId);
  await waitFor(
    () => stack.db('webhook_deliveries').where({ id: deliveryId }).first(),
    (row) => row.attempts === 1,
  );
  legacy.worker.shutdown();
  await legacy.running;
  legacy = await workerOn(legacyQueue, workflowBundle().code);
  expect(await handle.result()).toBe('handed-over');
  await record(legacyRuns, 'handed-over-mid-schedule', handle, 'webhookDeliveryWorkflow');
  const endpoint = stack.temporal!.client.workflow.getHandle(`webhook-${inFlight.hookId}`);
  expect(await endpoint.result()).toEqual({ attempts: 1, delivered: 1, failed: 0, dropped: 0 });
  const row = await stack.db('webhook_deliveries').where({ id: deliveryId }).first();
  expect(row).toMatchObject({ status: 'delivered', attempts: 2, last_status: 200 });
  expect(inFlight.receiver.received).toHaveLength(2);
  expect(inFlight.receiver.received.every((d) => d.verification.ok)).toBe(true);
  legacy.worker.shutdown();
  await legacy.running;

  // The endpoint workflow, started by the dispatcher from pings and events.
  for (const [name, respond, pings, summary] of [
    ['delivered', () => 200, 2, { attempts: 2, delivered: 2, failed: 0, dropped: 0 }],
    ['retried-then-delivered', (n: number) => (n === 1 ? 503 : 200), 1, { attempts: 2, delivered: 1, failed: 0, dropped: 0 }],
    ['failed-after-every-attempt', () => 500, 1, { attempts: 6, delivered: 0, failed: 1, dropped: 0 }],
    // 4 failures open the circuit (threshold 3, cool-down 60 s): attempt 2 of each is recorded
    // without a request; attempt 3 (after 2 min) goes out as a probe, its 2xx closes the circuit.
    ['circuit-opened', (n: number) => (n <= 4 ? 500 : 200), 4, { attempts: 12, delivered: 4, failed: 0, dropped: 0 }],
  ] as const) {
    const { receiver, hookId, webhookId } = await receiverFor(['webhook.ping'], respond);
    const ids = [];
    for (let i = 0; i < pings; i++) ids.push(await queuedDelivery(webhookId));
    await stack.temporal!.client.workflow.signalWithStart('webhookEndpointWorkflow', {
      workflowId: `webhook-${hookId}`,
      taskQueue: stack.taskQueue,
      args: [endpointWorkflowInput(stack.config, webhookId)],
      signal: 'webhookDeliveries',
      signalArgs: [{ deliveries: ids.map((id) => ({ id })) }],
    });
    const handle = stack.temporal!.client.workflow.getHandle(`webhook-${hookId}`);
    expect(await handle.result(), name).toEqual(summary);
    if (name === 'circuit-opened') {
      expect(receiver.received).toHaveLength(8);
      const rows = await stack.db('webhook_deliveries').where({ webhook_id: webhookId });
      expect(rows.every((r) => r.status === 'delivered' && r.attempts === 3)).toBe(true);
    }
    await record(endpointRuns, name, handle, 'webhookEndpointWorkflow');
  }
}, 300_000);
afterAll(async () => {
  for (const r of receivers) await r.close();
  await stack?.close();
});

describe('per-delivery workflow of the previous design (runs in flight)', () => {
  replayTests({
    fixtures: 'webhook-histories',
    expected: ['delivered', 'delivered-after-a-retry', 'failed-after-every-attempt', 'handed-over-mid-schedule'],
    recorded: () => legacyRuns,
    tamper: { run: 'delivered-after-a-retry', localActivityMarker: true },
  });
});

describe('endpoint workflow', () => {
  replayTests({
    fixtures: 'webhook-endpoint-histories',
    expected: ['delivered', 'retried-then-delivered', 'failed-after-every-attempt', 'circuit-opened'],
    recorded: () => endpointRuns,
    tamper: { run: 'retried-then-delivered', activity: 'attemptWebhookBatch' },
  });
});
