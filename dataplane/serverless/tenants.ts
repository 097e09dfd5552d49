import type { Knex } from 'knex';
import { tenantByHandle, tenantOfToken, type LiveTenant } from '../../domain/serverless/store';
import type { Primitive } from '../../domain/serverless/plans';
import { TOKEN_PREFIX } from '../../domain/serverless/plans';
import { DataPlaneError } from '../errors';

/** Lookups are trusted this long: a retired token stops, a suspension or termination shows, within it (DECISIONS: 1 s and 5 s). */
const TRUST_MS = 500;
const MAX_ENTRIES = 50_000;

interface Entry {
  tenant: LiveTenant | null;
  at: number;
}

/**
 * The data planes' view of who is calling: a Bearer token of the primitive, looked up by its SHA-256
 * (serverless_tokens) and remembered briefly, so a hot token costs PostgreSQL one query per
 * TRUST_MS. Refusals (DECISIONS): `401 authentication_required` (no token), `401 invalid_token` (not a
 * live token of this primitive, or its service has ended), `403 service_suspended`.
 */
export class TenantDirectory {
  /** Per primitive, by the whole Authorization header: a hot token costs one Map look-up, no parsing. */
  private readonly tokens = new Map<Primitive, Map<string, Entry>>();
  private readonly handles = new Map<string, Entry>();

  constructor(private readonly db: Knex) {}

  /**
   * The tenant of a token looked up less than TRUST_MS ago, without waiting (the kv reader's usual
   * case); refusals as `bearer`'s; undefined when it must be looked up (`bearer`).
   */
  knownBearer(primitive: Primitive, authorization: string | undefined): LiveTenant | undefined {
    const kept = authorization === undefined ? undefined : this.tokens.get(primitive)?.get(authorization);
    if (kept === undefined || Date.now() - kept.at >= TRUST_MS) return undefined;
    return serving(primitive, kept.tenant);
  }

  async bearer(primitive: Primitive, authorization: string | undefined): Promise<LiveTenant> {
    const known = this.knownBearer(primitive, authorization);
    if (known) return known;
    const match = authorization ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
    if (!match) throw new DataPlaneError(401, 'authentication_error', 'authentication_required', 'Send the token as "Authorization: Bearer <token>".');
    const token = match[1];
    if (!token.startsWith(TOKEN_PREFIX[primitive])) throw invalidToken(primitive);
    let cache = this.tokens.get(primitive);
    if (!cache) this.tokens.set(primitive, (cache = new Map()));
    return serving(primitive, await this.remembered(cache, authorization!, () => tenantOfToken(this.db, primitive, token)));
  }

  /** A tenant named by its handle (a function's public URL); null when there is none or it has ended. */
  async byHandle(primitive: Primitive, handle: string): Promise<LiveTenant | null> {
    if (!/^[a-z0-9]{1,32}$/.test(handle)) return null;
    const tenant = await this.remembered(this.handles, `${primitive}\n${handle}`, () => tenantByHandle(this.db, primitive, handle));
    return tenant && !ENDED.has(tenant.status) ? tenant : null;
  }

  private async remembered(cache: Map<string, Entry>, key: string, read: () => Promise<LiveTenant | null>): Promise<LiveTenant | null> {
    const kept = cache.get(key);
    if (kept && Date.now() - kept.at < TRUST_MS) return kept.tenant;
    const tenant = await read();
    if (cache.size >= MAX_ENTRIES) cache.clear();
    cache.set(key, { tenant, at: Date.now() });
    return tenant;
  }
}

/** Statuses in which a tenant's tokens no longer work (its service is over). */
const ENDED = new Set(['terminated', 'cancelled', 'fraud']);

/** The tenant a token names, when it may be served: refused with `bearer`'s errors otherwise. */
function serving(primitive: Primitive, tenant: LiveTenant | null): LiveTenant {
  if (!tenant || ENDED.has(tenant.status)) throw invalidToken(primitive);
  requireServing(tenant);
  return tenant;
}

const invalidToken = (primitive: Primitive) =>
  new DataPlaneError(401, 'authentication_error', 'invalid_token', `The token is not a live token of this serverless ${primitive} service.`);

/** A suspended (or not yet active) tenant is refused with 403 `service_suspended`. */
export function requireServing(tenant: LiveTenant): void {
  if (tenant.status !== 'active') {
    throw new DataPlaneError(
      403,
      'authorization_error',
      'service_suspended',
      `The serverless ${tenant.primitive} service is ${tenant.status}; it serves nothing.`,
    );
  }
}
