/**
 * DNS on a real PowerDNS: how long a PUT takes and how soon the DNS server answers the new value
 * over UDP, and how many RRset writes per second the API sustains (one zone, several zones, PATCH).
 *
 *   npx tsx bench/dns.bench.ts [putResolveIterations=200] [writesPerScenario=600]
 *
 * Everything runs in one process: a fresh database, a PowerDNS on free loopback ports (temp dir),
 * and the API (no Temporal needed: DNS writes are synchronous). Rate limits are raised so they do
 * not cap the figures. Prints a JSON summary; results are copied into docs/benchmarks.md by hand.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promises as dnsPromises } from 'node:dns';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { createApi } from '../api/bootstrap';
import { DnsZoneProvisioner, zoneDefaults } from '../domain/dns/provisioner';
import { PowerDnsAdapter } from '../providers/powerdns/powerdns.adapter';
import { PowerDnsServer } from '../providers/powerdns/powerdns.server';
import { createTestDatabase } from '../test/helpers/db';
import { createAccount, createApiKey, createService, createUser } from '../test/helpers/fixtures';

const PUT_RESOLVE = Number(process.argv[2] ?? 200);
const WRITES = Number(process.argv[3] ?? 600);

function stats(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  const at = (q: number) => Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))] * 10) / 10;
  return { n: s.length, p50: at(0.5), p95: at(0.95), p99: at(0.99), max: at(1) };
}

async function main() {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'bench-pdns-'));
  const pdns = await PowerDnsServer.start({ dataDir, dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' });
  const database = await createTestDatabase();
  const config = loadConfig({
    ...process.env,
    DATABASE_URL: database.url,
    DNS_BACKEND: 'powerdns',
    POWERDNS_API_URL: pdns.apiUrl,
    POWERDNS_API_KEY: pdns.apiKey,
    LOG_LEVEL: 'silent',
    NODE_ENV: 'test',
    RATE_LIMIT_DEFAULT_PER_KEY: '1000000',
    RATE_LIMIT_DEFAULT_PER_ACCOUNT: '1000000',
    RATE_LIMIT_MUTATIONS_PER_KEY: '1000000',
    RATE_LIMIT_MUTATIONS_PER_ACCOUNT: '1000000',
  });
  const api = await createApi(config, { db: database.db, logger: createLogger('silent', 'bench') });
  const server = await new Promise<http.Server>((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { accountId } = await createAccount(database.db);
  const { userId } = await createUser(database.db, accountId, { isOwner: true });
  const { token } = await createApiKey(database.db, accountId, userId, { scopes: ['dns:read', 'dns:write'] });
  const provisioner = new DnsZoneProvisioner(database.db, api.deps.providers.dns, zoneDefaults(config));
  const zones: string[] = [];
  for (let i = 0; i < 8; i++) {
    const zone = `bench${i}.example`;
    const svc = await createService(database.db, accountId, { family: 'dns', label: zone, product: 'dns-zone' });
    await provisioner.provision({
      id: svc.serviceId,
      accountId,
      family: 'dns',
      productFamily: 'dns',
      product: 'dns-zone',
      label: zone,
      options: {},
      billingCycle: 'monthly',
    });
    zones.push(zone);
  }
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  const call = (method: string, p: string, body?: unknown) =>
    new Promise<number>((resolve, reject) => {
      const req = http.request(`${base}${p}`, { method, agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.end(body === undefined ? undefined : JSON.stringify(body));
    });
  const resolver = new dnsPromises.Resolver({ timeout: 500, tries: 1 });
  resolver.setServers([pdns.dnsAddress]);

  // 1. PUT, then ask the DNS server over UDP until it answers the new value.
  const putMs: number[] = [];
  const visibleMs: number[] = [];
  for (let i = 0; i < PUT_RESOLVE; i++) {
    const value = `192.0.2.${(i % 250) + 1}`;
    const started = performance.now();
    const status = await call('PUT', `/v1/dns/zones/${zones[0]}/records/lat/A`, { ttl: 60, values: [value] });
    if (status !== 200) throw new Error(`PUT answered ${status}`);
    putMs.push(performance.now() - started);
    for (;;) {
      const answer = await resolver.resolve4(`lat.${zones[0]}`).catch(() => []);
      if (answer.length === 1 && answer[0] === value) break;
    }
    visibleMs.push(performance.now() - started);
  }
  // Baseline: the same write straight to PowerDNS's API (no control plane in between).
  const direct = new PowerDnsAdapter({ apiUrl: pdns.apiUrl, apiKey: pdns.apiKey });
  const directMs: number[] = [];
  for (let i = 0; i < PUT_RESOLVE; i++) {
    const started = performance.now();
    await direct.replaceRRset(zones[0], { name: `direct.${zones[0]}`, type: 'A', ttl: 60, values: [`198.51.100.${(i % 250) + 1}`] });
    directMs.push(performance.now() - started);
  }

  // 2. RRset writes per second with 16 concurrent clients.
  async function throughput(name: string, zonesUsed: string[], concurrency: number) {
    let next = 0;
    let failures = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (;;) {
          const i = next++;
          if (i >= WRITES) return;
          const zone = zonesUsed[i % zonesUsed.length];
          const status = await call('PUT', `/v1/dns/zones/${zone}/records/w${i}/A`, { values: [`203.0.113.${(i % 250) + 1}`] });
          if (status !== 200) failures++;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    return { scenario: name, writes: WRITES, failures, seconds: Math.round(seconds * 100) / 100, writes_per_s: Math.round(WRITES / seconds) };
  }
  const oneZone = await throughput('PUT, 16 clients, one zone', [zones[1]], 16);
  const eightZones = await throughput('PUT, 16 clients, 8 zones', zones, 16);
  // PATCH: 50 RRsets per request, 4 clients on 4 zones.
  const patchStarted = performance.now();
  let patchFailures = 0;
  const batches = Math.max(1, Math.floor(WRITES / 50));
  await Promise.all(
    Array.from({ length: 4 }, async (_, c) => {
      for (let b = c; b < batches; b += 4) {
        const records = Array.from({ length: 50 }, (_, k) => ({ name: `p${b}-${k}`, type: 'TXT', values: [`batch ${b} item ${k}`] }));
        if ((await call('PATCH', `/v1/dns/zones/${zones[4 + c]}/records`, { records })) !== 200) patchFailures++;
      }
    }),
  );
  const patchSeconds = (performance.now() - patchStarted) / 1000;

  const summary = {
    put_then_resolvable_ms: { put: stats(putMs), visible_over_udp: stats(visibleMs), direct_powerdns_patch: stats(directMs) },
    throughput: [
      oneZone,
      eightZones,
      {
        scenario: 'PATCH of 50 RRsets, 4 clients, 4 zones',
        writes: batches * 50,
        failures: patchFailures,
        seconds: Math.round(patchSeconds * 100) / 100,
        writes_per_s: Math.round((batches * 50) / patchSeconds),
      },
    ],
  };
  console.log(JSON.stringify(summary, null, 2));

  agent.destroy();
  await new Promise((r) => server.close(r));
  await api.close();
  await database.drop();
  await pdns.stop();
  rmSync(dataDir, { recursive: true, force: true });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
