import type { Knex } from 'knex';
import { randomBytes, scryptSync } from 'node:crypto';
import { sha256Hex } from '../../common/crypto';
import { newApiKeyToken, newSessionToken } from '../../domain/credentials';
import { DEFAULT_CAPABILITIES } from '../../domain/capabilities';

/** Direct database factories for test data (the HTTP paths are tested on their own). */
export async function createAccount(db: Knex, fields: { credit?: number; currency?: string } = {}) {
  const [row] = await db('accounts')
    .insert({ name: 'Test Account', email: 'owner@test.example', country: 'DE', currency: fields.currency ?? 'EUR' })
    .returning('id');
  // The balance lives with (simulated) billing.
  await db('billing_accounts').insert({ account_id: row.id, credit: fields.credit ?? 5 });
  return { accountId: Number(row.id) };
}

export const FIXTURE_PASSWORD = 'correct horse battery staple';
/**
 * One hash for every fixture user, made with cheap scrypt parameters (N=2^10): production's (2^17,
 * common/crypto.ts) take most of a second per sign-in, and tests sign in often. The API treats it as
 * any hash of older parameters: it verifies, and a successful sign-in replaces it with a full one.
 */
const passwordHash = (() => {
  const salt = randomBytes(16);
  const key = scryptSync(FIXTURE_PASSWORD.normalize('NFKC'), salt, 32, { N: 1024, r: 8, p: 1 });
  return `scrypt$1024$8$1$${salt.toString('base64')}$${key.toString('base64')}`;
})();

export async function createUser(
  db: Knex,
  accountId: number,
  opts: { isOwner?: boolean; scopes?: string[]; serviceIds?: number[] | null; email?: string } = {},
) {
  const email = opts.email ?? `user-${randomBytes(4).toString('hex')}@test.example`;
  const [row] = await db('users')
    .insert({
      account_id: accountId,
      email,
      password_hash: passwordHash,
      is_owner: opts.isOwner ?? false,
      scopes: opts.scopes ?? [],
      all_services: opts.serviceIds == null,
    })
    .returning('id');
  const userId = Number(row.id);
  for (const serviceId of opts.serviceIds ?? []) await db('user_service_permissions').insert({ user_id: userId, service_id: serviceId });
  return { userId, email };
}

export async function createSession(db: Knex, accountId: number, userId: number, ttlMs = 3_600_000) {
  const token = newSessionToken();
  const [row] = await db('sessions')
    .insert({ token_hash: sha256Hex(token), user_id: userId, account_id: accountId, expires_at: new Date(Date.now() + ttlMs) })
    .returning('id');
  return { token, id: `ses_${row.id}` };
}

export async function createApiKey(
  db: Knex,
  accountId: number,
  userId: number,
  opts: { scopes: string[]; allowlist?: number[]; expiresAt?: Date | null; revoked?: boolean; tier?: string },
) {
  const token = newApiKeyToken();
  const [row] = await db('api_keys')
    .insert({
      account_id: accountId,
      user_id: userId,
      name: 'fixture key',
      token_hash: sha256Hex(token),
      token_prefix: token.slice(0, 15),
      token_last4: token.slice(-4),
      scopes: opts.scopes,
      service_allowlist: opts.allowlist ?? [],
      rate_limit_tier: opts.tier ?? 'standard',
      expires_at: opts.expiresAt ?? null,
      revoked_at: opts.revoked ? new Date() : null,
    })
    .returning('id');
  return { token, id: `key_${row.id}`, numericId: Number(row.id) };
}

export async function createService(
  db: Knex,
  accountId: number,
  opts: { family?: string; status?: string; label?: string; capabilities?: Record<string, boolean>; product?: string } = {},
) {
  const family = opts.family ?? 'vps';
  const [row] = await db('services')
    .insert({
      account_id: accountId,
      family,
      product: opts.product ?? `${family}-test`,
      status: opts.status ?? 'active',
      name: `Test ${family}`,
      label: opts.label ?? `${family}-${randomBytes(3).toString('hex')}`,
      billing_cycle: 'monthly',
      next_due_date: '2030-01-01',
      capabilities: JSON.stringify(opts.capabilities ?? DEFAULT_CAPABILITIES[family] ?? {}),
    })
    .returning('id');
  return { serviceId: Number(row.id), id: `svc_${row.id}` };
}
