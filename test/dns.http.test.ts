import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseZoneFile } from '../providers/dns.zone-file';
import { PowerDnsServer } from '../providers/powerdns/powerdns.server';
import { createAccount, createApiKey, createService } from './helpers/fixtures';
import { TEST_ZONE_DEFAULTS } from './helpers/powerdns';
import type { Stack } from './helpers/stack';
import { setBackendDown } from './orders.support';
import { newZone, resolverFor, startDnsStack, type DnsStack } from './dns.support';

/**
 * The eight DNS endpoints over HTTP, against a real PowerDNS (one for this file): what the API
 * writes is what the DNS server answers over UDP.
 */
let env: DnsStack;
let stack: Stack;
let token: string;
beforeAll(async () => {
  env = await startDnsStack({ temporal: 'none' });
  stack = env.stack;
  token = stack.owner.key;
});
afterAll(async () => {
  await env?.close();
});

const resolver = () => resolverFor(env.pdns.server.dnsAddress);
const records = (zone: string, rest = '') => `/v1/dns/zones/${encodeURIComponent(zone)}/records${rest}`;
let counter = 0;
const uniqueZone = (prefix: string) => `${prefix}${++counter}-${process.pid}.example`;

describe('zones', () => {
  it('lists zones from the database with serial and record_count null, newest first, only visible ones', async () => {
    const a = await newZone(stack, uniqueZone('list-a'));
    const b = await newZone(stack, uniqueZone('list-b'));
    const ended = await newZone(stack, uniqueZone('list-gone'));
    await stack.db('services').where({ id: ended.serviceId }).update({ status: 'terminated' });
    const other = await createService(stack.db, (await createAccount(stack.db)).accountId, { family: 'dns', label: uniqueZone('theirs') });
    await stack.http.post(`/_dev/dns/${other.id}/zone`, { body: {} });

    const res = await stack.http.get('/v1/dns/zones?limit=100', { token });
    expect(res.status).toBe(200);
    const names = res.body.data.map((z: any) => z.name);
    expect(names.indexOf(b.zone)).toBeLessThan(names.indexOf(a.zone));
    expect(names).not.toContain(ended.zone);
    expect(names.some((n: string) => n.startsWith('theirs'))).toBe(false);
    expect(res.body.data.find((z: any) => z.name === a.zone)).toEqual({
      object: 'dns_zone',
      name: a.zone,
      service_id: a.id,
      kind: 'native',
      serial: null,
      record_count: null,
      nameservers: TEST_ZONE_DEFAULTS.nameservers,
      created_at: expect.any(String),
    });

    // A key restricted to one service sees that zone only.
    const limited = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['dns:read'], allowlist: [a.serviceId] });
    const only = await stack.http.get('/v1/dns/zones', { token: limited.token });
    expect(only.body.data.map((z: any) => z.name)).toEqual([a.zone]);
    expect((await stack.http.get(`/v1/dns/zones/${b.zone}`, { token: limited.token })).status).toBe(404);
  });

  it('reads one zone live from the server, under any spelling of its name', async () => {
    const { zone, id } = await newZone(stack, uniqueZone('Live-'));
    const res = await stack.http.get(`/v1/dns/zones/${zone.toUpperCase()}.`, { token });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      object: 'dns_zone',
      name: zone,
      service_id: id,
      kind: 'native',
      record_count: 3,
      nameservers: TEST_ZONE_DEFAULTS.nameservers,
    });
    expect(res.body.serial).toBe((await env.pdns.adapter.zoneInfo(zone)).serial);

    const idn = await newZone(stack, `bücher-${process.pid}.example`);
    expect(idn.zone.startsWith('xn--')).toBe(true);
    expect((await stack.http.get(`/v1/dns/zones/${encodeURIComponent(`Bücher-${process.pid}.Example.`)}`, { token })).body.name).toBe(idn.zone);

    for (const missing of ['never.example', 'not a zone', 'a..b', `${zone}x`]) {
      const r = await stack.http.get(`/v1/dns/zones/${encodeURIComponent(missing)}`, { token });
      expect(r.status, missing).toBe(404);
      expect(r.body.error.code).toBe('not_found');
    }
  });

  it('exports the zone file as the server writes it, as text/plain, and it reads back as the records', async () => {
    const { zone } = await newZone(stack, uniqueZone('export'));
    await stack.http.put(records(zone, '/www/A'), { token, body: { ttl: 300, values: ['192.0.2.1', '192.0.2.2'] } });
    await stack.http.put(records(zone, '/@/TXT'), { token, body: { values: ['v=spf1 -all', 'x'.repeat(300)] } });
    const res = await stack.http.get(`/v1/dns/zones/${zone}/export`, { token });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(res.text).toBe(await env.pdns.adapter.exportZone(zone));
    expect(res.text).toContain(`www.${zone}.\t300\tIN\tA\t192.0.2.1\n`);
    expect(res.text).toMatch(new RegExp(`^${zone.replace(/\./g, '\\.')}\\.\\t3600\\tIN\\tSOA\\tns1\\.dns-test\\.example\\.net\\. `, 'm'));

    const listed = (await stack.http.get(records(zone, '?limit=100'), { token })).body.data;
    const parsed = parseZoneFile(res.text).filter((r) => r.type !== 'SOA');
    expect(parsed.map((r) => ({ fqdn: r.name, type: r.type, ttl: r.ttl, values: r.values }))).toEqual(
      expect.arrayContaining(listed.map((r: any) => ({ fqdn: r.fqdn, type: r.type, ttl: r.ttl, values: r.values }))),
    );
    expect(parsed).toHaveLength(listed.length);
  });
});

