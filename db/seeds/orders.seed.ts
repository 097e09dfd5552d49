import type { Knex } from 'knex';
import { DEFAULT_CAPABILITIES } from '../../domain/capabilities';
import type { ProductOption } from '../../providers/billing.provider';

/**
 * The billing catalog (DECISIONS "Seed"): every family has a product, `dns-zone` is free, `vps-l`
 * costs more than the demo credit of 5.00, `vps-legacy` is retired and `vps-staff` hidden; payment
 * methods with `card` as the default; promo codes `WELCOME100` (100 % off), `HALF50` (50 % off,
 * monthly only) and the expired `LAUNCH2025`. Idempotent: re-running updates rows in place.
 */
const OS: ProductOption = {
  name: 'os',
  type: 'enum',
  required: true,
  default: 'debian-12',
  values: ['debian-12', 'ubuntu-24.04', 'rocky-9'],
  description: 'Operating system template',
};
const HOSTNAME: ProductOption = {
  name: 'hostname',
  type: 'string',
  required: false,
  pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$',
  description: 'a hostname such as web-2.example.test',
};

interface SeedProduct {
  slug: string;
  name: string;
  description: string;
  family: string;
  product_family: string;
  options?: ProductOption[];
  requires_site_name?: boolean;
  hidden?: boolean;
  retired?: boolean;
  /** EUR prices per cycle; USD prices are derived (×1.1, rounded to 0.50). */
  prices: Record<string, number>;
}

export const CATALOG: SeedProduct[] = [
  {
    slug: 'vps-s',
    name: 'VPS S',
    description: '1 vCPU, 2 GB RAM, 40 GB NVMe',
    family: 'vps',
    product_family: 'vps',
    options: [OS, HOSTNAME, { name: 'cores', type: 'integer', required: false, default: 1, min: 1, max: 2, description: 'vCPU cores' }],
    prices: { monthly: 4.5, quarterly: 13, annually: 48 },
  },
  {
    slug: 'vps-l',
    name: 'VPS L',
    description: '8 vCPU, 32 GB RAM, 320 GB NVMe',
    family: 'vps',
    product_family: 'vps',
    options: [OS, HOSTNAME],
    prices: { monthly: 24, annually: 259 },
  },
  {
    slug: 'vps-legacy',
    name: 'VPS Legacy',
    description: 'No longer sold',
    family: 'vps',
    product_family: 'vps',
    options: [OS],
    retired: true,
    prices: { monthly: 3 },
  },
  {
    slug: 'vps-staff',
    name: 'VPS Staff',
    description: 'Internal plan, orderable by slug only',
    family: 'vps',
    product_family: 'vps',
    options: [OS],
    hidden: true,
    prices: { monthly: 1 },
  },
  {
    slug: 'dns-zone',
    name: 'DNS Zone',
    description: 'One authoritative DNS zone',
    family: 'dns',
    product_family: 'dns',
    options: [
      {
        name: 'zone',
        type: 'string',
        required: true,
        description: 'a domain such as example.org (any case, a trailing dot and IDN are accepted; kept in punycode)',
      },
    ],
    prices: { monthly: 0, annually: 0 },
  },
  // The engine's major version is the platform's current one (reported live as `version`), not a choice.
  {
    slug: 'dbaas-postgres-s',
    name: 'Managed PostgreSQL S',
    description: 'A PostgreSQL server of its own, TLS, backups',
    family: 'dbaas',
    product_family: 'dbaas',
    prices: { monthly: 12, annually: 120 },
  },
  {
    slug: 'dbaas-mysql-s',
    name: 'Managed MySQL S',
    description: 'A MySQL-compatible (MariaDB) server of its own, TLS, backups',
    family: 'dbaas',
    product_family: 'dbaas',
    prices: { monthly: 12, annually: 120 },
  },
  {
    slug: 'caas-starter',
    name: 'Container Apps Starter',
    description: 'Up to 3 apps',
    family: 'caas',
    product_family: 'caas',
    prices: { monthly: 7, annually: 70 },
  },
  { slug: 'lb-s', name: 'Load Balancer S', description: '10 listeners, 50 backends', family: 'lb', product_family: 'lb', prices: { monthly: 6 } },
  {
    slug: 'objectstorage-250',
    name: 'Object Storage 250 GB',
    description: 'S3-compatible, 250 GB included',
    family: 'objectstorage',
    product_family: 'objectstorage',
    prices: { monthly: 3, annually: 30 },
  },
  {
    slug: 'mailgateway-10k',
    name: 'Mail Gateway 10k',
    description: '10,000 messages a month',
    family: 'mailgateway',
    product_family: 'mailgateway',
    prices: { monthly: 9 },
  },
  {
    slug: 'wordpress-starter',
    name: 'WordPress Starter',
    description: 'One hosted WordPress site',
    family: 'other',
    product_family: 'wordpress',
    requires_site_name: true,
    // The PHP runtimes the hosts have (DECISIONS: locally 8.2).
    options: [{ name: 'php_version', type: 'enum', required: false, default: '8.2', values: ['8.2'], description: 'PHP version' }],
    prices: { monthly: 8, annually: 80 },
  },
  {
    slug: 'images-basic',
    name: 'Image Delivery Basic',
    description: 'Transformations and CDN delivery',
    family: 'other',
    product_family: 'images',
    prices: { monthly: 5 },
  },
  {
    slug: 'serverless-cron',
    name: 'Serverless Cron',
    description: 'Scheduled HTTP calls',
    family: 'other',
    product_family: 'serverless',
    prices: { monthly: 1 },
  },
  {
    slug: 'serverless-db',
    name: 'Serverless DB',
    description: 'SQL databases, one per namespace',
    family: 'other',
    product_family: 'serverless',
    prices: { monthly: 3 },
  },
  {
    slug: 'serverless-functions',
    name: 'Serverless Functions',
    description: 'JavaScript functions at a stable URL',
    family: 'other',
    product_family: 'serverless',
    prices: { monthly: 3 },
  },
  { slug: 'serverless-kv', name: 'Serverless KV', description: 'Key-value namespaces', family: 'other', product_family: 'serverless', prices: { monthly: 2 } },
];

