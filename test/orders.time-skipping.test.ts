import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { seedOrders } from '../db/seeds/orders.seed';
import { eventsFor, newCustomer, placeOrder, setBackendDown, storedOperation, waitFor } from './orders.support';

/**
 * The order workflow at production durations on the time-skipping test server (the whole stack:
 * API, worker, PostgreSQL): ORDER_ACTIVATION_TIMEOUT stays 30 minutes, and a payment may come days
 * later. SIM_DELAY_SCALE is 0 because the simulators' work runs inside activities on wall-clock time,
 * which the test server does not skip.
 */
let stack: Stack;
const DAY = 86_400_000;

beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping', env: { SIM_DELAY_SCALE: '0' } });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

describe('orders at production durations', () => {
  it('uses the production activation timeout', () => {
    expect(stack.config.ORDER_ACTIVATION_TIMEOUT).toBe(30 * 60_000);
  });

  it('waits for a payment that comes three days later, then provisions', async () => {
    const c = await newCustomer(stack, { credit: 5 });
    const res = await placeOrder(stack, c, { product: 'vps-l', options: { os: 'rocky-9' } });
    expect(res.status, res.text).toBe(202);
    const opId = res.body.id;
    const pending = await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.result?.invoice !== null,
    );
    expect(pending).toMatchObject({ status: 'pending', result: { invoice: { status: 'unpaid', total: 24 } } });

    const before = await stack.temporal!.currentTimeMs();
    await stack.temporal!.sleep(3 * DAY);
    expect((await stack.temporal!.currentTimeMs()) - before).toBeGreaterThanOrEqual(3 * DAY);
    // Three days on: still pending, no timeout, and the API still reads it from the workflow.
    const waiting = await stack.http.get(`/v1/operations/${opId}`, { token: c.token });
    expect(waiting.body).toMatchObject({ status: 'pending', stale: false, result: { invoice: { status: 'unpaid' } } });
    expect(waiting.body.result.invoice.payment_url).toMatch(/\/pay$/);

    const paid = await stack.http.post(`/_dev/invoices/${pending.result.invoice.id}/pay`);
    expect(paid.status, paid.text).toBe(200);
    await stack.temporal!.client.workflow.getHandle(opId).result();

    const done = await stack.http.get(`/v1/operations/${opId}`, { token: c.token });
    expect(done.body).toMatchObject({
      status: 'succeeded',
      error: null,
      result: { order: { status: 'active' }, invoice: { status: 'paid' }, service: { family: 'vps', status: 'active' } },
    });
    expect(await eventsFor(stack, c.accountId, 'service.active')).toHaveLength(1);
  });

  it('notices a payment whose signal never arrived, at the next periodic re-read', async () => {
    const c = await newCustomer(stack, { credit: 0 });
    const res = await placeOrder(stack, c, { product: 'lb-s' });
    const opId = res.body.id;
    const pending = await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.result?.invoice !== null,
    );
    // Paid straight in the billing backend, bypassing the route that signals the workflow.
    await stack.api.deps.providers.billing.payInvoice(Number(pending.result.invoice.id.slice(4)));
    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await handle.result();
    const run = await handle.describe();
    // Noticed at the 6-hourly re-read of the invoice (not before: nothing woke the workflow).
    const waited = run.closeTime!.getTime() - run.startTime.getTime();
    expect(waited).toBeGreaterThanOrEqual(6 * 3_600_000);
    expect(waited).toBeLessThan(7 * 3_600_000);
    expect((await storedOperation(stack, opId)).status).toBe('succeeded');
  });

  it('fails with provisioning_timeout 30 minutes after the order was accepted', async () => {
    const c = await newCustomer(stack);
    await setBackendDown(stack, 'dns', true);
    try {
      const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'stuck.example' } });
      expect(res.status).toBe(202);
      const opId = res.body.id;
      const running = await waitFor(
        () => storedOperation(stack, opId),
        (op) => op.status === 'running',
      );
      expect(running.status).toBe('running');
      const accepted = await stack.temporal!.currentTimeMs();

      // Not yet after 29 minutes.
      await stack.temporal!.sleep(29 * 60_000);
      expect((await storedOperation(stack, opId)).status).toBe('running');

      await stack.temporal!.client.workflow.getHandle(opId).result();
      // The test server keeps skipping while result() returns, so the run's own close time is the measure.
      // (A free order is accepted within moments of the run's start.)
      const run = await stack.temporal!.client.workflow.getHandle(opId).describe();
      expect(run.closeTime!.getTime() - run.startTime.getTime()).toBeGreaterThanOrEqual(30 * 60_000);
      expect(run.closeTime!.getTime() - accepted).toBeLessThan(31 * 60_000);
      const op = await stack.http.get(`/v1/operations/${opId}`, { token: c.token });
      expect(op.body).toMatchObject({ status: 'failed', error: { code: 'provisioning_timeout' } });
      expect(op.body.error.message).toContain('30 minutes');
      const completed = (await eventsFor(stack, c.accountId, 'operation.completed')).filter((e) => e.data.id === opId);
      expect(completed).toHaveLength(1);
      expect(completed[0].data).toMatchObject({ status: 'failed', error: { code: 'provisioning_timeout' } });
    } finally {
      await setBackendDown(stack, 'dns', false);
    }
  });

  it('a backend that comes back within the 30 minutes still activates the service', async () => {
    const c = await newCustomer(stack);
    await setBackendDown(stack, 'dns', true);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'late.example' } });
    const opId = res.body.id;
    await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.status === 'running',
    );
    await stack.temporal!.sleep(20 * 60_000);
    await setBackendDown(stack, 'dns', false);
    await stack.temporal!.client.workflow.getHandle(opId).result();
    expect(await storedOperation(stack, opId)).toMatchObject({ status: 'succeeded', result: { service: { status: 'active' } } });
  });
});
