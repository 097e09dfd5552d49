import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { seedOrders } from '../db/seeds/orders.seed';
import { BackendGoneError } from '../providers/errors';
import { parseNumericId } from '../common/ids';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';
import { freePort } from './lb.contract';
import { get, startBackend } from './lb.support';

/**
 * An ordered load balancer is built on real HAProxy by the lb provisioner (domain/lb/provisioner.ts)
 * and torn down by the teardown sweeper once billing terminates it.
 */
let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ env: { LB_BACKEND: 'haproxy', TEARDOWN_SWEEP_INTERVAL: '200ms' } });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

describe('ordering and terminating a load balancer', () => {
  it('an order starts a balancer that carries traffic; termination stops and forgets it', async () => {
    const customer = await newCustomer(stack, { credit: 20 });
    const order = await placeOrder(stack, customer, { product: 'lb-s' });
    expect(order.status).toBe(202);
    const op = await waitFor(
      () => storedOperation(stack, order.body.id),
      (o) => o.status === 'succeeded' || o.status === 'failed',
      30_000,
    );
    expect(op.status).toBe('succeeded');
    const lbId: string = op.result.service.id;
    const serviceId = parseNumericId('svc', lbId)!;

    const lb = await stack.http.get(`/v1/load-balancers/${lbId}`, { token: customer.token });
    expect(lb.body).toMatchObject({ provisioning_state: 'running', healthy: true, listener_count: 0 });
    const address: string = lb.body.address;
    expect((await stack.http.get(`/v1/services/${lbId}`, { token: customer.token })).body.primary_ip).toBe(address);

    const backend = await startBackend('ordered');
    try {
      const port = await freePort(address);
      const put = await stack.http.put(`/v1/load-balancers/${lbId}/listeners`, {
        token: customer.token,
        body: { listeners: [{ name: 'web', protocol: 'http', port, backends: [{ ip: '127.0.0.1', port: backend.port }] }] },
      });
      expect(put.status, put.text).toBe(200);
      expect(await get(address, port)).toBe('ordered');

      expect((await stack.http.post(`/_dev/services/${lbId}/terminate`)).status).toBe(200);
      await waitFor(
        () => stack.db('services').where({ id: serviceId }).first(),
        (s) => s.deprovisioned_at !== null,
        20_000,
      );
      await expect(get(address, port, 1_000)).rejects.toThrow(/ECONNREFUSED/);
      await expect(stack.api.deps.providers.lb.status(serviceId)).rejects.toBeInstanceOf(BackendGoneError);
      expect((await stack.http.get(`/v1/load-balancers/${lbId}`, { token: customer.token })).body).toMatchObject({
        provisioning_state: 'deleted',
        address: null,
      });
    } finally {
      await backend.stop();
    }
  });
});
