import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../common/config';
import { seedDemo } from '../db/seeds';
import { createProviders } from '../families';
import { startStack, type Stack } from './helpers/stack';
import { waitFor } from './vps.support';

/**
 * The demo seed's second account (DECISIONS "Data planes ... Seed"): `other@example.test` owns an
 * account with no services, signs in with its own password, sees none of cus_1's services, and
 * orders from the same catalog with WELCOME100 like the first. Seeding twice changes nothing.
 */
let stack: Stack;
const passwords = { owner: 'owner password for the seed', dev: 'dev password for the seed', other: 'other password for the seed' };
// The seed's own providers are the simulators (the demo balancer and databases are not what is tried here).
const seedConfig = loadConfig(
  {},
  {
    SIM_DELAY_SCALE: '0',
    DNS_BACKEND: 'simulator',
    LB_BACKEND: 'simulator',
    DBAAS_BACKEND: 'simulator',
    OBJECTSTORAGE_BACKEND: 'simulator',
    CAAS_BACKEND: 'simulator',
    WORDPRESS_BACKEND: 'simulator',
  },
);
const seed = () =>
  seedDemo(stack.db, passwords, createProviders({ db: stack.db, config: seedConfig }), { keyring: stack.api.deps.keyring, config: seedConfig });

beforeAll(async () => {
  // The stack's own account is the database's first (cus_1): the demo services and users join it.
  stack = await startStack();
  expect(stack.owner.accountId).toBe(1);
  await seed();
});
afterAll(() => stack?.close());

const signIn = async (email: string, password: string) => {
  const res = await stack.http.post('/v1/sessions', { body: { email, password } });
  expect(res.status, res.text).toBe(201);
  return res.body.token as string;
};

describe('the second demo account', () => {
  it('is its own account, owned by other@example.test, with no services, and seeding again changes nothing', async () => {
    const counts = async () => ({
      accounts: Number((await stack.db('accounts').count('* as n').first())!.n),
      users: Number((await stack.db('users').count('* as n').first())!.n),
      services: Number((await stack.db('services').count('* as n').first())!.n),
    });
    const before = await counts();
    expect((await seed()).createdUsers).toBe(false);
    expect(await counts()).toEqual(before);

    const other = await stack.db('users').where({ email: 'other@example.test' }).first();
    expect(other).toMatchObject({ is_owner: true, all_services: true });
    expect(Number(other.account_id)).not.toBe(1);
    expect(await stack.db('services').where({ account_id: other.account_id })).toEqual([]);
    expect(Number((await stack.db('billing_accounts').where({ account_id: other.account_id }).first()).credit)).toBe(5);
  });

  it("signs in with DEMO_OTHER_PASSWORD's password and cannot see cus_1's services", async () => {
    const token = await signIn('other@example.test', passwords.other);
    const list = await stack.http.get('/v1/services?limit=100', { token });
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual([]);
    const demo = await stack.db('services').where({ account_id: 1 });
    expect(demo.length).toBeGreaterThan(5);
    for (const svc of demo) {
      const res = await stack.http.get(`/v1/services/svc_${svc.id}`, { token });
      expect(res.status, `svc_${svc.id}`).toBe(404);
    }
    // The first account's owner sees its services as before.
    const owner = await signIn('owner@example.test', passwords.owner);
    expect((await stack.http.get('/v1/services?limit=100', { token: owner })).body.data.length).toBe(demo.length);
  });

  it('orders from the same catalog with WELCOME100, and the first account does not see what it ordered', async () => {
    const token = await signIn('other@example.test', passwords.other);
    const owner = await signIn('owner@example.test', passwords.owner);
    const products = async (t: string) => (await stack.http.get('/v1/orders/products?limit=100', { token: t })).body.data;
    expect(await products(token)).toEqual(await products(owner));

    const order = await stack.http.post('/v1/orders', {
      token,
      headers: { 'idempotency-key': 'other-first-order' },
      body: { product: 'vps-s', billing_cycle: 'monthly', promo_code: 'WELCOME100', options: { os: 'debian-12', hostname: 'other-1.example.test' } },
    });
    expect(order.status, order.text).toBe(202);
    const done = await waitFor(
      async () => (await stack.http.get(`/v1/operations/${order.body.id}`, { token })).body,
      (op) => op.status === 'succeeded' || op.status === 'failed',
      30_000,
    );
    expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
    const serviceId = done.result.service.id;
    expect((await stack.http.get('/v1/services', { token })).body.data.map((s: { id: string }) => s.id)).toEqual([serviceId]);
    expect((await stack.http.get(`/v1/services/${serviceId}`, { token: owner })).status).toBe(404);
    expect((await stack.http.get(`/v1/operations/${order.body.id}`, { token: owner })).status).toBe(404);
  });
});
