import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/** Ordering a mail gateway: `mailgateway-10k` builds the gateway; an account holds one at a time. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms' } });
  await seedOrders(stack.db);
}, 120_000);
afterAll(() => stack?.close());

describe('ordering a mail gateway', () => {
  it('mailgateway-10k (WELCOME100) creates the gateway; a second order while it is live is 409 already_exists', async () => {
    const c = await newCustomer(stack);
    expect((await stack.http.get('/v1/mail-gateway', { token: c.token })).status).toBe(404);
    const order = await placeOrder(stack, c, { product: 'mailgateway-10k', promo_code: 'WELCOME100' });
    expect(order.status, order.text).toBe(202);
    const op = await waitFor(
      () => storedOperation(stack, order.body.id),
      (o) => o.status === 'succeeded' || o.status === 'failed',
      30_000,
    );
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    const gateway = await stack.http.get('/v1/mail-gateway', { token: c.token });
    expect(gateway.status, gateway.text).toBe(200);
    expect(gateway.body).toMatchObject({ object: 'mail_gateway', service_id: op.result.service.id, status: 'active', domain_count: 0, key_count: 0 });
    expect((await stack.http.get('/v1/mail-gateway/usage', { token: c.token })).body.limit).toBe(10_000);
    const again = await placeOrder(stack, c, { product: 'mailgateway-10k', promo_code: 'WELCOME100' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'already_exists', param: 'product' });
  });
});
