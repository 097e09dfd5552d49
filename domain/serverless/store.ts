import { createHash } from 'node:crypto';
import type { Knex } from 'knex';
import { notFound } from '../errors';
import { whereVisibleService, type Principal } from '../principal';
import type { ServiceRow } from '../services';
import { METRICS, PEAK_METRICS, type Metric, type Primitive } from './plans';

/**
 * The serverless tenants' records and the only SQL on their tables
 * (db/migrations/20261126000300_serverless.ts). A tenant is the account's live
 * `serverless-<primitive>` service (catalog family `serverless`, service family `other`).
 */
export interface TenantRow {
  service_id: number;
  account_id: number;
  primitive: Primitive;
  /** Names the tenant's keys, files and processes on the data plane's host (never a customer's string). */
  handle: string;
  plan: string;
  api_endpoint: string;
  created_at: Date;
}

export interface TenantTarget {
  service: ServiceRow;
  tenant: TenantRow;
}

export const tokenHash = (token: string): string => createHash('sha256').update(token).digest('hex');

const tenantOf = (row: Record<string, unknown>): TenantRow => ({
  service_id: Number(row.service_id),
  account_id: Number(row.account_id),
  primitive: row.primitive as Primitive,
  handle: String(row.handle),
  plan: String(row.plan),
  api_endpoint: String(row.api_endpoint),
  created_at: row.created_at as Date,
});

const PRIMITIVE_NAMES: Record<Primitive, string> = {
  cron: 'serverless cron service',
  db: 'serverless database service',
  functions: 'serverless functions service',
  kv: 'serverless key-value service',
};

/**
 * The account's tenant of a primitive, when the principal may see its service; 404 otherwise (none,
 * hidden, not built yet). The newest one: an account holds one live tenant per primitive (orders
 * refuse a second), and a terminated one stays readable (its actions answer 409) until a new one.
 */
export async function findVisibleTenant(db: Knex, principal: Principal, primitive: Primitive): Promise<TenantTarget> {
  const qb = db('services')
    .join('serverless_tenants as t', 't.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 't.primitive': primitive })
    .orderBy('services.id', 'desc')
    .select('services.*', db.raw('row_to_json(t) as _tenant'));
  whereVisibleService(qb, principal, 'services.id');
  const row = await qb.first();
  if (!row) throw notFound(PRIMITIVE_NAMES[primitive]);
  const { _tenant, ...service } = row;
  return { service, tenant: tenantOf({ ..._tenant, created_at: new Date(_tenant.created_at) }) };
}

export async function findTenant(db: Knex | Knex.Transaction, serviceId: number): Promise<TenantRow | null> {
  const row = await db('serverless_tenants').where({ service_id: serviceId }).first();
  return row ? tenantOf(row) : null;
}

export async function lockTenant(trx: Knex.Transaction, serviceId: number): Promise<TenantRow> {
  const row = await trx('serverless_tenants').where({ service_id: serviceId }).forUpdate().first();
  if (!row) throw notFound('serverless service');
  return tenantOf(row);
}

/** A tenant as a data plane sees it: with its service's status. */
export type LiveTenant = TenantRow & { status: string };

/** The tenant a token of this primitive belongs to (live, or rotated out but within its grace), with its service's status. */
export async function tenantOfToken(db: Knex, primitive: Primitive, token: string): Promise<LiveTenant | null> {
  const row = await db('serverless_tokens as k')
    .join('serverless_tenants as t', 't.service_id', 'k.service_id')
    .join('services as s', 's.id', 'k.service_id')
    .where({ 'k.token_hash': tokenHash(token), 't.primitive': primitive })
    .where((w) => w.whereNull('k.retired_at').orWhere('k.retired_at', '>', db.fn.now()))
    .select('t.*', 's.status')
    .first();
  return row ? { ...tenantOf(row), status: String(row.status) } : null;
}

export async function tenantByHandle(db: Knex, primitive: Primitive, handle: string): Promise<LiveTenant | null> {
  const row = await db('serverless_tenants as t')
    .join('services as s', 's.id', 't.service_id')
    .where({ 't.handle': handle, 't.primitive': primitive })
    .select('t.*', 's.status')
    .first();
  return row ? { ...tenantOf(row), status: String(row.status) } : null;
}

export const utcDay = (at = new Date()): string => at.toISOString().slice(0, 10);

export type Counts = Partial<Record<Metric, number>>;

/** Adds to a tenant's usage of a UTC day in one statement: counts sum, peaks keep the larger (concurrent adds agree). */
export async function addUsage(db: Knex | Knex.Transaction, serviceId: number, day: string, counts: Counts): Promise<void> {
  const entries = Object.entries(counts).filter(([, n]) => n !== undefined) as Array<[Metric, number]>;
  if (entries.length === 0) return;
  const merge: Record<string, Knex.Raw> = {};
  for (const [metric] of entries) {
    merge[metric] = PEAK_METRICS.has(metric)
      ? db.raw('greatest(serverless_usage_days.??, excluded.??)', [metric, metric])
      : db.raw('serverless_usage_days.?? + excluded.??', [metric, metric]);
  }
  await db('serverless_usage_days')
    .insert({ service_id: serviceId, day, ...Object.fromEntries(entries) })
    .onConflict(['service_id', 'day'])
    .merge(merge);
}

export type UsageDay = { date: string } & Record<string, number>;

/** The tenant's usage of its primitive's metrics per day from `from` to `to` (UTC dates, inclusive), ascending; days without use are absent. */
export async function usageDays(db: Knex, serviceId: number, primitive: Primitive, from: string, to: string): Promise<UsageDay[]> {
  const metrics = METRICS[primitive];
  const rows = await db('serverless_usage_days')
    .where({ service_id: serviceId })
    .whereBetween('day', [from, to])
    .orderBy('day')
    .select(db.raw("to_char(day, 'YYYY-MM-DD') as date"), ...metrics);
  return rows.map((r: Record<string, unknown>) => {
    const day: UsageDay = { date: String(r.date) } as UsageDay;
    for (const m of metrics) day[m] = Number(r[m]);
    return day;
  });
}
