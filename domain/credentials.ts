import type { Knex } from 'knex';
import { DomainError, authenticationRequired, invalidApiKey } from './errors';
import { formatId } from '../common/ids';
import { randomBase62, sha256Hex } from '../common/crypto';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from './scopes';
import type { Principal } from './principal';

export const API_KEY_PREFIX = 'cloud_live_';
export const SESSION_PREFIX = 'cloud_sess_';

/** Tokens of data planes that are not this API (SPEC "Authentication" 7). */
const DATA_PLANE_PREFIXES: Array<[string, string]> = [
  ['mg_live_', 'the mail sending data plane'],
  ['imgt_', 'the image delivery data plane'],
  ['crt_', 'the serverless cron data plane'],
  ['dbt_', 'the serverless database data plane'],
  ['fnt_', 'the serverless functions data plane'],
  ['kvt_', 'the serverless key-value data plane'],
];
// S3 access keys: 20 upper-case alphanumerics (AWS style, e.g. AKIA...).
const S3_ACCESS_KEY = /^[A-Z0-9]{20}$/;

export const newApiKeyToken = () => `${API_KEY_PREFIX}${randomBase62(40)}`;
export const newSessionToken = () => `${SESSION_PREFIX}${randomBase62(43)}`;

const authError = (code: string, message: string) => new DomainError(401, 'authentication_error', code, message);

interface CacheEntry {
  at: number;
  principal?: Principal;
  error?: DomainError;
  /** Expiry of the credential itself: checked on every use, not only when the entry is loaded. */
  expiresAt: number | null;
  expiredCode?: string;
}

/**
 * Turns a bearer token into a Principal with its effective authority. Results are cached for
 * CREDENTIAL_CACHE_TTL (default 500 ms) per process, which bounds how long a revocation or a lost
 * user permission takes to reach every API process (SPEC: under one second).
 */
export class CredentialResolver {
  private readonly cache = new Map<string, CacheEntry>();
  private readonly lastUsedWrites = new Map<number, number>();

  constructor(
    private readonly db: Knex,
    private readonly cacheTtlMs: number,
  ) {}

  /** Parses `Authorization`; throws the DECISIONS.md 401 codes. */
  async authenticate(header: string | undefined): Promise<Principal> {
    const match = header ? /^Bearer ([\x21-\x7e]+)$/.exec(header.trim()) : null;
    if (!match) throw authenticationRequired();
    const token = match[1];
    for (const [prefix, plane] of DATA_PLANE_PREFIXES) {
      if (token.startsWith(prefix))
        throw authError('wrong_credential_type', `This token belongs to ${plane}, not to this API. Use an API key (cloud_live_...) or a session.`);
    }
    if (S3_ACCESS_KEY.test(token)) throw authError('wrong_credential_type', 'S3 access keys authenticate the object storage data plane, not this API.');
    if (!token.startsWith(API_KEY_PREFIX) && !token.startsWith(SESSION_PREFIX)) throw invalidApiKey();

    const hash = sha256Hex(token);
    let entry = this.cache.get(hash);
    if (!entry || Date.now() - entry.at >= this.cacheTtlMs) {
      entry = await this.load(token, hash);
      this.cache.set(hash, entry);
      if (this.cache.size > 50_000) this.cache.clear();
    }
    if (entry.error) throw entry.error;
    if (entry.expiresAt !== null && entry.expiresAt <= Date.now()) {
      throw entry.expiredCode === 'session_expired'
        ? authError('session_expired', 'The session has expired; sign in again.')
        : authError('api_key_expired', 'The API key has expired.');
    }
    const principal = entry.principal!;
    if (principal.type === 'api_key') this.touchLastUsed(principal);
    return principal;
  }

