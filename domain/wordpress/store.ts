import type { Knex } from 'knex';
import { parseNumericId } from '../../common/ids';
import { notFound } from '../errors';
import { whereVisibleService, type Principal } from '../principal';
import { findVisibleService, type ServiceRow } from '../services';

/**
 * Hosted sites' records and the only SQL on their tables (db/migrations/20261126000500_wordpress.ts).
 * A site is its service (`svc_<n>`, product family `wordpress`, Service family `other`).
 */
export interface SiteRow {
  service_id: number;
  name: string;
  ip: string | null;
  http_port: number | null;
  db_instance: string;
  db_name: string;
  db_user: string;
  db_password_sealed: string;
  db_admin_password_sealed: string;
  php_version: string;
  cdn_enabled: boolean;
  backups_enabled: boolean;
  backups_frequency: string;
  backups_retention_days: number;
  created_at: Date;
}

export interface SiteTarget {
  service: ServiceRow;
  /** Null while the order that creates it is still building it. */
  site: SiteRow | null;
}

export interface DomainRow {
  id: number;
  service_id: number;
  domain: string;
  platform: boolean;
  primary: boolean;
  certificate_status: 'none' | 'pending' | 'active' | 'failed';
  certificate_failures: string[];
  created_at: Date;
}

const siteOf = (row: Record<string, unknown>): SiteRow => ({ ...(row as unknown as SiteRow), service_id: Number(row.service_id) });
export const domainOf = (row: Record<string, unknown>): DomainRow => ({
  ...(row as unknown as DomainRow),
  id: Number(row.id),
  service_id: Number(row.service_id),
});

/** The caller's site `{id}` (404 for anything else: another account's, another product's). */
export async function findVisibleSite(db: Knex, principal: Principal, rawId: string): Promise<SiteTarget> {
  const service = await findVisibleService<ServiceRow & { product_family: string | null }>(db, principal, rawId, 'other');
  if (service.product_family !== 'wordpress') throw notFound('wordpress');
  return { service, site: await findSite(db, service.id) };
}

export async function findSite(db: Knex | Knex.Transaction, serviceId: number, forUpdate = false): Promise<SiteRow | null> {
  const qb = db('wordpress_sites').where({ service_id: serviceId });
  if (forUpdate) qb.forUpdate();
  const row = await qb.first();
  return row ? siteOf(row) : null;
}

/** The sites the principal sees (for keysetPage). */
export function visibleSitesQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('services')
    .leftJoin('wordpress_sites', 'wordpress_sites.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId, 'services.product_family': 'wordpress' })
    .select('services.*', 'wordpress_sites.name as site_name', 'wordpress_sites.ip as site_ip', 'wordpress_sites.http_port as site_http_port');
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

export async function domainsOf(db: Knex | Knex.Transaction, serviceId: number): Promise<DomainRow[]> {
  const rows = await db('wordpress_domains').where({ service_id: serviceId }).orderBy('id');
  return rows.map(domainOf);
}

/** A domain of the site by its public id (`dom_<n>`); 404 otherwise. */
export async function findDomain(db: Knex | Knex.Transaction, serviceId: number, rawId: string): Promise<DomainRow> {
  const id = parseNumericId('dom', rawId);
  if (id === null) throw notFound('domain');
  const row = await db('wordpress_domains').where({ id, service_id: serviceId }).first();
  if (!row) throw notFound('domain');
  return domainOf(row);
}

/** The host names the site answers to: every domain, and the `www.` form of each apex custom domain. */
export function hostnamesOf(domains: DomainRow[]): string[] {
  const names = new Set<string>();
  for (const d of domains) {
    names.add(d.domain);
    if (!d.platform && isApex(d.domain)) names.add(`www.${d.domain}`);
  }
  return [...names];
}

/** An apex: a registrable name of two labels (`example.com`); `www.` names and deeper ones are not. */
export function isApex(domain: string): boolean {
  return domain.split('.').length === 2;
}
