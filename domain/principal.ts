import type { Knex } from 'knex';

/**
 * Who is calling, with their effective authority already intersected:
 * key scopes ∩ the creating user's scopes; key allowlist ∩ the user's per-service permissions.
 */
export interface Principal {
  type: 'api_key' | 'session';
  /** `key_<n>` or `ses_<n>`; recorded in the audit log. */
  credentialId: string;
  accountId: number;
  userId: number;
  isOwner: boolean;
  scopes: ReadonlySet<string>;
  /** The key's allowlist as stored (empty = whole account); what the Account resource shows. */
  serviceAllowlist: number[];
  /** Services the user may touch; null = all services of the account. */
  userServices: ReadonlySet<number> | null;
  rateLimitTier: string | null;
}

export function canSeeService(principal: Principal, serviceId: number): boolean {
  if (principal.serviceAllowlist.length > 0 && !principal.serviceAllowlist.includes(serviceId)) return false;
  if (principal.userServices && !principal.userServices.has(serviceId)) return false;
  return true;
}

/** The service ids the principal is limited to, or null when it may see every service of the account. */
export function visibleServiceIds(principal: Principal): number[] | null {
  const { serviceAllowlist, userServices } = principal;
  if (serviceAllowlist.length === 0 && !userServices) return null;
  const candidates = serviceAllowlist.length > 0 ? serviceAllowlist : [...userServices!];
  return userServices ? candidates.filter((id) => userServices.has(id)) : candidates;
}

/** Restricts a query to the service ids the principal may see (callers scope it to the account). */
export function whereVisibleService<T extends Knex.QueryBuilder>(qb: T, principal: Principal, column: string): T {
  const ids = visibleServiceIds(principal);
  if (ids) qb.whereIn(column, ids);
  return qb;
}
