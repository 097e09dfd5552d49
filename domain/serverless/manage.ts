import type { Knex } from 'knex';
import { randomBase62 } from '../../common/crypto';
import { lockTenant, tokenHash, usageDays, utcDay, type TenantRow, type UsageDay } from './store';
import { METRICS, PEAK_METRICS, TOKEN_PREFIX, type Metric, type ServerlessPlan } from './plans';

/**
 * A serverless tenant's data-plane tokens and its usage (SPEC "Serverless", DECISIONS
 * "Serverless"). Tokens are stored as SHA-256 only and shown once.
 */
export interface IssuedToken {
  token: string;
  previous_valid_until: Date | null;
}

const newToken = (tenant: TenantRow) => `${TOKEN_PREFIX[tenant.primitive]}${randomBase62(40)}`;

async function insertToken(db: Knex | Knex.Transaction, tenant: TenantRow): Promise<string> {
  const token = newToken(tenant);
  await db('serverless_tokens').insert({ service_id: tenant.service_id, token_hash: tokenHash(token) });
  return token;
}

/** A new token beside the live ones (kv: several live tokens per tenant are allowed). */
export async function createToken(db: Knex, tenant: TenantRow): Promise<IssuedToken> {
  return { token: await insertToken(db, tenant), previous_valid_until: null };
}

/**
 * A new token; every earlier one dies at min(its own deadline, now + grace) (DECISIONS), at once for
 * 0. The first rotate of a tenant issues its first token (`previous_valid_until` null: none retired).
 */
export async function rotateTokens(db: Knex, tenant: TenantRow, graceSeconds: number): Promise<IssuedToken> {
  return db.transaction(async (trx) => {
    await lockTenant(trx, tenant.service_id);
    const [{ until }] = (await trx.raw(`select now() + make_interval(secs => ?) as until`, [graceSeconds])).rows;
    const retired = await trx('serverless_tokens')
      .where({ service_id: tenant.service_id })
      .where((w) => w.whereNull('retired_at').orWhere('retired_at', '>', until))
      .update({ retired_at: until });
    const token = await insertToken(trx, tenant);
    return { token, previous_valid_until: graceSeconds === 0 || retired === 0 ? null : new Date(until) };
  });
}

export type Totals = Partial<Record<Metric, number>>;

export interface UsageReport {
  primitive: string;
  period_start: string;
  period_end: string;
  totals: Totals;
  /** null for a metric without a quota (cron `skipped`, functions `errors`). */
  included: { hard_cap: boolean } & Record<string, number | null | boolean>;
  overage: Totals;
  total_usd: number;
  daily: UsageDay[];
}

/** Each day's figures summed over the period; a peak metric is the largest day (DECISIONS). */
export function sumDays(metrics: readonly Metric[], days: UsageDay[]): Totals {
  const totals: Totals = {};
  for (const m of metrics) totals[m] = days.reduce((n, d) => (PEAK_METRICS.has(m) ? Math.max(n, d[m] ?? 0) : n + (d[m] ?? 0)), 0);
  return totals;
}

/** The month's use beyond the plan's included amounts, and its price (0 under a hard cap). */
export function priceUsage(plan: ServerlessPlan, totals: Totals): { overage: Totals; total_usd: number } {
  const overage: Totals = {};
  let total = 0;
  for (const m of METRICS[plan.primitive] as readonly Metric[]) {
    const quota = plan.included[m];
    const over = quota === undefined ? 0 : Math.max(0, (totals[m] ?? 0) - quota);
    overage[m] = plan.hard_cap ? 0 : over;
    if (!plan.hard_cap) total += over * (plan.prices[m] ?? 0);
  }
  return { overage, total_usd: Math.round(total * 100) / 100 };
}

/** The current UTC month's usage: totals, included amounts, overage, its price, and one entry per day so far (oldest first). */
export async function monthUsage(db: Knex, tenant: TenantRow, plan: ServerlessPlan, now = new Date()): Promise<UsageReport> {
  const metrics = METRICS[tenant.primitive] as readonly Metric[];
  const today = utcDay(now);
  const periodStart = `${today.slice(0, 7)}-01`;
  const periodEnd = utcDay(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 0)));
  const byDay = new Map((await usageDays(db, tenant.service_id, tenant.primitive, periodStart, today)).map((d) => [d.date, d]));
  const daily: UsageDay[] = [];
  for (let d = new Date(`${periodStart}T00:00:00Z`); utcDay(d) <= today; d = new Date(d.getTime() + 86_400_000)) {
    const date = utcDay(d);
    daily.push(byDay.get(date) ?? ({ date, ...Object.fromEntries(metrics.map((m) => [m, 0])) } as UsageDay));
  }
  const totals = sumDays(metrics, daily);
  const included: Record<string, number | null> = {};
  for (const m of metrics) included[m] = plan.included[m] ?? null;
  return {
    primitive: tenant.primitive,
    period_start: periodStart,
    period_end: periodEnd,
    totals,
    included: { ...included, hard_cap: plan.hard_cap },
    ...priceUsage(plan, totals),
    daily,
  };
}

/** Whether the month's use has reached a hard-capped plan's included amount of any metric (the primitive then stops). */
export function atHardCap(plan: ServerlessPlan, totals: Totals): boolean {
  if (!plan.hard_cap) return false;
  return (Object.entries(plan.included) as Array<[Metric, number]>).some(([m, quota]) => (totals[m] ?? 0) >= quota);
}
