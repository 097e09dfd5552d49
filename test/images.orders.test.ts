import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/** Ordering an image service: `images-basic` builds the tenant; an account holds one at a time. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms' } });
  await seedOrders(stack.db);
}, 120_000);
afterAll(() => stack?.close());

describe('ordering an image service', () => {
  it('images-basic (WELCOME100) creates the tenant with a signing secret; a second order while it is live is 409 already_exists', async () => {
    const c = await newCustomer(stack);
    expect((await stack.http.get('/v1/images', { token: c.token })).status).toBe(404);
    const order = await placeOrder(stack, c, { product: 'images-basic', promo_code: 'WELCOME100' });
    expect(order.status, order.text).toBe(202);
    const op = await waitFor(
      () => storedOperation(stack, order.body.id),
      (o) => o.status === 'succeeded' || o.status === 'failed',
      30_000,
    );
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    const images = await stack.http.get('/v1/images', { token: c.token });
    expect(images.status, images.text).toBe(200);
    expect(images.body).toMatchObject({ object: 'images', service_id: op.result.service.id, plan: 'images-basic', origin_count: 0, origin_limit: 10 });
    const secret = await stack.http.post('/v1/images/signing-secret', { token: c.token });
    expect(secret.body.secret).toMatch(/^imgs_[A-Za-z0-9]{32,}$/);
    const again = await placeOrder(stack, c, { product: 'images-basic', promo_code: 'WELCOME100' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'already_exists', param: 'product' });
  });
});
