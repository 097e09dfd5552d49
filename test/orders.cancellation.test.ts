import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, setBackendDown } from './orders.support';
import { seedOrders } from '../db/seeds/orders.seed';

/**
 * Billing carries out cancellation requests by itself: an immediate one at its next pass, an
 * end-of-cycle one once the service's due date has come. The call itself destroys nothing.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ env: { SIM_BILLING_INTERVAL: '300ms' } });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

async function activeOrder() {
  const c = await newCustomer(stack);
  const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: `z${Date.now()}.example` } });
  expect(res.status, res.text).toBe(202);
  await stack.temporal!.client.workflow.getHandle(res.body.id).result();
  const order = await stack.http.get(`/v1/orders/${res.body.resource.id}`, { token: c.token });
  return { c, orderId: res.body.resource.id as string, serviceId: order.body.services[0].id as string };
}

async function waitForStatus(token: string, serviceId: string, status: string, timeoutMs = 10_000) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const res = await stack.http.get(`/v1/services/${serviceId}`, { token });
    if (res.body.status === status || Date.now() > until) return res.body.status;
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('billing carries out cancellation requests', () => {
  it('terminates a service cancelled immediately at its next pass and emits service.terminated', async () => {
    const { c, orderId, serviceId } = await activeOrder();
    const cancel = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { type: 'immediate' } });
    expect(cancel.status, cancel.text).toBe(200);
    expect(await waitForStatus(c.token, serviceId, 'terminated')).toBe('terminated');
    const events = await stack.db('events').where({ type: 'service.terminated' }).whereRaw(`data->>'id' = ?`, [serviceId]);
    expect(events).toHaveLength(1);
  });

  it('keeps an end-of-cycle cancellation until the due date, then terminates', async () => {
    const { c, orderId, serviceId } = await activeOrder();
    const cancel = await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { type: 'end_of_cycle' } });
    expect(cancel.body.services[0].cancellation.effective_date).toBe(cancel.body.services[0].next_due_date);
    await new Promise((r) => setTimeout(r, 1_000)); // several passes
    expect((await stack.http.get(`/v1/services/${serviceId}`, { token: c.token })).body.status).toBe('active');

    // The cycle ends: billing's calendar reaches the due date.
    await stack
      .db('service_billing')
      .where({ service_id: Number(serviceId.slice(4)) })
      .update({ cancellation_effective_date: '2000-01-01' });
    expect(await waitForStatus(c.token, serviceId, 'terminated')).toBe('terminated');
  });

  it('leaves services without a request, and does nothing while billing is down', async () => {
    const { c, orderId, serviceId } = await activeOrder();
    const other = await activeOrder();
    await setBackendDown(stack, 'billing', true); // waits out the worker's switchboard cache
    try {
      await stack
        .db('service_billing')
        .where({ service_id: Number(serviceId.slice(4)) })
        .update({
          cancellation_type: 'immediate',
          cancellation_effective_date: '2000-01-01',
        });
      await new Promise((r) => setTimeout(r, 1_000));
      expect((await stack.http.get(`/v1/services/${serviceId}`, { token: c.token })).body.status).toBe('active');
    } finally {
      await setBackendDown(stack, 'billing', false);
    }
    expect(await waitForStatus(c.token, serviceId, 'terminated')).toBe('terminated');
    expect((await stack.http.get(`/v1/services/${other.serviceId}`, { token: other.c.token })).body.status).toBe('active');
    expect(orderId).toMatch(/^ord_/);
  });
});
