import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { BackendGoneError } from '../providers/errors';
import { createService } from './helpers/fixtures';
import type { Stack } from './helpers/stack';
import { newCustomer, placeOrder, waitFor, type Customer } from './orders.support';
import { resolverFor, startDnsStack, type DnsStack } from './dns.support';

/**
 * Tenant isolation of DNS zones on the one real PowerDNS that serves every account (docs/dns.md
 * "Ordering and terminating", docs/security.md): no account may hold a zone that equals, contains or
 * lies inside another account's zone, a public suffix or a name of the platform; refused when the
 * order is placed (before billing) and again where the provisioner claims the zone, also when two
 * claims race. And writes to the zone of a suspended service are refused like every family action.
 */
let env: DnsStack;
let stack: Stack;
let alice: Customer;
let bob: Customer;

beforeAll(async () => {
  env = await startDnsStack();
  stack = env.stack;
  await seedOrders(stack.db);
  alice = await newCustomer(stack);
  bob = await newCustomer(stack);
});
afterAll(async () => {
  await env?.close();
});

const resolver = () => resolverFor(env.pdns.server.dnsAddress);
const onServer = (zone: string) =>
  env.pdns.adapter.zoneInfo(zone).then(
    () => true,
    (err: unknown) => {
      if (err instanceof BackendGoneError) return false;
      throw err;
    },
  );

/** Orders the zone and waits until the order has its service (the zone is then on the server). */
async function orderZone(customer: Customer, zone: string): Promise<string> {
  const res = await placeOrder(stack, customer, { product: 'dns-zone', options: { zone } });
  expect(res.status, res.text).toBe(202);
  const done = await waitFor(
    async () => (await stack.http.get(`/v1/operations/${res.body.id}`, { token: customer.token })).body,
    (op) => op.status === 'succeeded' || op.status === 'failed',
    30_000,
    200,
  );
  expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
  return done.result.service.id;
}

async function expectRefused(customer: Customer, zone: string, code: 'hostname_taken' | 'validation_failed', message?: RegExp) {
  const res = await placeOrder(stack, customer, { product: 'dns-zone', options: { zone } });
  expect(res.status, `${zone}: ${res.text}`).toBe(400);
  expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code, param: 'options.zone' });
  if (message) expect(res.body.error.message).toMatch(message);
}

/** A dns service of `accountId` that asks for `zone` without an order (as one placed before these checks could). */
async function claimWithoutOrder(accountId: number, zone: string) {
  const service = await createService(stack.db, accountId, { family: 'dns', product: 'dns-zone' });
  const res = await stack.http.post(`/_dev/dns/${service.id}/zone`, { body: { zone } });
  return { ...service, res };
}

