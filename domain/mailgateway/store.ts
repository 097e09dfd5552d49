import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import { notFound } from '../errors';
import { whereVisibleService, type Principal } from '../principal';
import type { ServiceRow } from '../services';

/**
 * The mail gateways' records and the only SQL on their tables
 * (db/migrations/20261126000100_mailgateway.ts). A gateway is the account's live `mailgateway`
 * service (product `mailgateway-10k`).
 */
export const DKIM_KEY_PURPOSE = 'mail-dkim-private-key';

export interface GatewayRow {
  service_id: number;
  account_id: number;
  plan: string;
  api_endpoint: string;
  sending_suspended_at: Date | null;
  sending_suspended_reason: string | null;
  created_at: Date;
}

export interface GatewayTarget {
  service: ServiceRow;
  gateway: GatewayRow;
}

export interface DomainRow {
  id: number;
  service_id: number;
  domain: string;
  status: 'pending' | 'verified';
  verified_at: Date | null;
  dkim_selector: string;
  dkim_public: string;
  dkim_private_sealed: string;
  dkim_status: 'pending' | 'verified';
  mail_from_host: string;
  mail_from_status: 'pending' | 'verified';
  created_at: Date;
}

export interface KeyRow {
  id: number;
  service_id: number;
  name: string;
  created_at: Date;
  last_used_at: Date | null;
  revoked_at: Date | null;
}

export const secretHash = (secret: string): string => createHash('sha256').update(secret).digest('hex');

const gatewayOf = (row: Record<string, unknown>): GatewayRow => ({
  service_id: Number(row.service_id),
  account_id: Number(row.account_id),
  plan: String(row.plan),
  api_endpoint: String(row.api_endpoint),
  sending_suspended_at: (row.sending_suspended_at as Date | null) ?? null,
  sending_suspended_reason: (row.sending_suspended_reason as string | null) ?? null,
  created_at: row.created_at as Date,
});

const domainOf = (row: Record<string, unknown>): DomainRow => ({ ...(row as unknown as DomainRow), id: Number(row.id), service_id: Number(row.service_id) });

/**
 * The account's mail gateway, when the principal may see its service; 404 otherwise (none, hidden,
 * not built yet). The newest one: an account holds one live gateway at a time (orders refuse a
 * second), and a terminated one stays readable (its changes answer 409) until a new one is ordered.
 */
export async function findVisibleGateway(db: Knex, principal: Principal): Promise<GatewayTarget> {
  const qb = db('services')
    .join('mail_gateways', 'mail_gateways.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'mailgateway' })
    .orderBy('services.id', 'desc')
    .select(
      'services.*',
      'mail_gateways.plan as g_plan',
      'mail_gateways.api_endpoint as g_api_endpoint',
      'mail_gateways.sending_suspended_at as g_sending_suspended_at',
      'mail_gateways.sending_suspended_reason as g_sending_suspended_reason',
      'mail_gateways.created_at as g_created_at',
    );
  whereVisibleService(qb, principal, 'services.id');
  const row = await qb.first();
  if (!row) throw notFound('mail gateway');
  const { g_plan, g_api_endpoint, g_sending_suspended_at, g_sending_suspended_reason, g_created_at, ...service } = row;
  return {
    service,
    gateway: gatewayOf({
      service_id: service.id,
      account_id: service.account_id,
      plan: g_plan,
      api_endpoint: g_api_endpoint,
      sending_suspended_at: g_sending_suspended_at,
      sending_suspended_reason: g_sending_suspended_reason,
      created_at: g_created_at,
    }),
  };
}

export async function findGateway(db: Knex | Knex.Transaction, serviceId: number): Promise<GatewayRow | null> {
  const row = await db('mail_gateways').where({ service_id: serviceId }).first();
  return row ? gatewayOf(row) : null;
}

/** Takes the gateway's row lock: one change of its domains, keys or credentials at a time. */
export async function lockGateway(trx: Knex.Transaction, serviceId: number): Promise<GatewayRow> {
  const row = await trx('mail_gateways').where({ service_id: serviceId }).forUpdate().first();
  if (!row) throw notFound('mail gateway');
  return gatewayOf(row);
}

export async function findDomain(db: Knex | Knex.Transaction, serviceId: number, domain: string): Promise<DomainRow | null> {
  const row = await db('mail_domains').where({ service_id: serviceId, domain }).first();
  return row ? domainOf(row) : null;
}

export async function countsOf(db: Knex, serviceId: number): Promise<{ domains: number; activeKeys: number }> {
  const [domains] = await db('mail_domains').where({ service_id: serviceId }).count<{ count: string }[]>({ count: '*' });
  const [keys] = await db('mail_keys').where({ service_id: serviceId }).whereNull('revoked_at').count<{ count: string }[]>({ count: '*' });
  return { domains: Number(domains.count), activeKeys: Number(keys.count) };
}

/** The current UTC month (`YYYY-MM`) and its first and last day. */
export function monthOf(at = new Date()): { month: string; first: string; last: string } {
  const month = at.toISOString().slice(0, 7);
  const last = new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 0)).toISOString().slice(0, 10);
  return { month, first: `${month}-01`, last };
}

/** Accepted and rejected sends of the current UTC month. */
export async function monthSends(db: Knex, serviceId: number, at = new Date()): Promise<{ month: string; accepted: number; rejected: number }> {
  const { month, first, last } = monthOf(at);
  const [row] = await db('mail_usage_days')
    .where({ service_id: serviceId })
    .whereBetween('day', [first, last])
    .sum<{ accepted: string | null; rejected: string | null }[]>({ accepted: 'accepted', rejected: 'rejected' });
  return { month, accepted: Number(row?.accepted ?? 0), rejected: Number(row?.rejected ?? 0) };
}
