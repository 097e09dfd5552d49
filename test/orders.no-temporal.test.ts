import { isSiteNameTaken } from '../domain/orders/store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { seedOrders } from '../db/seeds/orders.seed';
import { newCustomer, placeOrder } from './orders.support';

/**
 * Temporal does not answer (nothing listens at TEMPORAL_ADDRESS): POST /v1/orders answers 503 and
 * leaves nothing behind: no operation, no order, no promo code use, no site name held.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { TEMPORAL_ADDRESS: '127.0.0.1:1', OPERATION_START_TIMEOUT: '2s' } });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

describe('orders without Temporal', () => {
  it('refuses the order with 503 backend_unavailable within the start deadline (OPERATION_START_TIMEOUT), and takes the order back', async () => {
    const c = await newCustomer(stack);
    const uses = async () => (await stack.db('promo_codes').where({ code: 'WELCOME100' }).first()).uses;
    const before = await uses();
    const started = Date.now();
    const res = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'nowhere.example.test', promo_code: 'WELCOME100' });
    // Not the client's ~20 s of connection retries: the deadline bounds them.
    expect(Date.now() - started).toBeLessThan(4_000);
    expect(res.status, res.text).toBe(503);
    expect(res.body.error).toMatchObject({ type: 'api_error', code: 'backend_unavailable' });
    expect(await stack.db('orders').where({ account_id: c.accountId })).toEqual([]);
    expect(await stack.db('operations').where({ account_id: c.accountId })).toEqual([]);
    expect(await uses()).toBe(before);
    // The site name the failed order named is free again.
    expect(await isSiteNameTaken(stack.db, 'nowhere.example.test')).toBe(false);
    // Reads still work from the database.
    expect((await stack.http.get('/v1/orders', { token: c.token })).body.data).toEqual([]);
  });
});