describe('ordering a zone', () => {
  it("refuses another account's zone, its sub-zones and its parents; the holder may nest its own", async () => {
    const aliceZone = await orderZone(alice, 'example.org');
    await orderZone(alice, 'deep.corp.example');

    // The same zone, a sub-zone, a sub-sub-zone, and parents of a zone another account holds.
    await expectRefused(bob, 'EXAMPLE.org.', 'hostname_taken', /already hosted here/);
    await expectRefused(bob, 'shop.example.org', 'hostname_taken', /lies inside a zone that another account hosts here/);
    await expectRefused(bob, 'a.b.example.org', 'hostname_taken');
    await expectRefused(bob, 'corp.example', 'hostname_taken', /contains a zone that another account hosts here/);
    // The refusal names no other account's zone.
    const parent = await placeOrder(stack, bob, { product: 'dns-zone', options: { zone: 'corp.example' } });
    expect(parent.body.error.message).not.toContain('deep.corp.example');
    // Refused before billing: no order, no service, nothing on the server.
    expect(await stack.db('orders').where({ account_id: bob.accountId })).toEqual([]);
    expect(await onServer('shop.example.org')).toBe(false);
    expect(await onServer('corp.example')).toBe(false);

    // Siblings and look-alikes are not nested.
    await orderZone(bob, 'example.net.example');
    await orderZone(bob, 'notexample.org');

    // Alice nests her own zone: the server answers its names from the more specific zone.
    await orderZone(alice, 'dev.example.org');
    const put = await stack.http.put('/v1/dns/zones/dev.example.org/records/www/A', { token: alice.token, body: { values: ['192.0.2.77'] } });
    expect(put.status, put.text).toBe(200);
    expect(await resolver().resolve4('www.dev.example.org')).toEqual(['192.0.2.77']);
    expect((await stack.http.get('/v1/dns/zones/example.org', { token: alice.token })).body.service_id).toBe(aliceZone);
  });

  it("a pending (unpaid) order holds its zone against another account's sub-zone", async () => {
    const product = await stack.db('products').where({ slug: 'dns-zone' }).first();
    await stack.db('orders').insert({
      account_id: alice.accountId,
      operation_id: 'op_pending_zone_order',
      product_id: product.id,
      product: 'dns-zone',
      billing_cycle: 'monthly',
      options: JSON.stringify({ zone: 'pending.example' }),
      payment_method: 'card',
      currency: 'EUR',
      price: 1,
      status: 'pending',
    });
    await expectRefused(bob, 'www.pending.example', 'hostname_taken');
    await expectRefused(bob, 'pending.example', 'hostname_taken');
  });

  it("refuses public suffixes (ICANN and private entries) and the platform's own names", async () => {
    const ordersBefore = (await stack.db('orders').where({ account_id: bob.accountId })).length;
    for (const zone of ['co.uk', 'github.io', 'GitHub.IO.', 's3.amazonaws.com', 'xn--55qx5d.cn']) {
      await expectRefused(bob, zone, 'validation_failed', /is a public suffix/);
    }
    // A bare TLD stays a bad name, whether the list knows it or not.
    for (const zone of ['org', 'test']) await expectRefused(bob, zone, 'validation_failed');
    // The name servers' domain (ns1.dns-test.example.net), anything in it, and DNS_RESERVED_ZONES.
    for (const zone of ['example.net', 'dns-test.example.net', 'foo.localhost', '2.0.192.in-addr.arpa', 'printer.local']) {
      await expectRefused(bob, zone, 'hostname_taken', /reserved for the platform's own use/);
    }
    expect(await stack.db('orders').where({ account_id: bob.accountId })).toHaveLength(ordersBefore);
    // Strictly below a public suffix is a zone like any other; reserved-TLD test names keep working.
    await orderZone(bob, 'bobs-pages.github.io');
    await orderZone(bob, 'shop.example.test');
  });
});

describe('claiming a zone where it is provisioned', () => {
  it("refuses another account's zone, sub-zone and parent, a public suffix and a reserved name, whatever the order said", async () => {
    for (const zone of ['example.org', 'api.example.org', 'corp.example', 'co.uk', 'ns.example.net']) {
      const { serviceId, res } = await claimWithoutOrder(bob.accountId, zone);
      expect(res.status, `${zone}: ${res.text}`).toBe(409);
      expect(res.body.error.code).toBe('conflict');
      expect(await stack.db('dns_zones').where({ service_id: serviceId })).toEqual([]);
    }
    expect(await onServer('api.example.org')).toBe(false);
    expect(await onServer('co.uk')).toBe(false);
    // The account that holds example.org may nest a zone there without an order too.
    const own = await claimWithoutOrder(alice.accountId, 'api.example.org');
    expect(own.res.status, own.res.text).toBe(200);
    expect(await onServer('api.example.org')).toBe(true);
  });

  it('of two accounts racing for a zone and its sub-zone, exactly one gets it', async () => {
    for (let i = 0; i < 6; i++) {
      const [parent, child] = await Promise.all([
        claimWithoutOrder(alice.accountId, `race${i}.example`),
        claimWithoutOrder(bob.accountId, `www.race${i}.example`),
      ]);
      expect([parent.res.status, child.res.status].sort(), `race${i}`).toEqual([200, 409]);
    }
  });

  it('of two accounts ordering a zone and its sub-zone at once, exactly one order is accepted', async () => {
    for (let i = 0; i < 6; i++) {
      const zone = `order-race${i}.example`;
      const answers = await Promise.all([
        placeOrder(stack, alice, { product: 'dns-zone', options: { zone } }),
        placeOrder(stack, bob, { product: 'dns-zone', options: { zone: `shop.${zone}` } }),
      ]);
      expect(answers.map((a) => a.status).sort(), `${zone}: ${answers.map((a) => a.text).join(' ')}`).toEqual([202, 400]);
      expect(answers.find((a) => a.status === 400)!.body.error).toMatchObject({ code: 'hostname_taken', param: 'options.zone' });
    }
  });
});

describe('a suspended zone', () => {
  it('refuses every record write with 409 naming the status; reads stay available', async () => {
    const serviceId = await orderZone(alice, 'suspended.example');
    const path = '/v1/dns/zones/suspended.example/records';
    expect((await stack.http.put(`${path}/www/A`, { token: alice.token, body: { values: ['192.0.2.1'] } })).status).toBe(200);
    expect((await stack.http.post(`/_dev/services/${serviceId}/suspend`)).body.status).toBe('suspended');

    const writes = [
      stack.http.put(`${path}/www/A`, { token: alice.token, body: { values: ['192.0.2.66'] } }),
      stack.http.delete(`${path}/www/A`, { token: alice.token }),
      stack.http.patch(path, { token: alice.token, body: { records: [{ name: 'evil', type: 'A', values: ['192.0.2.66'] }] } }),
    ];
    for (const res of await Promise.all(writes)) {
      expect(res.status, res.text).toBe(409);
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'conflict' });
      expect(res.body.error.message).toContain('this service is suspended by billing');
    }
    expect(await resolver().resolve4('www.suspended.example')).toEqual(['192.0.2.1']);
    await expect(resolver().resolve4('evil.suspended.example')).rejects.toMatchObject({ code: 'ENOTFOUND' });
    expect((await stack.http.get(path, { token: alice.token })).status).toBe(200);
    expect((await stack.http.get(`${path}/www/A`, { token: alice.token })).body.values).toEqual(['192.0.2.1']);

    expect((await stack.http.post(`/_dev/services/${serviceId}/unsuspend`)).body.status).toBe('active');
    expect((await stack.http.put(`${path}/www/A`, { token: alice.token, body: { values: ['192.0.2.2'] } })).status).toBe(200);
  });
});
