import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseZoneFile } from '../providers/dns.zone-file';
import { startStack, type Stack } from './helpers/stack';
import { setBackendDown } from './orders.support';
import { newZone } from './dns.support';

/** DNS_BACKEND=simulator: the same endpoints over the PostgreSQL simulator, outage switch included. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { DNS_BACKEND: 'simulator', SIM_DELAY_SCALE: '0' } });
});
afterAll(async () => {
  await stack?.close();
});

describe('DNS on the simulator', () => {
  it('serves zones, RRsets with ETags, If-Match, PATCH and export from PostgreSQL', async () => {
    const token = stack.owner.key;
    const { zone } = await newZone(stack, 'sim.example');
    expect(await stack.db('sim_dns_zones').where({ name: zone }).first()).toBeTruthy();
    const z0 = (await stack.http.get(`/v1/dns/zones/${zone}`, { token })).body;
    expect(z0).toMatchObject({ name: zone, kind: 'native', record_count: 3, nameservers: ['ns1.cloud.test', 'ns2.cloud.test'] });

    const put = await stack.http.put(`/v1/dns/zones/${zone}/records/www/A`, { token, body: { values: ['192.0.2.1'] } });
    expect(put.status).toBe(200);
    const etag = put.headers.get('etag')!;
    expect((await stack.http.get(`/v1/dns/zones/${zone}`, { token })).body.serial).toBeGreaterThan(z0.serial);
    expect((await stack.http.get(`/v1/dns/zones/${zone}/records`, { token })).headers.get('etag')).toBe(etag);
    await stack.http.put(`/v1/dns/zones/${zone}/records/mx/MX`, { token, body: { values: ['10 mail.example.net'] } });
    expect(
      (await stack.http.put(`/v1/dns/zones/${zone}/records/www/A`, { token, body: { values: ['192.0.2.2'] }, headers: { 'if-match': etag } })).status,
    ).toBe(412);
    expect((await stack.http.put(`/v1/dns/zones/${zone}/records/www/CNAME`, { token, body: { values: ['x.example.net'] } })).status).toBe(409);

    const patch = await stack.http.patch(`/v1/dns/zones/${zone}/records`, {
      token,
      body: {
        records: [
          { name: 't', type: 'TXT', values: ['hi'] },
          { name: 'www', type: 'A', values: ['bad'] },
        ],
      },
    });
    expect(patch.body.error).toMatchObject({ param: 'records.1.values.0', applied: 1 });

    const exported = await stack.http.get(`/v1/dns/zones/${zone}/export`, { token });
    expect(exported.headers.get('content-type')).toMatch(/^text\/plain/);
    const listed = (await stack.http.get(`/v1/dns/zones/${zone}/records`, { token })).body.data;
    expect(parseZoneFile(exported.text).filter((r) => r.type !== 'SOA')).toHaveLength(listed.length);
    expect(exported.text).toContain(`t.${zone}.\t3600\tIN\tTXT\t"hi"\n`);

    await setBackendDown(stack, 'dns', true);
    try {
      expect((await stack.http.get('/v1/dns/zones', { token })).status).toBe(200);
      expect((await stack.http.get(`/v1/dns/zones/${zone}`, { token })).body).toMatchObject({ serial: null, record_count: null });
      expect((await stack.http.put(`/v1/dns/zones/${zone}/records/www/A`, { token, body: { values: ['192.0.2.3'] } })).status).toBe(503);
      expect((await stack.http.get(`/v1/dns/zones/${zone}/records`, { token })).status).toBe(503);
      // DECISIONS "DNS": a PATCH refused by the outage names the element that did not apply, like any other failure.
      const refused = await stack.http.patch(`/v1/dns/zones/${zone}/records`, {
        token,
        body: { records: [{ name: 'www', type: 'A', values: ['192.0.2.3'] }] },
      });
      expect(refused.status).toBe(503);
      expect(refused.body.error).toMatchObject({ code: 'backend_unavailable', param: 'records.0', applied: 0 });
    } finally {
      await setBackendDown(stack, 'dns', false);
    }
  });
});