  /**
   * The principal this process last resolved for a bearer header, however old, without asking the
   * database; null if it never resolved it. Only to attribute a request in the audit log when the
   * database is down, never to authorise one.
   */
  lastKnown(header: string | undefined): Principal | null {
    const match = header ? /^Bearer ([\x21-\x7e]+)$/.exec(header.trim()) : null;
    if (!match) return null;
    return this.cache.get(sha256Hex(match[1]))?.principal ?? null;
  }

  /** Forgets cached credentials (used by this process after a revoke or update, for read-your-writes). */
  invalidate(): void {
    this.cache.clear();
  }

  private async load(token: string, hash: string): Promise<CacheEntry> {
    const at = Date.now();
    if (token.startsWith(SESSION_PREFIX)) {
      const row = await this.db('sessions as s')
        .join('users as u', 'u.id', 's.user_id')
        .where('s.token_hash', hash)
        .whereNull('s.ended_at')
        .first('s.id', 's.account_id', 's.expires_at', 'u.id as user_id', 'u.is_owner', 'u.scopes', 'u.all_services');
      if (!row) return { at, error: invalidApiKey(), expiresAt: null };
      const userServices = await this.userServices(row.user_id, row.all_services);
      const scopes = row.is_owner ? new Set<string>(ALL_SCOPES) : new Set<string>(row.scopes);
      return {
        at,
        expiresAt: new Date(row.expires_at).getTime(),
        expiredCode: 'session_expired',
        principal: {
          type: 'session',
          credentialId: formatId('ses', row.id),
          accountId: row.account_id,
          userId: row.user_id,
          isOwner: row.is_owner,
          scopes,
          serviceAllowlist: [],
          userServices,
          rateLimitTier: null,
        },
      };
    }
    const row = await this.db('api_keys as k')
      .join('users as u', 'u.id', 'k.user_id')
      .where('k.token_hash', hash)
      .first(
        'k.id',
        'k.account_id',
        'k.scopes',
        'k.service_allowlist',
        'k.rate_limit_tier',
        'k.expires_at',
        'k.revoked_at',
        'u.id as user_id',
        'u.is_owner',
        'u.scopes as user_scopes',
        'u.all_services',
      );
    if (!row) return { at, error: invalidApiKey(), expiresAt: null };
    if (row.revoked_at) return { at, error: authError('api_key_revoked', 'The API key has been revoked.'), expiresAt: null };
    const userScopes = row.is_owner ? new Set<string>(ALL_SCOPES) : new Set<string>(row.user_scopes);
    const scopes = new Set<string>((row.scopes as string[]).filter((s) => userScopes.has(s) && !SESSION_ONLY_SCOPES.includes(s)));
    return {
      at,
      expiresAt: row.expires_at ? new Date(row.expires_at).getTime() : null,
      expiredCode: 'api_key_expired',
      principal: {
        type: 'api_key',
        credentialId: formatId('key', row.id),
        accountId: row.account_id,
        userId: row.user_id,
        isOwner: row.is_owner,
        scopes,
        serviceAllowlist: (row.service_allowlist as number[]).map(Number),
        userServices: await this.userServices(row.user_id, row.all_services),
        rateLimitTier: row.rate_limit_tier,
      },
    };
  }

  private async userServices(userId: number, allServices: boolean): Promise<Set<number> | null> {
    if (allServices) return null;
    const rows: Array<{ service_id: number }> = await this.db('user_service_permissions').where({ user_id: userId }).select('service_id');
    return new Set(rows.map((r) => Number(r.service_id)));
  }

  /** `last_used_at` is written at most once a minute per key, off the request path. */
  private touchLastUsed(principal: Principal): void {
    const keyId = Number(principal.credentialId.slice(4));
    const now = Date.now();
    const last = this.lastUsedWrites.get(keyId) ?? 0;
    if (now - last < 60_000) return;
    this.lastUsedWrites.set(keyId, now);
    this.db('api_keys')
      .where({ id: keyId })
      .update({ last_used_at: this.db.fn.now() })
      .catch(() => this.lastUsedWrites.delete(keyId));
  }
}
