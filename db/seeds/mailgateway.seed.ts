import type { Keyring } from '../../common/crypto';
import type { Config } from '../../common/config';
import type { Db } from '../knex';
import { recordsOf } from '../../domain/mailgateway/domains';
import { addDomain, verifyDomain } from '../../domain/mailgateway/manage';
import { mailEndpointOf, MailGatewayProvisioner } from '../../domain/mailgateway/provisioner';
import { findGateway } from '../../domain/mailgateway/store';
import { LIVE_STATUSES } from '../../domain/per-account';
import { canonicalValue } from '../../providers/dns.values';
import type { Providers } from '../../providers';

/** The demo account's sending domain: its seeded DNS zone (db/seeds/core.seed.ts, `example.test`). */
export const DEMO_MAIL_DOMAIN = 'example.test';

/**
 * Every live mail gateway service gets its gateway (as an order would build it), pointed at this
 * run's data plane. The seeded account's gets the sending domain `example.test`: its DKIM and bounce
 * MX records are published in the seeded zone on this checkout's DNS server, and the domain is
 * verified by looking them up through DNS_RESOLVER, as a customer's would be. Without DNS_RESOLVER
 * (no server of this run to ask), or where the lookup fails (the DNS simulator answers no queries),
 * the domain stays `pending` and nothing is published. Idempotent.
 */
export async function seedMailGateway(db: Db, keyring: Keyring, providers: Pick<Providers, 'dns'>, config: Config, demoAccountId = 1): Promise<void> {
  const endpoint = mailEndpointOf(config);
  const provisioner = new MailGatewayProvisioner(db, endpoint);
  const services: Array<{ id: number; account_id: number; product: string }> = await db('services')
    .where({ family: 'mailgateway' })
    .whereIn('status', [...LIVE_STATUSES])
    .orderBy('id');
  for (const s of services) {
    const target = {
      id: Number(s.id),
      accountId: Number(s.account_id),
      family: 'mailgateway',
      productFamily: 'mailgateway',
      product: s.product,
      label: null,
      options: {},
      billingCycle: null,
    };
    await provisioner.provision(target);
    await db('mail_gateways').where({ service_id: s.id }).update({ api_endpoint: endpoint });
    if (Number(s.account_id) !== demoAccountId) continue;
    const gateway = (await findGateway(db, target.id))!;
    const { domain } = await addDomain(db, keyring, gateway, DEMO_MAIL_DOMAIN);
    // Verified only against this run's own DNS server (`npm start` sets DNS_RESOLVER to it).
    if (domain.status === 'verified' || !config.DNS_RESOLVER) continue;
    try {
      for (const record of recordsOf(domain, config.MAIL_MX_HOST).filter((r) => r.purpose === 'dkim' || r.purpose === 'mail_from_mx')) {
        const value = record.type === 'TXT' ? canonicalValue('TXT', record.value, 'value') : `${record.value}.`;
        await providers.dns.replaceRRset(DEMO_MAIL_DOMAIN, { name: record.host, type: record.type, ttl: 300, values: [value] });
      }
      await verifyDomain(db, gateway, domain, config.MAIL_MX_HOST, config.DNS_RESOLVER);
    } catch {
      // No zone on this server, or no resolver that answers: the domain stays pending, as it would for a customer.
    }
  }
}
