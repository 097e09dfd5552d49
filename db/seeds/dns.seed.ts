import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { DnsZoneProvisioner, zoneDefaults } from '../../domain/dns/provisioner';
import type { Providers } from '../../providers';
import { BackendGoneError } from '../../providers/errors';

/** What a freshly seeded zone holds besides its SOA and NS, so the local run has something to show. */
const DEMO_RRSETS = (zone: string) => [
  { name: `www.${zone}`, type: 'A' as const, ttl: 300, values: ['192.0.2.10'] },
  { name: zone, type: 'MX' as const, ttl: 3600, values: [`10 mail.${zone}.`] },
  { name: zone, type: 'TXT' as const, ttl: 3600, values: ['"v=spf1 mx -all"'] },
];

/** True when this checkout's DNS server has the zone. */
async function serverHas(providers: Providers, zone: string): Promise<boolean> {
  try {
    await providers.dns.zoneInfo(zone);
    return true;
  } catch (err) {
    if (err instanceof BackendGoneError) return false;
    throw err;
  }
}

/**
 * Every live seeded dns service (the one of `core.seed.ts`, named by its label) gets its zone on
 * this checkout's DNS server, as an order's provisioning would, plus a few demo records.
 *
 * Every checkout on a machine shares the `cloud` database but each runs its own PowerDNS: a second
 * checkout finds the zone's row written by the first while its own server has no such zone, which
 * would answer `409` ("not on the dns backend any more") on every read. So a seeded service whose
 * row exists is checked too, and its zone is created again on this server when it lacks it.
 * Ordered services are not the seed's: their zones are left where their orders put them.
 *
 * Idempotent: a service keeps its zone, and records are only added to a zone that holds nothing but
 * SOA and NS.
 */
export async function seedDns(db: Knex, providers: Providers, config: Pick<Config, 'DNS_NAMESERVERS' | 'DNS_HOSTMASTER'>): Promise<void> {
  const services = await db('services')
    .leftJoin('dns_zones', 'dns_zones.service_id', 'services.id')
    .where('services.family', 'dns')
    .whereIn('services.status', ['active', 'suspended'])
    .whereNotNull('services.label')
    .where((q) => q.whereNull('dns_zones.service_id').orWhereNull('services.order_id'))
    .orderBy('services.id')
    .select('services.*', 'dns_zones.name as zone_name');
  const provisioner = new DnsZoneProvisioner(db, providers.dns, zoneDefaults(config));
  for (const service of services) {
    if (service.zone_name && (await serverHas(providers, service.zone_name))) continue;
    const target = {
      id: Number(service.id),
      accountId: Number(service.account_id),
      family: 'dns',
      productFamily: 'dns',
      product: service.product,
      label: service.label,
      options: {},
      billingCycle: service.billing_cycle,
    };
    // Claims the name (kept when the row is there already) and creates the zone on this server.
    await provisioner.provision(target);
    const zone = (await db('dns_zones').where({ service_id: target.id }).first()).name as string;
    const rrsets = await providers.dns.listRRsets(zone);
    if (rrsets.every((r) => r.type === 'SOA' || r.type === 'NS')) {
      for (const rrset of DEMO_RRSETS(zone)) await providers.dns.replaceRRset(zone, rrset);
    }
  }
}