describe('records', () => {
  it('lists RRsets grouped by name and type with a strong ETag, in pages, without the SOA', async () => {
    const { zone } = await newZone(stack, uniqueZone('rrsets'));
    await stack.http.patch(records(zone), {
      token,
      body: {
        records: [
          { name: 'www', type: 'A', ttl: 300, values: ['192.0.2.1', '192.0.2.2'] },
          { name: 'www', type: 'AAAA', values: ['2001:db8::1'] },
          { name: '@', type: 'MX', values: ['10 mail.example.net'] },
          { name: 'a.b', type: 'TXT', values: ['hello'] },
        ],
      },
    });
    const res = await stack.http.get(records(zone), { token });
    expect(res.status).toBe(200);
    const etag = res.headers.get('etag');
    expect(etag).toMatch(/^"[A-Za-z0-9_-]+"$/);
    expect(res.body.data.map((r: any) => `${r.name} ${r.type}`)).toEqual(['@ MX', '@ NS', 'a.b TXT', 'www A', 'www AAAA']);
    expect(res.body.data[3]).toEqual({ object: 'dns_rrset', name: 'www', fqdn: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.1', '192.0.2.2'] });
    expect(res.body.data[2]).toMatchObject({ values: ['"hello"'], ttl: 3600 });

    const page1 = await stack.http.get(records(zone, '?limit=2'), { token });
    expect(page1.body).toMatchObject({ has_more: true, next_cursor: expect.any(String) });
    const page2 = await stack.http.get(records(zone, `?limit=2&cursor=${encodeURIComponent(page1.body.next_cursor)}`), { token });
    const page3 = await stack.http.get(records(zone, `?limit=2&cursor=${encodeURIComponent(page2.body.next_cursor)}`), { token });
    expect([...page1.body.data, ...page2.body.data, ...page3.body.data].map((r: any) => `${r.name} ${r.type}`)).toEqual(
      res.body.data.map((r: any) => `${r.name} ${r.type}`),
    );
    expect(page3.body.has_more).toBe(false);
    expect(page2.headers.get('etag')).toBe(etag);
  });

  it('reads one RRset by relative, @ or absolute name and any type case; 404 when absent; 400 for a name outside the zone or an unknown type', async () => {
    const { zone } = await newZone(stack, uniqueZone('one'));
    await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.7'] } });
    const listEtag = (await stack.http.get(records(zone), { token })).headers.get('etag');
    for (const path of ['/www/A', '/www/a', `/www.${zone}/A`, `/www.${zone.toUpperCase()}./A`]) {
      const res = await stack.http.get(records(zone, path), { token });
      expect(res.status, path).toBe(200);
      expect(res.body).toEqual({ object: 'dns_rrset', name: 'www', fqdn: `www.${zone}`, type: 'A', ttl: 3600, values: ['192.0.2.7'] });
      expect(res.headers.get('etag')).toBe(listEtag);
    }
    expect((await stack.http.get(records(zone, '/@/NS'), { token })).body.values).toEqual(TEST_ZONE_DEFAULTS.nameservers.map((n) => `${n}.`));
    expect((await stack.http.get(records(zone, '/nope/A'), { token })).status).toBe(404);
    const outside = await stack.http.get(records(zone, '/www.example.com./A'), { token });
    expect(outside.status).toBe(400);
    expect(outside.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
    const soa = await stack.http.get(records(zone, '/@/SOA'), { token });
    expect(soa.body.error).toMatchObject({ code: 'validation_failed', param: 'type' });
  });

  it('PUT replaces the RRset, in canonical form, and the DNS server answers it over UDP with a higher serial', async () => {
    const { zone } = await newZone(stack, uniqueZone('put'));
    const r = resolver();
    const serial0 = (await r.resolveSoa(zone)).serial;
    const first = await stack.http.put(records(zone, '/www/A'), { token, body: { ttl: 120, values: ['192.0.2.10', '192.0.2.11'] } });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ object: 'dns_rrset', name: 'www', fqdn: `www.${zone}`, type: 'A', ttl: 120, values: ['192.0.2.10', '192.0.2.11'] });
    expect(first.headers.get('etag')).toMatch(/^".+"$/);
    expect((await r.resolve4(`www.${zone}`)).sort()).toEqual(['192.0.2.10', '192.0.2.11']);
    const serial1 = (await r.resolveSoa(zone)).serial;
    expect(serial1).toBeGreaterThan(serial0);

    const second = await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.12'] } });
    expect(second.body.values).toEqual(['192.0.2.12']);
    expect(second.headers.get('etag')).not.toBe(first.headers.get('etag'));
    expect(await r.resolve4(`www.${zone}`)).toEqual(['192.0.2.12']);
    expect((await r.resolveSoa(zone)).serial).toBeGreaterThan(serial1);

    const typed = await stack.http.put(records(zone, '/@/MX'), { token, body: { values: ['10 Mail.Example.NET', '20 backup.example.net.'] } });
    expect(typed.body.values).toEqual(['10 mail.example.net.', '20 backup.example.net.']);
    expect((await r.resolveMx(zone)).map(({ exchange, priority }) => ({ exchange, priority })).sort((a, b) => a.priority - b.priority)).toEqual([
      { exchange: 'mail.example.net', priority: 10 },
      { exchange: 'backup.example.net', priority: 20 },
    ]);
    const long = 'v=DKIM1; k=rsa; p=' + 'A'.repeat(400);
    const txt = await stack.http.put(records(zone, '/sel._domainkey/TXT'), { token, body: { values: [long] } });
    expect(txt.body.values).toEqual([`"${long.slice(0, 255)}" "${long.slice(255)}"`]);
    expect((await r.resolveTxt(`sel._domainkey.${zone}`))[0].join('')).toBe(long);
    const srv = await stack.http.put(records(zone, '/_sip._tcp/srv'), { token, body: { values: ['10 5 5060 sip.example.net'] } });
    expect(srv.body).toMatchObject({ name: '_sip._tcp', type: 'SRV', values: ['10 5 5060 sip.example.net.'] });
    expect((await r.resolveSrv(`_sip._tcp.${zone}`)).map(({ name, port, priority, weight }) => ({ name, port, priority, weight }))).toEqual([
      { name: 'sip.example.net', port: 5060, priority: 10, weight: 5 },
    ]);
    const caa = await stack.http.put(records(zone, '/@/CAA'), { token, body: { values: ['0 issue letsencrypt.org'] } });
    expect(caa.body.values).toEqual(['0 issue "letsencrypt.org"']);
    const v6 = await stack.http.put(records(zone, '/v6/AAAA'), { token, body: { values: ['2001:DB8:0:0::1'] } });
    expect(v6.body.values).toEqual(['2001:db8::1']);
    expect(await r.resolve6(`v6.${zone}`)).toEqual(['2001:db8::1']);
    const cname = await stack.http.put(records(zone, '/alias/CNAME'), { token, body: { values: [`www.${zone}`] } });
    expect(cname.body.values).toEqual([`www.${zone}.`]);
    expect(await r.resolveCname(`alias.${zone}`)).toEqual([`www.${zone}`]);
    const ptr = await stack.http.put(records(zone, '/7/PTR'), { token, body: { values: ['host.example.net'] } });
    expect(ptr.body.values).toEqual(['host.example.net.']);
    const ns = await stack.http.put(records(zone, '/sub/NS'), { token, body: { values: ['ns.other.example.net'] } });
    expect(ns.body.values).toEqual(['ns.other.example.net.']);
  });

  it('PUT refuses bad values at values.N, a TTL out of range, a CNAME beside other data (409), and changes nothing', async () => {
    const { zone } = await newZone(stack, uniqueZone('bad'));
    await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } });
    const etag = (await stack.http.get(records(zone), { token })).headers.get('etag');
    const cases: Array<[string, unknown, number, string, string | null]> = [
      ['/www/A', { values: ['192.0.2.1', '300.1.1.1'] }, 400, 'validation_failed', 'values.1'],
      ['/www/AAAA', { values: ['192.0.2.1'] }, 400, 'validation_failed', 'values.0'],
      ['/m/MX', { values: ['mail.example.net'] }, 400, 'validation_failed', 'values.0'],
      ['/s/SRV', { values: ['1 2 70000 x.example.net'] }, 400, 'validation_failed', 'values.0'],
      ['/c/CAA', { values: ['0 iodef "nope"'] }, 400, 'validation_failed', 'values.0'],
      ['/t/TXT', { values: ['"unclosed'] }, 400, 'validation_failed', 'values.0'],
      ['/www/A', { values: ['192.0.2.1', '192.0.2.1'] }, 400, 'validation_failed', 'values.1'],
      ['/www/A', { ttl: 59, values: ['192.0.2.1'] }, 400, 'validation_failed', 'ttl'],
      ['/www/A', { ttl: 86_401, values: ['192.0.2.1'] }, 400, 'validation_failed', 'ttl'],
      ['/www/A', { values: [] }, 400, 'validation_failed', 'values'],
      ['/www/A', { values: ['192.0.2.1'], extra: 1 }, 400, 'validation_failed', null],
      ['/www/CNAME', { values: ['other.example.net'] }, 409, 'conflict', null],
      ['/@/CNAME', { values: ['other.example.net'] }, 409, 'conflict', null],
      ['/www/HINFO', { values: ['x'] }, 400, 'validation_failed', 'type'],
      ['/a..b/A', { values: ['192.0.2.1'] }, 400, 'validation_failed', 'name'],
    ];
    for (const [path, body, status, code, param] of cases) {
      const res = await stack.http.put(records(zone, path), { token, body });
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBe(status);
      expect(res.body.error.code).toBe(code);
      if (param !== null) expect(res.body.error.param, path).toBe(param);
    }
    await stack.http.put(records(zone, '/alias/CNAME'), { token, body: { values: ['x.example.net'] } });
    const beside = await stack.http.put(records(zone, '/alias/TXT'), { token, body: { values: ['x'] } });
    expect(beside.status).toBe(409);
    // Nothing but the CNAME was written.
    const after = await stack.http.get(records(zone), { token });
    expect(after.body.data.map((r: any) => `${r.name} ${r.type}`)).toEqual(['@ NS', 'alias CNAME', 'www A']);
    expect(after.headers.get('etag')).not.toBe(etag);
  });

  it('If-Match: a stale or weak ETag gets 412 and changes nothing; the current one applies', async () => {
    const { zone } = await newZone(stack, uniqueZone('ifmatch'));
    const before = (await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).headers.get('etag')!;
    const moved = (await stack.http.put(records(zone, '/other/A'), { token, body: { values: ['192.0.2.2'] } })).headers.get('etag')!;
    const stale = await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.99'] }, headers: { 'if-match': before } });
    expect(stale.status).toBe(412);
    expect(stale.body.error).toMatchObject({ type: 'invalid_request_error', code: 'precondition_failed' });
    expect((await stack.http.get(records(zone, '/www/A'), { token })).body.values).toEqual(['192.0.2.1']);
    expect((await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.99'] }, headers: { 'if-match': `W/${moved}` } })).status).toBe(
      412,
    );
    expect((await stack.http.delete(records(zone, '/www/A'), { token, headers: { 'if-match': before } })).status).toBe(412);
    expect(
      (await stack.http.patch(records(zone), { token, body: { records: [{ name: 'n', type: 'A', values: ['192.0.2.3'] }] }, headers: { 'if-match': before } }))
        .status,
    ).toBe(412);
    expect((await stack.http.get(records(zone, '/n/A'), { token })).status).toBe(404);

    const ok = await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.99'] }, headers: { 'if-match': moved } });
    expect(ok.status).toBe(200);
    expect(
      (await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.98'] }, headers: { 'if-match': `"nope", ${ok.headers.get('etag')}` } }))
        .status,
    ).toBe(200);
  });

  it('a change made on PowerDNS directly (pdnsutil) invalidates the ETag', async () => {
    const { zone } = await newZone(stack, uniqueZone('direct'));
    const etag = (await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).headers.get('etag')!;
    const direct = spawnSync('pdnsutil', [`--config-dir=${env.pdns.dataDir}`, 'replace-rrset', zone, 'www', 'A', '300', '192.0.2.66'], { encoding: 'utf8' });
    expect(direct.status, direct.stderr).toBe(0);
    const res = await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.2'] }, headers: { 'if-match': etag } });
    expect(res.status).toBe(412);
    expect((await stack.http.get(records(zone, '/www/A'), { token })).body.values).toEqual(['192.0.2.66']);
  });

  it('concurrent PUTs with the same If-Match: exactly one wins', async () => {
    const { zone } = await newZone(stack, uniqueZone('race'));
    const etag = (await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).headers.get('etag')!;
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        stack.http.put(records(zone, i % 2 ? '/www/A' : `/n${i}/A`), { token, body: { values: [`192.0.2.${i + 10}`] }, headers: { 'if-match': etag } }),
      ),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 412, 412, 412, 412, 412, 412, 412]);
    const winner = results.find((r) => r.status === 200)!;
    expect((await stack.http.get(records(zone), { token })).headers.get('etag')).toBe(winner.headers.get('etag'));
  });

  it('DELETE removes the RRset (the server stops answering it), answers 204 with the new ETag, and 404 when there is none', async () => {
    const { zone } = await newZone(stack, uniqueZone('del'));
    await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } });
    await stack.http.put(records(zone, '/www/TXT'), { token, body: { values: ['keep me'] } });
    const r = resolver();
    expect(await r.resolve4(`www.${zone}`)).toEqual(['192.0.2.1']);
    const serial = (await r.resolveSoa(zone)).serial;
    const before = (await stack.http.get(records(zone), { token })).headers.get('etag')!;
    const res = await stack.http.delete(records(zone, '/www/a'), { token, headers: { 'if-match': before } });
    expect(res.status).toBe(204);
    expect(res.headers.get('etag')).toBe((await stack.http.get(records(zone), { token })).headers.get('etag'));
    expect(res.headers.get('etag')).not.toBe(before);
    await expect(r.resolve4(`www.${zone}`)).rejects.toMatchObject({ code: 'ENODATA' });
    expect(await r.resolveTxt(`www.${zone}`)).toEqual([['keep me']]);
    expect((await r.resolveSoa(zone)).serial).toBeGreaterThan(serial);
    expect((await stack.http.delete(records(zone, '/www/A'), { token })).status).toBe(404);
    await stack.http.delete(records(zone, '/www/TXT'), { token });
    await expect(r.resolveTxt(`www.${zone}`)).rejects.toMatchObject({ code: 'ENOTFOUND' });
  });

  it('PATCH applies in order; the first failing element stops it with param records.N and applied: N, earlier ones stay', async () => {
    const { zone } = await newZone(stack, uniqueZone('patch'));
    await stack.http.put(records(zone, '/old/TXT'), { token, body: { values: ['bye'] } });
    const ok = await stack.http.patch(records(zone), {
      token,
      body: {
        records: [
          { name: 'a', type: 'A', ttl: 60, values: ['192.0.2.1'] },
          { name: 'b', type: 'AAAA', values: ['2001:db8::2'] },
          { name: 'old', type: 'TXT', values: [] },
        ],
      },
    });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ object: 'dns_patch', applied: 3, etag: ok.headers.get('etag') });
    expect(ok.body.etag).toBe((await stack.http.get(records(zone), { token })).headers.get('etag'));
    expect((await stack.http.get(records(zone, '/old/TXT'), { token })).status).toBe(404);
    expect(await resolver().resolve4(`a.${zone}`)).toEqual(['192.0.2.1']);

    const bad = await stack.http.patch(records(zone), {
      token,
      body: {
        records: [
          { name: 'c', type: 'A', values: ['192.0.2.3'] },
          { name: 'd', type: 'A', values: ['192.0.2.4'] },
          { name: 'e', type: 'A', values: ['192.0.2.5', 'nope'] },
          { name: 'f', type: 'A', values: ['192.0.2.6'] },
        ],
      },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'records.2.values.1', applied: 2 });
    const names = (await stack.http.get(records(zone), { token })).body.data.map((r: any) => r.name);
    expect(names).toEqual(expect.arrayContaining(['c', 'd']));
    expect(names).not.toContain('e');
    expect(names).not.toContain('f');

    const conflict = await stack.http.patch(records(zone), {
      token,
      body: {
        records: [
          { name: 'g', type: 'A', values: ['192.0.2.7'] },
          { name: 'a', type: 'CNAME', values: ['x.example.net'] },
        ],
      },
    });
    expect(conflict.status).toBe(409);
    expect(conflict.body.error).toMatchObject({ code: 'conflict', param: 'records.1', applied: 1 });
    const ttl = await stack.http.patch(records(zone), { token, body: { records: [{ name: 'h', type: 'A', ttl: 5, values: ['192.0.2.8'] }] } });
    expect(ttl.body.error).toMatchObject({ param: 'records.0.ttl', applied: 0 });
    const name = await stack.http.patch(records(zone), { token, body: { records: [{ name: 'x.other.example.', type: 'A', values: ['192.0.2.8'] }] } });
    expect(name.body.error).toMatchObject({ param: 'records.0.name', applied: 0 });
    const type = await stack.http.patch(records(zone), { token, body: { records: [{ name: 'x', type: 'SOA', values: ['x'] }] } });
    expect(type.body.error).toMatchObject({ param: 'records.0.type', applied: 0 });
  });

  it('refuses records endpoints on a service without the capability (400 unsupported_for_product)', async () => {
    const { zone } = await newZone(stack, uniqueZone('nocap'), { capabilities: { records: false, export: false } });
    expect((await stack.http.get(records(zone), { token })).body.error.code).toBe('unsupported_for_product');
    expect((await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).body.error.code).toBe('unsupported_for_product');
    expect((await stack.http.get(`/v1/dns/zones/${zone}/export`, { token })).body.error.code).toBe('unsupported_for_product');
  });
});

