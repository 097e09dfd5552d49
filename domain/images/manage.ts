import type { Knex } from 'knex';
import { randomBase62, type Keyring } from '../../common/crypto';
import { normalizePattern, OriginPatternError } from './origins';
import { notFound, quotaExceeded, validationFailed } from '../errors';
import { planOf } from './plans';
import { lockTenant, notifyTenantChanged, originsOf, SIGNING_SECRET_PURPOSE, tokenHash, usageDays, utcDay, type TenantRow, type UsageDay } from './store';

/**
 * The image tenant's credentials and allowlist (SPEC "Image services", DECISIONS "Images"), each
 * change under the tenant's row lock. Tokens are stored as SHA-256 only; the signing secret sealed.
 */
export const newToken = () => `imgt_${randomBase62(40)}`;
export const newSecret = () => `imgs_${randomBase62(40)}`;

export interface IssuedToken {
  token: string;
  created_at: Date;
  previous_valid_until: Date | null;
}

/** A new delivery token; earlier ones keep working (POSTed tokens coexist). */
export async function createToken(db: Knex, tenant: TenantRow): Promise<IssuedToken> {
  const token = newToken();
  const [row] = await db('images_tokens')
    .insert({ service_id: tenant.service_id, token_hash: tokenHash(token) })
    .returning('created_at');
  return { token, created_at: row.created_at, previous_valid_until: null };
}

/** A new token; every older one stops at now + `graceSeconds` (at once for 0), none later than it would have. */
export async function rotateTokens(db: Knex, tenant: TenantRow, graceSeconds: number): Promise<IssuedToken> {
  return db.transaction(async (trx) => {
    await lockTenant(trx, tenant.service_id);
    const [{ until }] = (await trx.raw(`select now() + make_interval(secs => ?) as until`, [graceSeconds])).rows;
    await trx('images_tokens')
      .where({ service_id: tenant.service_id })
      .where((w) => w.whereNull('retired_at').orWhere('retired_at', '>', until))
      .update({ retired_at: until });
    const token = newToken();
    const [row] = await trx('images_tokens')
      .insert({ service_id: tenant.service_id, token_hash: tokenHash(token) })
      .returning('created_at');
    return { token, created_at: row.created_at, previous_valid_until: graceSeconds === 0 ? null : new Date(until) };
  });
}

export interface SigningSecret {
  secret: string;
  created_at: Date;
  previous_valid_until: Date | null;
}

/** Makes the tenant's first signing secret (provisioning); an existing one is kept. */
export async function ensureSecret(db: Knex | Knex.Transaction, keyring: Keyring, serviceId: number): Promise<void> {
  await db('images_secrets')
    .insert({ service_id: serviceId, secret_sealed: keyring.encrypt(SIGNING_SECRET_PURPOSE, newSecret()) })
    .onConflict('service_id')
    .ignore();
}

export async function revealSecret(db: Knex, keyring: Keyring, tenant: TenantRow): Promise<SigningSecret> {
  const row = await db('images_secrets').where({ service_id: tenant.service_id }).first();
  if (!row) throw notFound('signing secret');
  const live = row.previous_valid_until && new Date(row.previous_valid_until) > new Date();
  return {
    secret: keyring.decrypt(SIGNING_SECRET_PURPOSE, row.secret_sealed),
    created_at: row.created_at,
    previous_valid_until: live ? row.previous_valid_until : null,
  };
}

/** A new secret; URLs signed with the old one keep working until now + `graceSeconds` (not at all for 0). */
export async function rotateSecret(db: Knex, keyring: Keyring, tenant: TenantRow, graceSeconds: number): Promise<SigningSecret> {
  return db.transaction(async (trx) => {
    await lockTenant(trx, tenant.service_id);
    const row = await trx('images_secrets').where({ service_id: tenant.service_id }).forUpdate().first();
    const secret = newSecret();
    const [{ until }] = (await trx.raw(`select now() + make_interval(secs => ?) as until`, [graceSeconds])).rows;
    const [saved] = await trx('images_secrets')
      .insert({
        service_id: tenant.service_id,
        secret_sealed: keyring.encrypt(SIGNING_SECRET_PURPOSE, secret),
        previous_sealed: graceSeconds > 0 && row ? row.secret_sealed : null,
        previous_valid_until: graceSeconds > 0 && row ? until : null,
        created_at: trx.fn.now(),
      })
      .onConflict('service_id')
      .merge()
      .returning(['created_at', 'previous_valid_until']);
    await notifyTenantChanged(trx, tenant.service_id);
    return { secret, created_at: saved.created_at, previous_valid_until: saved.previous_valid_until ?? null };
  });
}

