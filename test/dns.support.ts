import { promises as dnsPromises } from 'node:dns';
import { createService } from './helpers/fixtures';
import { startTestPowerDns, TEST_ZONE_DEFAULTS, type TestPowerDns } from './helpers/powerdns';
import { startStack, type Stack, type StackOptions } from './helpers/stack';

/** Shared by the DNS test files: a stack whose DNS backend is a real PowerDNS, zones, and a resolver. */
export interface DnsStack {
  stack: Stack;
  pdns: TestPowerDns;
  close(): Promise<void>;
}

/** The environment that points a stack at a test PowerDNS. */
export function powerDnsEnv(pdns: TestPowerDns): Record<string, string> {
  return {
    DNS_BACKEND: 'powerdns',
    POWERDNS_API_URL: pdns.server.apiUrl,
    POWERDNS_API_KEY: pdns.server.apiKey,
    DNS_NAMESERVERS: TEST_ZONE_DEFAULTS.nameservers.join(','),
    DNS_HOSTMASTER: TEST_ZONE_DEFAULTS.hostmaster,
  };
}

export async function startDnsStack(options: StackOptions = {}): Promise<DnsStack> {
  const pdns = await startTestPowerDns();
  const stack = await startStack({ ...options, env: { ...powerDnsEnv(pdns), ...(options.env ?? {}) } });
  return {
    stack,
    pdns,
    async close() {
      await stack.close();
      await pdns.close();
    },
  };
}

/** A dns service of the stack's owner with its zone on the DNS server (through the dev stand-in). */
export async function newZone(stack: Stack, zone: string, opts: { accountId?: number; capabilities?: Record<string, boolean> } = {}) {
  const service = await createService(stack.db, opts.accountId ?? stack.owner.accountId, {
    family: 'dns',
    label: zone,
    product: 'dns-zone',
    capabilities: opts.capabilities,
  });
  const res = await stack.http.post(`/_dev/dns/${service.id}/zone`, { body: {} });
  if (res.status !== 200) throw new Error(`creating zone ${zone}: ${res.status} ${res.text}`);
  return { serviceId: service.serviceId, id: service.id, zone: res.body.name as string };
}

/** A resolver that asks only the test server (UDP). */
export function resolverFor(address: string): dnsPromises.Resolver {
  const resolver = new dnsPromises.Resolver({ timeout: 2_000, tries: 1 });
  resolver.setServers([address]);
  return resolver;
}
