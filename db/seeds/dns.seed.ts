import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { DnsZoneProvisioner, zoneDefaults } from '../../domain/dns/provisioner';
import type { Providers } from '../../providers';

/** What a freshly seeded zone holds besides its SOA and NS, so the local run has something to show. */
const DEMO_RRSETS = (zone: string) => [
  { name: `www.${zone}`, type: 'A' as const, ttl: 300, values: ['192.0.2.10'] },
  { name: zone, type: 'MX' as const, ttl: 3600, values: [`10 mail.${zone}.`] },
  { name: zone, type: 'TXT' as const, ttl: 3600, values: ['"v=spf1 mx -all"'] },
];

/**
 * Every live dns service without a zone (the seeded one of `core.seed.ts`, named by its label) gets
 * it on the DNS server, as an order's provisioning would, plus a few demo records. Idempotent: a
 * service keeps its zone, and records are only added to a zone that holds nothing but SOA and NS.
 */
export async function seedDns(db: Knex, providers: Providers, config: Pick<Config, 'DNS_NAMESERVERS' | 'DNS_HOSTMASTER'>): Promise<void> {
  const services = await db('services')
    .leftJoin('dns_zones', 'dns_zones.service_id', 'services.id')
    .where('services.family', 'dns')
    .whereIn('services.status', ['active', 'suspended'])
    .whereNull('dns_zones.service_id')
    .whereNotNull('services.label')
    .orderBy('services.id')
    .select('services.*');
  const provisioner = new DnsZoneProvisioner(db, providers.dns, zoneDefaults(config));
  for (const service of services) {
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
    await provisioner.provision(target);
    const zone = (await db('dns_zones').where({ service_id: target.id }).first()).name as string;
    const rrsets = await providers.dns.listRRsets(zone);
    if (rrsets.every((r) => r.type === 'SOA' || r.type === 'NS')) {
      for (const rrset of DEMO_RRSETS(zone)) await providers.dns.replaceRRset(zone, rrset);
    }
  }
}
