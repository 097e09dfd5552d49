import { dnsDevRoutes } from '../api/routes/dns/dev.routes';
import { dnsRoutes } from '../api/routes/dns/routes';
import { seedDns } from '../db/seeds/dns.seed';
import { DnsZoneProvisioner, zoneDefaults } from '../domain/dns/provisioner';
import { dnsBackend } from '../providers/dns.backend';
import { defineFamily } from './manifest';

/** DNS (SPEC "DNS"): zones on PowerDNS Authoritative; record changes are synchronous, so no workflow of its own. */
export const dnsFamily = defineFamily({
  name: 'dns',
  routes: dnsRoutes,
  devRoutes: dnsDevRoutes,
  backend: dnsBackend,
  provisioner: ({ db, providers, config }) => new DnsZoneProvisioner(db, providers.dns, zoneDefaults(config)),
  seed: ({ db, providers, config }) => seedDns(db, providers, config),
  config: [
    'DNS_BACKEND',
    'DNS_SERVER_ADDRESS',
    'POWERDNS_API_URL',
    'POWERDNS_API_KEY',
    'POWERDNS_DATA_DIR',
    'POWERDNS_TIMEOUT',
    'DNS_NAMESERVERS',
    'DNS_HOSTMASTER',
    'DNS_RESERVED_ZONES',
  ],
});