/** Adds a pattern to the allowlist: `created` false when it was there already (nothing changes). */
export async function addOrigin(db: Knex, tenant: TenantRow, raw: string): Promise<{ pattern: string; created_at: Date; created: boolean }> {
  let pattern: string;
  try {
    pattern = normalizePattern(raw);
  } catch (err) {
    if (err instanceof OriginPatternError) throw validationFailed([{ param: 'pattern', message: err.message }]);
    throw err;
  }
  return db.transaction(async (trx) => {
    await lockTenant(trx, tenant.service_id);
    const existing = await trx('images_origins').where({ service_id: tenant.service_id, pattern }).first();
    if (existing) return { pattern, created_at: existing.created_at, created: false };
    const limit = planOf(tenant.plan).origin_limit;
    if ((await originsOf(trx, tenant.service_id)).length >= limit) throw quotaExceeded(`The plan allows ${limit} origins; remove one first.`);
    const [row] = await trx('images_origins').insert({ service_id: tenant.service_id, pattern }).returning('created_at');
    await notifyTenantChanged(trx, tenant.service_id);
    return { pattern, created_at: row.created_at, created: true };
  });
}

export async function deleteOrigin(db: Knex, tenant: TenantRow, raw: string): Promise<void> {
  let pattern: string;
  try {
    pattern = normalizePattern(raw);
  } catch {
    throw notFound('origin');
  }
  await db.transaction(async (trx) => {
    const n = await trx('images_origins').where({ service_id: tenant.service_id, pattern }).delete();
    if (n === 0) throw notFound('origin');
    await notifyTenantChanged(trx, tenant.service_id);
  });
}

export interface UsageReport {
  period_start: string;
  period_end: string;
  transformations: number;
  deliveries: number;
  egress_bytes: number;
  included: { transformations: number; deliveries: number; egress_bytes: number; hard_cap: boolean };
  overage: { transformations: number; deliveries: number; egress_bytes: number };
  total_usd: number;
  daily: UsageDay[];
}

/** The current UTC month's usage: totals, the plan's included amounts, overage and its price, one entry per day so far. */
export async function monthUsage(db: Knex, tenant: TenantRow, now = new Date()): Promise<UsageReport> {
  const today = utcDay(now);
  const periodStart = `${today.slice(0, 7)}-01`;
  const periodEnd = utcDay(new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 0)));
  const days = await usageDays(db, tenant.service_id, periodStart, today);
  const byDay = new Map(days.map((d) => [d.date, d]));
  const daily: UsageDay[] = [];
  for (let d = new Date(`${periodStart}T00:00:00Z`); utcDay(d) <= today; d = new Date(d.getTime() + 86_400_000)) {
    daily.push(byDay.get(utcDay(d)) ?? { date: utcDay(d), transformations: 0, deliveries: 0, egress_bytes: 0 });
  }
  const sum = (k: 'transformations' | 'deliveries' | 'egress_bytes') => daily.reduce((n, d) => n + d[k], 0);
  const used = { transformations: sum('transformations'), deliveries: sum('deliveries'), egress_bytes: sum('egress_bytes') };
  const plan = planOf(tenant.plan);
  const over = (k: keyof typeof used) => Math.max(0, used[k] - plan.included[k]);
  const overage = { transformations: over('transformations'), deliveries: over('deliveries'), egress_bytes: over('egress_bytes') };
  const total = plan.included.hard_cap
    ? 0
    : overage.transformations * plan.prices.transformation + overage.deliveries * plan.prices.delivery + overage.egress_bytes * plan.prices.egress_byte;
  return {
    period_start: periodStart,
    period_end: periodEnd,
    ...used,
    included: { ...plan.included },
    overage,
    total_usd: Math.round(total * 100) / 100,
    daily,
  };
}