describe('backend down', () => {
  it('with the outage switch: lists work, the zone GET has null live fields, records and writes answer 503', async () => {
    const { zone } = await newZone(stack, uniqueZone('outage'));
    await setBackendDown(stack, 'dns', true);
    try {
      expect((await stack.http.get('/v1/dns/zones', { token })).status).toBe(200);
      const one = await stack.http.get(`/v1/dns/zones/${zone}`, { token });
      expect(one.status).toBe(200);
      expect(one.body).toMatchObject({ name: zone, serial: null, record_count: null, nameservers: TEST_ZONE_DEFAULTS.nameservers });
      for (const res of [
        await stack.http.get(records(zone), { token }),
        await stack.http.get(records(zone, '/@/NS'), { token }),
        await stack.http.get(`/v1/dns/zones/${zone}/export`, { token }),
        await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } }),
        await stack.http.delete(records(zone, '/www/A'), { token }),
        await stack.http.patch(records(zone), { token, body: { records: [{ name: 'www', type: 'A', values: ['192.0.2.1'] }] } }),
      ]) {
        expect(res.status).toBe(503);
        expect(res.body.error).toMatchObject({ type: 'api_error', code: 'backend_unavailable' });
      }
      // DECISIONS "DNS": a refused PATCH names the element that did not apply, an outage included.
      const patch = await stack.http.patch(records(zone), { token, body: { records: [{ name: 'www', type: 'A', values: ['192.0.2.1'] }] } });
      expect(patch.body.error).toMatchObject({ param: 'records.0', applied: 0 });
    } finally {
      await setBackendDown(stack, 'dns', false);
    }
    expect((await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).status).toBe(200);
  });

  it('with PowerDNS itself stopped: the same, within the live-read bound', async () => {
    const { zone } = await newZone(stack, uniqueZone('stopped'));
    await env.pdns.server.stop();
    try {
      expect((await stack.http.get('/v1/dns/zones', { token })).status).toBe(200);
      const started = Date.now();
      const one = await stack.http.get(`/v1/dns/zones/${zone}`, { token });
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(one.body).toMatchObject({ serial: null, record_count: null });
      expect((await stack.http.get(records(zone), { token })).status).toBe(503);
      expect((await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).status).toBe(503);
    } finally {
      // Same ports again, so the stack's adapter finds it.
      const api = new URL(env.pdns.server.apiUrl);
      env.pdns.server = await PowerDnsServer.start({
        dataDir: env.pdns.dataDir,
        dnsAddress: env.pdns.server.dnsAddress,
        apiAddress: `${api.hostname}:${api.port}`,
      });
    }
    expect((await stack.http.put(records(zone, '/www/A'), { token, body: { values: ['192.0.2.1'] } })).status).toBe(200);
  });
});
