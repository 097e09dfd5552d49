import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/**
 * Ordering serverless primitives: each `serverless-<p>` product builds that primitive's tenant; an
 * account holds one tenant per primitive (a second of the same one is 409 before billing), and
 * holding one primitive does not stop it from ordering another.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms' } });
  await seedOrders(stack.db);
}, 120_000);
afterAll(() => stack?.close());

async function order(c: Awaited<ReturnType<typeof newCustomer>>, product: string) {
  const placed = await placeOrder(stack, c, { product, promo_code: 'WELCOME100' });
  expect(placed.status, placed.text).toBe(202);
  const op = await waitFor(
    () => storedOperation(stack, placed.body.id),
    (o) => o.status === 'succeeded' || o.status === 'failed',
    30_000,
  );
  expect(op.status, JSON.stringify(op)).toBe('succeeded');
  return op;
}

describe('ordering serverless primitives', () => {
  it('the catalog sells the four primitives as family serverless', async () => {
    const c = await newCustomer(stack);
    const list = await stack.http.get('/v1/orders/products?family=serverless', { token: c.token });
    expect(list.status, list.text).toBe(200);
    expect(list.body.data.map((p: { product: string }) => p.product).sort()).toEqual([
      'serverless-cron',
      'serverless-db',
      'serverless-functions',
      'serverless-kv',
    ]);
  });

  it('serverless-kv then serverless-db: each builds its tenant; a second kv while one is live is 409 already_exists', async () => {
    const c = await newCustomer(stack);
    expect((await stack.http.get('/v1/serverless/kv', { token: c.token })).status).toBe(404);
    const kvOp = await order(c, 'serverless-kv');
    const kv = await stack.http.get('/v1/serverless/kv', { token: c.token });
    expect(kv.status, kv.text).toBe(200);
    expect(kv.body).toMatchObject({
      object: 'serverless_kv',
      service_id: kvOp.result.service.id,
      status: 'active',
      plan: 'serverless-kv',
      month_usage: { reads: 0, writes: 0 },
    });
    expect(kv.body.api_endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/kv$/);
    expect(kv.body.limits.max_value_bytes).toBeLessThanOrEqual(64 * 1024 * 1024);
    const services = await stack.http.get(`/v1/services/${kvOp.result.service.id}`, { token: c.token });
    expect(services.body.family).toBe('other');

    const again = await placeOrder(stack, c, { product: 'serverless-kv', promo_code: 'WELCOME100' });
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({ code: 'already_exists', param: 'product' });
    expect(again.body.error.message).toContain('/v1/serverless/kv');

    expect((await stack.http.get('/v1/serverless/db', { token: c.token })).status).toBe(404);
    await order(c, 'serverless-db');
    const db = await stack.http.get('/v1/serverless/db', { token: c.token });
    expect(db.body).toMatchObject({ object: 'serverless_db', plan: 'serverless-db', namespaces: [] });
  });
});
