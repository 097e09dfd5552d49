import { replayTests, type RecordedRun } from './helpers/replay';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
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
let stack: Stack;
const recorded: Record<string, RecordedRun> = {};

beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping', env: { SIM_DELAY_SCALE: '0' } });
  await seedOrders(stack.db);
  const handle = (id: string) => stack.temporal!.client.workflow.getHandle(id);
  const record = async (name: string, opId: string) => {
    await handle(opId).result();
    recorded[name] = { workflowId: opId, workflowType: 'orderWorkflow', history: await handle(opId).fetchHistory() };
  };
  const pendingInvoice = async (opId: string) =>
    (
      await waitFor(
        () => storedOperation(stack, opId),
        (op) => op.result?.invoice !== null,
      )
    ).result.invoice.id as string;

  const c = await newCustomer(stack, { credit: 0 });
  const free = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'replay.example' } });
  await record('settled-at-once', free.body.id);

  const paid = await placeOrder(stack, c, { product: 'lb-s' });
  const invoice = await pendingInvoice(paid.body.id);
  // A day and an hour: the fourth 6-hour recheck has fired and read the invoice well before the payment
  // signal arrives. Paying at the very moment a recheck fires made the time-skipping test server
  // fail the workflow task ("invalid history builder state for action") and the run never ended.
  await stack.temporal!.sleep(25 * 3_600_000);
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

  replayTests({
    fixtures: 'order-histories',
    expected: ['cancelled-unpaid', 'paid-after-a-day', 'provisioning-timeout', 'settled-at-once'],
    recorded: () => recorded,
    tamper: { run: 'paid-after-a-day', activity: 'placeOrder' },
  });
});