export const PAYMENT_METHODS = [
  { id: 'card', name: 'Credit or debit card', is_default: true, position: 1 },
  { id: 'paypal', name: 'PayPal', is_default: false, position: 2 },
  { id: 'bank_transfer', name: 'Bank transfer', is_default: false, position: 3 },
];

export const PROMO_CODES = [
  { code: 'WELCOME100', percent_off: 100, product_slugs: null, billing_cycles: null, max_uses: null, active: true, expires_at: null },
  { code: 'HALF50', percent_off: 50, product_slugs: null, billing_cycles: ['monthly'], max_uses: null, active: true, expires_at: null },
  {
    code: 'LAUNCH2025',
    percent_off: 20,
    product_slugs: null,
    billing_cycles: null,
    max_uses: null,
    active: true,
    expires_at: new Date('2026-01-01T00:00:00Z'),
  },
];

const usd = (eur: number) => Math.round(eur * 1.1 * 2) / 2;

export async function seedOrders(db: Knex): Promise<void> {
  await db.transaction(async (trx) => {
    for (const p of CATALOG) {
      const [row] = await trx('products')
        .insert({
          slug: p.slug,
          name: p.name,
          description: p.description,
          family: p.family,
          product_family: p.product_family,
          options_schema: JSON.stringify(p.options ?? []),
          capabilities: JSON.stringify(DEFAULT_CAPABILITIES[p.product_family] ?? DEFAULT_CAPABILITIES[p.family] ?? {}),
          requires_site_name: p.requires_site_name ?? false,
          hidden: p.hidden ?? false,
          retired: p.retired ?? false,
        })
        .onConflict('slug')
        .merge()
        .returning('id');
      for (const [cycle, amount] of Object.entries(p.prices)) {
        for (const [currency, value] of [
          ['EUR', amount],
          ['USD', usd(amount)],
        ] as const) {
          await trx('product_prices')
            .insert({ product_id: row.id, currency, billing_cycle: cycle, amount: value })
            .onConflict(['product_id', 'currency', 'billing_cycle'])
            .merge();
        }
      }
    }
    // Clear the default first so the one-default index holds while rows are merged.
    await trx('payment_methods').update({ is_default: false });
    for (const m of PAYMENT_METHODS) await trx('payment_methods').insert(m).onConflict('id').merge();
    for (const promo of PROMO_CODES) {
      await trx('promo_codes').insert(promo).onConflict('code').merge(['percent_off', 'product_slugs', 'billing_cycles', 'max_uses', 'active', 'expires_at']);
    }
  });
}
