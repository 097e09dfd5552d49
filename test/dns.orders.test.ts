import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedDns } from '../db/seeds/dns.seed';
import { seedOrders } from '../db/seeds/orders.seed';
import { BackendGoneError } from '../providers/errors';
import { createService } from './helpers/fixtures';
import { startTestPowerDns, TEST_ZONE_DEFAULTS } from './helpers/powerdns';
import type { Stack } from './helpers/stack';
import { newCustomer, placeOrder, waitFor } from './orders.support';
import { resolverFor, startDnsStack, type DnsStack } from './dns.support';

/**
 * The `dns-zone` product on a real PowerDNS, through the order workflow (Temporal dev server):
 * ordering creates the zone on the server, terminating the service deletes it; the seed's zone.
 */
let env: DnsStack;
let stack: Stack;
beforeAll(async () => {
  env = await startDnsStack({ env: { TEARDOWN_SWEEP_INTERVAL: '200ms' } });
  stack = env.stack;
  await seedOrders(stack.db);
});
afterAll(async () => {
  await env?.close();
});

const opStatus = async (token: string, id: string) => (await stack.http.get(`/v1/operations/${id}`, { token })).body;

describe('ordering a dns-zone', () => {
  it('creates the zone on the server with the configured SOA and NS; terminating the service deletes it and frees the name', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'Shop-Bücher.Example.' } });
    expect(res.status, res.text).toBe(202);
    const done = await waitFor(
      () => opStatus(c.token, res.body.id),
      (op) => op.status === 'succeeded' || op.status === 'failed',
      30_000,
      200,
    );
    expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
    const serviceId = done.result.service.id;
    const zone = 'xn--shop-bcher-feb.example';
    expect(done.result.service.label).toBe(zone);

    const info = await env.pdns.adapter.zoneInfo(zone);
    expect(info).toMatchObject({ name: zone, kind: 'native', nameservers: TEST_ZONE_DEFAULTS.nameservers, recordCount: 3 });
    const soa = await resolverFor(env.pdns.server.dnsAddress).resolveSoa(zone);
    expect(soa).toMatchObject({ nsname: TEST_ZONE_DEFAULTS.nameservers[0], hostmaster: TEST_ZONE_DEFAULTS.hostmaster, serial: info.serial });

    const listed = await stack.http.get('/v1/dns/zones', { token: c.token });
    expect(listed.body.data).toEqual([expect.objectContaining({ name: zone, service_id: serviceId, serial: null, record_count: null })]);
    const one = await stack.http.get(`/v1/dns/zones/${encodeURIComponent('shop-bücher.example')}`, { token: c.token });
    expect(one.body).toMatchObject({ name: zone, serial: info.serial, record_count: 3 });
    const put = await stack.http.put(`/v1/dns/zones/${zone}/records/www/A`, { token: c.token, body: { values: ['192.0.2.44'] } });
    expect(put.status).toBe(200);
    expect(await resolverFor(env.pdns.server.dnsAddress).resolve4(`www.${zone}`)).toEqual(['192.0.2.44']);

    // Another account cannot order a zone that is hosted here.
    const rival = await newCustomer(stack);
    const taken = await placeOrder(stack, rival, { product: 'dns-zone', options: { zone: 'SHOP-BÜCHER.example' } });
    expect(taken.status).toBe(400);
    expect(taken.body.error).toMatchObject({ code: 'hostname_taken', param: 'options.zone' });
    const bad = await placeOrder(stack, rival, { product: 'dns-zone', options: { zone: 'not a zone' } });
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'options.zone' });

    // Billing terminates the service: the teardown deletes the zone from the server.
    expect((await stack.http.post(`/_dev/services/${serviceId}/terminate`, { body: {} })).status).toBe(200);
    const gone = await waitFor(
      () =>
        env.pdns.adapter.zoneInfo(zone).then(
          () => false,
          (err: unknown) => err instanceof BackendGoneError,
        ),
      (g) => g,
      20_000,
      200,
    );
    expect(gone).toBe(true);
    await expect(resolverFor(env.pdns.server.dnsAddress).resolve4(`www.${zone}`)).rejects.toMatchObject({ code: 'EREFUSED' });
    await waitFor(
      () => stack.db('dns_zones').where({ name: zone }).first(),
      (row) => row === undefined,
      10_000,
      100,
    );
    expect((await stack.http.get('/v1/dns/zones', { token: c.token })).body.data).toEqual([]);
    expect((await stack.http.get(`/v1/dns/zones/${zone}`, { token: c.token })).status).toBe(404);

    // The name is free again.
    const again = await placeOrder(stack, rival, { product: 'dns-zone', options: { zone } });
    expect(again.status, again.text).toBe(202);
    const second = await waitFor(
      () => opStatus(rival.token, again.body.id),
      (op) => op.status === 'succeeded' || op.status === 'failed',
      30_000,
      200,
    );
    expect(second.status).toBe('succeeded');
    expect((await env.pdns.adapter.zoneInfo(zone)).recordCount).toBe(3);
  });
});

describe('seed', () => {
  it('gives the seeded dns service its zone on the real server, with demo records the server answers', async () => {
    await createService(stack.db, stack.owner.accountId, { family: 'dns', label: 'example.test', product: 'dns-zone' });
    await seedDns(stack.db, stack.api.deps.providers, stack.config);
    await seedDns(stack.db, stack.api.deps.providers, stack.config);
    const r = resolverFor(env.pdns.server.dnsAddress);
    expect(await r.resolve4('www.example.test')).toEqual(['192.0.2.10']);
    expect((await r.resolveMx('example.test')).map(({ exchange, priority }) => ({ exchange, priority }))).toEqual([
      { exchange: 'mail.example.test', priority: 10 },
    ]);
    const zone = await stack.http.get('/v1/dns/zones/example.test', { token: stack.owner.key });
    expect(zone.body).toMatchObject({ name: 'example.test', record_count: 6 });
  });

  it("puts the seeded zone on a second checkout's own server too: one database, two PowerDNS data dirs", async () => {
    // Every checkout on a machine shares the `cloud` database, but each runs its own PowerDNS.
    const second = await startTestPowerDns();
    try {
      const service = await createService(stack.db, stack.owner.accountId, { family: 'dns', label: 'two-checkouts.test', product: 'dns-zone' });
      const first = stack.api.deps.providers;
      await seedDns(stack.db, first, stack.config);
      const ofSecond = { ...first, dns: second.adapter };
      // The zone's row is there already (the first checkout's seed wrote it); the second server lacks the zone.
      await expect(second.adapter.zoneInfo('two-checkouts.test')).rejects.toBeInstanceOf(BackendGoneError);
      await seedDns(stack.db, ofSecond, stack.config);
      await seedDns(stack.db, ofSecond, stack.config);
      const r = resolverFor(second.server.dnsAddress);
      expect(await r.resolve4('www.two-checkouts.test')).toEqual(['192.0.2.10']);
      expect((await second.adapter.listRRsets('two-checkouts.test')).map((rr) => rr.type).sort()).toEqual(['A', 'MX', 'NS', 'SOA', 'TXT']);
      // Still one zone row, the same service's, and the first server keeps its copy.
      expect(await stack.db('dns_zones').where({ name: 'two-checkouts.test' }).select('service_id')).toEqual([{ service_id: service.serviceId }]);
      expect(await resolverFor(env.pdns.server.dnsAddress).resolve4('www.two-checkouts.test')).toEqual(['192.0.2.10']);
    } finally {
      await second.close();
    }
  });
});
