import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as dnsPromises } from 'node:dns';
import { readFileSync, statSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalValue } from '../domain/dns/values';
import { PowerDnsAdapter } from '../providers/powerdns/powerdns.adapter';
import { PowerDnsServer } from '../providers/powerdns/powerdns.server';
import { BackendGoneError, BackendUnavailableError } from '../providers/errors';
import { dnsProviderContract } from './dns.provider.contract';
import { startTestPowerDns, TEST_ZONE_DEFAULTS, type TestPowerDns } from './helpers/powerdns';

/** The DNS provider contract against a real PowerDNS (one server for this file), plus what only a real server shows. */
let pdns: TestPowerDns;
beforeAll(async () => {
  pdns = await startTestPowerDns();
});
afterAll(async () => {
  await pdns?.close();
});

describe('PowerDNS adapter: provider contract', () => {
  dnsProviderContract(() => pdns.adapter);
});

describe('PowerDNS answers what the API wrote, over UDP', () => {
  const resolver = () => {
    const r = new dnsPromises.Resolver({ timeout: 2_000, tries: 1 });
    r.setServers([pdns.server.dnsAddress]);
    return r;
  };
  const zone = `udp-${randomBytes(3).toString('hex')}.example`;

  it('serves a replaced RRset, stops serving a deleted one, and raises the SOA serial each time', async () => {
    await pdns.adapter.createZone(zone, TEST_ZONE_DEFAULTS);
    const r = resolver();
    const soa0 = await r.resolveSoa(zone);
    expect(soa0).toMatchObject({ nsname: 'ns1.dns-test.example.net', hostmaster: 'hostmaster.dns-test.example.net' });
    expect(await r.resolveNs(zone)).toEqual(expect.arrayContaining(TEST_ZONE_DEFAULTS.nameservers));

    await pdns.adapter.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.10', '192.0.2.11'] });
    expect((await r.resolve4(`www.${zone}`)).sort()).toEqual(['192.0.2.10', '192.0.2.11']);
    const soa1 = await r.resolveSoa(zone);
    expect(soa1.serial).toBeGreaterThan(soa0.serial);

    // Replaced again: the server answers the new values at once (the API purges its cache).
    await pdns.adapter.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 300, values: ['192.0.2.12'] });
    expect(await r.resolve4(`www.${zone}`)).toEqual(['192.0.2.12']);

    const txt = canonicalValue('TXT', 'é '.repeat(150), 'values.0');
    await pdns.adapter.replaceRRset(zone, { name: `t.${zone}`, type: 'TXT', ttl: 300, values: [txt] });
    const answered = await r.resolveTxt(`t.${zone}`);
    expect(Buffer.from(answered[0].join(''), 'latin1').toString('utf8')).toBe('é '.repeat(150));
    expect(answered[0]).toHaveLength(2); // 450 bytes: two strings of at most 255

    await pdns.adapter.replaceRRset(zone, { name: zone, type: 'MX', ttl: 300, values: ['10 mail.example.net.'] });
    expect((await r.resolveMx(zone)).map(({ exchange, priority }) => ({ exchange, priority }))).toEqual([{ exchange: 'mail.example.net', priority: 10 }]);

    await pdns.adapter.deleteRRset(zone, `www.${zone}`, 'A');
    await expect(r.resolve4(`www.${zone}`)).rejects.toMatchObject({ code: 'ENOTFOUND' });
    const soa2 = await r.resolveSoa(zone);
    expect(soa2.serial).toBeGreaterThan(soa1.serial);
    expect(soa2.serial).toBe((await pdns.adapter.zoneInfo(zone)).serial);
  });

  it('stops answering for a deleted zone', async () => {
    const gone = `gone-${randomBytes(3).toString('hex')}.example`;
    await pdns.adapter.createZone(gone, TEST_ZONE_DEFAULTS);
    await pdns.adapter.replaceRRset(gone, { name: `a.${gone}`, type: 'A', ttl: 60, values: ['192.0.2.1'] });
    expect(await resolver().resolve4(`a.${gone}`)).toEqual(['192.0.2.1']);
    await pdns.adapter.deleteZone(gone);
    await expect(resolver().resolve4(`a.${gone}`)).rejects.toMatchObject({ code: 'EREFUSED' });
  });

  it('changes the fingerprint when the zone is changed on the server directly (pdnsutil), not through the API', async () => {
    const direct = `direct-${randomBytes(3).toString('hex')}.example`;
    await pdns.adapter.createZone(direct, TEST_ZONE_DEFAULTS);
    await pdns.adapter.replaceRRset(direct, { name: `www.${direct}`, type: 'A', ttl: 300, values: ['192.0.2.1'] });
    const before = await pdns.adapter.fingerprint(direct);
    const result = spawnSync('pdnsutil', [`--config-dir=${pdns.dataDir}`, 'replace-rrset', direct, 'www', 'A', '300', '192.0.2.77'], { encoding: 'utf8' });
    expect(result.status, result.stderr).toBe(0);
    expect(await pdns.adapter.fingerprint(direct)).not.toBe(before);
    expect((await pdns.adapter.getRRset(direct, `www.${direct}`, 'A'))!.values).toEqual(['192.0.2.77']);
  });
});

