import { defineBackend } from './backend';
import type { DnsProvider } from './dns.provider';
import { PowerDnsAdapter } from './powerdns/powerdns.adapter';
import { readApiKey } from './powerdns/powerdns.server';
import { DnsSimulator } from './simulator/dns.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** DNS zones and records on the authoritative server (PowerDNS, or the simulator with DNS_BACKEND=simulator). */
    dns: DnsProvider;
  }
}

/** The DNS family's backend: PowerDNS Authoritative (DNS_BACKEND=powerdns) or the simulator. */
export const dnsBackend = defineBackend({
  family: 'dns',
  key: 'dns',
  simulator: ({ db, config }) => new DnsSimulator(db, config.SIM_DELAY_SCALE),
  real: {
    selected: (config) => config.DNS_BACKEND !== 'simulator',
    create: ({ config }) =>
      new PowerDnsAdapter({
        apiUrl: config.POWERDNS_API_URL,
        // Read when first needed: `npm start` generates the key file when it starts the local server.
        apiKey: () => config.POWERDNS_API_KEY ?? readApiKey(config.POWERDNS_DATA_DIR),
        timeoutMs: config.POWERDNS_TIMEOUT,
      }),
  },
});
