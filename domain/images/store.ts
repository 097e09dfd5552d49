import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { notFound } from '../errors';
import { LIVE_STATUSES } from '../per-account';

export { LIVE_STATUSES };
import { whereVisibleService, type Principal } from '../principal';
import type { ServiceRow } from '../services';

/**
 * The image services' records and the only SQL on their tables (db/migrations/20261125001000_images.ts).
 * A tenant is the account's live `images` service (catalog family `images`, service family `other`).
 */
export const SIGNING_SECRET_PURPOSE = 'images-signing-secret';

export interface TenantRow {
  service_id: number;
  account_id: number;
  tenant: string;
  plan: string;
  api_endpoint: string;
  created_at: Date;
}

export interface TenantTarget {
  service: ServiceRow;
  tenant: TenantRow;
}

export const tokenHash = (token: string): string => createHash('sha256').update(token).digest('hex');

const num = (row: TenantRow | undefined): TenantRow | null => (row ? { ...row, service_id: Number(row.service_id), account_id: Number(row.account_id) } : null);

/**
 * The account's image tenant, when the principal may see its service; 404 otherwise (none, hidden,
 * not built yet). The newest one: an account holds one live tenant at a time (orders refuse a
 * second), and a terminated one stays readable (its actions answer 409) until a new one is ordered.
 */
export async function findVisibleTenant(db: Knex, principal: Principal): Promise<TenantTarget> {
  const qb = db('services')
    .join('images_tenants', 'images_tenants.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.product_family': 'images' })
    .orderBy('services.id', 'desc')
    .select(
      'services.*',
      'images_tenants.tenant as t_tenant',
      'images_tenants.plan as t_plan',
      'images_tenants.api_endpoint as t_api_endpoint',
      'images_tenants.created_at as t_created_at',
    );
  whereVisibleService(qb, principal, 'services.id');
  const row = await qb.first();
  if (!row) throw notFound('image service');
  const { t_tenant, t_plan, t_api_endpoint, t_created_at, ...service } = row;
  return {
    service,
    tenant: {
      service_id: Number(service.id),
      account_id: Number(service.account_id),
      tenant: t_tenant,
      plan: t_plan,
      api_endpoint: t_api_endpoint,
      created_at: t_created_at,
    },
  };
}

export async function findTenant(db: Knex | Knex.Transaction, serviceId: number): Promise<TenantRow | null> {
  return num(await db('images_tenants').where({ service_id: serviceId }).first());
}

export async function lockTenant(trx: Knex.Transaction, serviceId: number): Promise<TenantRow> {
  const row = num(await trx('images_tenants').where({ service_id: serviceId }).forUpdate().first());
  if (!row) throw notFound('image service');
  return row;
}

/** The tenant a live delivery token belongs to (active, or rotated out but within its grace), with its service's status. */
export async function tenantOfToken(db: Knex, token: string): Promise<(TenantRow & { status: string }) | null> {
  const row = await db('images_tokens')
    .join('images_tenants', 'images_tenants.service_id', 'images_tokens.service_id')
    .join('services', 'services.id', 'images_tokens.service_id')
    .where('images_tokens.token_hash', tokenHash(token))
    .where((w) => w.whereNull('images_tokens.retired_at').orWhere('images_tokens.retired_at', '>', db.fn.now()))
    .select('images_tenants.*', 'services.status')
    .first();
  return row ? { ...num(row)!, status: row.status } : null;
}

export async function tenantByHandle(db: Knex, handle: string): Promise<(TenantRow & { status: string }) | null> {
  const row = await db('images_tenants')
    .join('services', 'services.id', 'images_tenants.service_id')
    .where('images_tenants.tenant', handle)
    .select('images_tenants.*', 'services.status')
    .first();
  return row ? { ...num(row)!, status: row.status } : null;
}

export async function originsOf(db: Knex | Knex.Transaction, serviceId: number): Promise<string[]> {
  const rows: Array<{ pattern: string }> = await db('images_origins').where({ service_id: serviceId }).orderBy('pattern').select('pattern');
  return rows.map((r) => r.pattern);
}

/**
 * The signing secrets that verify now: the current one, and the previous one until its end
 * (`until`: when this answer stops being true; null when no previous secret is in its grace).
 */
export async function signingSecretsUntil(db: Knex, keyring: Keyring, serviceId: number): Promise<{ secrets: string[]; until: Date | null }> {
  const row = await db('images_secrets').where({ service_id: serviceId }).first();
  if (!row) return { secrets: [], until: null };
  const secrets = [keyring.decrypt(SIGNING_SECRET_PURPOSE, row.secret_sealed)];
  const until = row.previous_valid_until ? new Date(row.previous_valid_until) : null;
  if (row.previous_sealed && until && until > new Date()) {
    secrets.push(keyring.decrypt(SIGNING_SECRET_PURPOSE, row.previous_sealed));
    return { secrets, until };
  }
  return { secrets, until: null };
}

export async function signingSecrets(db: Knex, keyring: Keyring, serviceId: number): Promise<string[]> {
  return (await signingSecretsUntil(db, keyring, serviceId)).secrets;
}

export const utcDay = (at = new Date()): string => at.toISOString().slice(0, 10);

/** Adds to today's usage of a tenant (one statement; concurrent adds sum). */
export async function addUsage(
  db: Knex,
  serviceId: number,
  add: { transformations: number; deliveries: number; egress_bytes: number },
  at = new Date(),
): Promise<void> {
  await db('images_usage_days')
    .insert({ service_id: serviceId, day: utcDay(at), ...add })
    .onConflict(['service_id', 'day'])
    .merge({
      transformations: db.raw('images_usage_days.transformations + excluded.transformations'),
      deliveries: db.raw('images_usage_days.deliveries + excluded.deliveries'),
      egress_bytes: db.raw('images_usage_days.egress_bytes + excluded.egress_bytes'),
    });
}

export interface UsageDay {
  date: string;
  transformations: number;
  deliveries: number;
  egress_bytes: number;
}

/** The tenant's usage per day from `from` to `to` (UTC dates, inclusive), ascending; days without use are absent. */
export async function usageDays(db: Knex, serviceId: number, from: string, to: string): Promise<UsageDay[]> {
  const rows = await db('images_usage_days')
    .where({ service_id: serviceId })
    .whereBetween('day', [from, to])
    .orderBy('day')
    .select(db.raw("to_char(day, 'YYYY-MM-DD') as date"), 'transformations', 'deliveries', 'egress_bytes');
  return rows.map((r: Record<string, unknown>) => ({
    date: String(r.date),
    transformations: Number(r.transformations),
    deliveries: Number(r.deliveries),
    egress_bytes: Number(r.egress_bytes),
  }));
}

/**
 * The channel the delivery plane listens on: a tenant's allowlist, signing secret, tokens or status
 * changed (the payload is its service id). Sent from the changing transaction, so it arrives after
 * the commit, and the delivery plane drops what it keeps of that tenant.
 */
export const TENANT_CHANGED_CHANNEL = 'images_tenant_changed';

export async function notifyTenantChanged(db: Knex | Knex.Transaction, serviceId: number): Promise<void> {
  await db.raw('select pg_notify(?, ?)', [TENANT_CHANGED_CHANNEL, String(serviceId)]);
}