describe('concurrent writers', () => {
  it('all land although the SQLite backend takes one writer at a time (two adapters, as API and worker are two processes)', async () => {
    const zone = `busy-${randomBytes(3).toString('hex')}.example`;
    await pdns.adapter.createZone(zone, TEST_ZONE_DEFAULTS);
    const other = new PowerDnsAdapter({ apiUrl: pdns.server.apiUrl, apiKey: pdns.server.apiKey });
    const serial = (await pdns.adapter.zoneInfo(zone)).serial;
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? other : pdns.adapter).replaceRRset(zone, { name: `n${i}.${zone}`, type: 'A', ttl: 300, values: [`192.0.2.${i + 1}`] }),
      ),
    );
    const rrsets = await pdns.adapter.listRRsets(zone);
    expect(rrsets.filter((r) => r.type === 'A')).toHaveLength(40);
    expect((await pdns.adapter.zoneInfo(zone)).serial).toBe(serial + 40);
  });
});

describe('the local PowerDNS server', () => {
  it('keeps its API key in a 0600 file and its configuration 0600, and reuses the key and the data on restart', async () => {
    const keyFile = path.join(pdns.dataDir, 'api-key');
    expect(statSync(keyFile).mode & 0o777).toBe(0o600);
    expect(statSync(path.join(pdns.dataDir, 'pdns.conf')).mode & 0o777).toBe(0o600);
    expect(readFileSync(keyFile, 'utf8').trim()).toBe(pdns.server.apiKey);
    expect(pdns.server.apiKey.length).toBeGreaterThanOrEqual(40);

    const zone = `restart-${randomBytes(3).toString('hex')}.example`;
    await pdns.adapter.createZone(zone, TEST_ZONE_DEFAULTS);
    await pdns.server.stop();
    await expect(pdns.adapter.zoneInfo(zone)).rejects.toBeInstanceOf(BackendUnavailableError);

    pdns.server = await PowerDnsServer.start({ dataDir: pdns.dataDir, dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' });
    expect(pdns.server.apiKey).toBe(readFileSync(keyFile, 'utf8').trim());
    pdns.adapter = new PowerDnsAdapter({ apiUrl: pdns.server.apiUrl, apiKey: pdns.server.apiKey });
    expect((await pdns.adapter.zoneInfo(zone)).name).toBe(zone);
  });

  it('maps a wrong key, a silent server and an unknown zone to the provider errors, never leaking the key', async () => {
    const wrongKey = new PowerDnsAdapter({ apiUrl: pdns.server.apiUrl, apiKey: 'not-the-key' });
    const err = await wrongKey.zoneInfo('example.org').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);

    const sockets: Socket[] = [];
    const silent: Server = createServer((socket) => void sockets.push(socket)); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    const hanging = new PowerDnsAdapter({ apiUrl: `http://127.0.0.1:${port}`, apiKey: pdns.server.apiKey, timeoutMs: 300 });
    const started = Date.now();
    const timeout = await hanging.listRRsets('example.org').catch((e: unknown) => e);
    expect(timeout).toBeInstanceOf(BackendUnavailableError);
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(String((timeout as Error).message)).not.toContain(pdns.server.apiKey);
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));

    await expect(pdns.adapter.zoneInfo('never-created.example')).rejects.toBeInstanceOf(BackendGoneError);
  });

  it('refuses to start when its port is taken, with the server output in the error', async () => {
    const other = path.join(pdns.dataDir, 'second');
    await expect(
      PowerDnsServer.start({ dataDir: other, dnsAddress: pdns.server.dnsAddress, apiAddress: '127.0.0.1:0', startTimeoutMs: 10_000 }),
    ).rejects.toThrow(/PowerDNS did not start \(it exited with code \d+\):[\s\S]*Address already in use/);
  });
});
