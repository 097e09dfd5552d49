import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Worker } from '@temporalio/worker';
import { temporal } from '@temporalio/proto';
import { startStack, type Stack } from './helpers/stack';
import { workflowBundle } from './helpers/temporal';
import { seedOrders } from '../db/seeds/orders.seed';
import { newCustomer, placeOrder, setBackendDown, storedOperation, waitFor } from './orders.support';

/**
 * Replay of recorded `orders.create` histories against the current workflow code: histories of runs
 * made here (every path: settled at once, paid after a wait, cancelled, timed out) and the checked-in
 * ones under test/fixtures/order-histories/ (recorded from an earlier version of the code; re-record
 * with RECORD_ORDER_HISTORIES=1 only when a change to the workflow is meant to break old runs).
 * Fixtures are JSON files carrying the history as base64 protobuf: the SDK's proto-JSON helpers
 * (historyToJSON/historyFromJSON) fail in this install ("type must be a Type", two protobufjs copies).
 */
const FIXTURES = path.join(__dirname, 'fixtures/order-histories');
let stack: Stack;
const recorded: Record<string, { workflowId: string; history: temporal.api.history.v1.IHistory }> = {};

beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping', env: { SIM_DELAY_SCALE: '0' } });
  await seedOrders(stack.db);
  const handle = (id: string) => stack.temporal!.client.workflow.getHandle(id);
  const record = async (name: string, opId: string) => {
    await handle(opId).result();
    recorded[name] = { workflowId: opId, history: await handle(opId).fetchHistory() };
  };
  const pendingInvoice = async (opId: string) =>
    (await waitFor(() => storedOperation(stack, opId), (op) => op.result?.invoice !== null)).result.invoice.id as string;

  const c = await newCustomer(stack, { credit: 0 });
  const free = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'replay.example' } });
  await record('settled-at-once', free.body.id);

  const paid = await placeOrder(stack, c, { product: 'lb-s' });
  const invoice = await pendingInvoice(paid.body.id);
  await stack.temporal!.sleep(86_400_000);
  await stack.http.post(`/_dev/invoices/${invoice}/pay`);
  await record('paid-after-a-day', paid.body.id);

  const cancelled = await placeOrder(stack, c, { product: 'caas-starter' });
  await pendingInvoice(cancelled.body.id);
  await stack.http.post(`/v1/orders/${cancelled.body.resource.id}/cancel`, { token: c.token });
  await record('cancelled-unpaid', cancelled.body.id);

  await setBackendDown(stack, 'dns', true);
  const stuck = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'stuck.example' } });
  await record('provisioning-timeout', stuck.body.id);
  await setBackendDown(stack, 'dns', false);

  if (process.env.RECORD_ORDER_HISTORIES === '1') {
    mkdirSync(FIXTURES, { recursive: true });
    for (const [name, { history }] of Object.entries(recorded)) {
      const fixture = {
        name,
        workflow_type: 'orderWorkflow',
        events: history.events?.length,
        history_protobuf_base64: Buffer.from(temporal.api.history.v1.History.encode(history).finish()).toString('base64'),
      };
      writeFileSync(path.join(FIXTURES, `${name}.json`), `${JSON.stringify(fixture, null, 1)}\n`);
    }
  }
});
afterAll(() => stack?.close());

describe('orders.create replay', () => {
  it('recorded every outcome', async () => {
    const outcomes = await Promise.all(
      Object.values(recorded).map(async ({ workflowId }) => {
        const op = await storedOperation(stack, workflowId);
        return [op.status, op.error?.code ?? null];
      }),
    );
    expect(outcomes).toEqual([
      ['succeeded', null],
      ['succeeded', null],
      ['failed', 'order_cancelled'],
      ['failed', 'provisioning_timeout'],
    ]);
  });

  it('replays the histories of this run deterministically', async () => {
    for (const [name, { workflowId, history }] of Object.entries(recorded)) {
      await expect(Worker.runReplayHistory({ workflowBundle: workflowBundle() }, history, workflowId), name).resolves.toBeUndefined();
    }
  });

  it('replays the checked-in histories deterministically', async () => {
    const files = existsSync(FIXTURES) ? readdirSync(FIXTURES).filter((f) => f.endsWith('.json')) : [];
    expect(files.sort()).toEqual(['cancelled-unpaid.json', 'paid-after-a-day.json', 'provisioning-timeout.json', 'settled-at-once.json']);
    for (const file of files) {
      const fixture = JSON.parse(readFileSync(path.join(FIXTURES, file), 'utf8'));
      const history = temporal.api.history.v1.History.decode(Buffer.from(fixture.history_protobuf_base64, 'base64'));
      expect(history.events.length, file).toBe(fixture.events);
      await expect(Worker.runReplayHistory({ workflowBundle: workflowBundle() }, history, `fixture-${file}`), file).resolves.toBeUndefined();
    }
  });

  it('detects a history the code cannot reproduce (the check is real)', async () => {
    const { history, workflowId } = recorded['paid-after-a-day'];
    // The history says the first activity was another one than the code schedules.
    const { History } = temporal.api.history.v1;
    const tampered = History.decode(History.encode(history).finish());
    const scheduled = tampered.events.find((e) => e.activityTaskScheduledEventAttributes)!.activityTaskScheduledEventAttributes!;
    expect(scheduled.activityType!.name).toBe('placeOrder');
    scheduled.activityType!.name = 'chargeCustomerTwice';
    await expect(Worker.runReplayHistory({ workflowBundle: workflowBundle() }, tampered, workflowId)).rejects.toThrow(/nondetermin/i);
  });
});
