import { Resolver } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Knex } from 'knex';
import { BackendUnavailableError } from '../../providers/errors';
import type { WordpressProvider } from '../../providers/wordpress.provider';
import { isPublicSuffix } from '../dns/zone-policy';
import { backendUnavailable, DomainError, notFound, validationFailed } from '../errors';
import { isSiteNameTaken, lockHostNames } from '../orders/store';
import { domainOf, domainsOf, findDomain, hostnamesOf, isApex, type DomainRow, type SiteRow } from './store';

/**
 * A hosted site's domains (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): the platform hostname
 * (made with the site: `platform`, primary until a custom domain is) and custom domains.
 *
 * - A custom domain is a lower-case DNS name of two labels or more, not an IP address, not a public
 *   suffix, not one of the platform's own names (`reserved`: DNS_RESERVED_ZONES and the CaaS apps
 *   domain, with every name below them). An apex (`example.com`) is served with its `www.` form.
 * - Host names are unique platform-wide: every name a site serves (its domains, and an apex custom
 *   domain's `www.` form) belongs to it alone. The same site's name again is `409 already_exists`;
 *   a name another site serves (an apex whose `www.` form another site serves, a `www.` form of
 *   another site's apex custom domain), another service's label or a live order's site name is
 *   `400 hostname_taken`, as for an order's `site_name`. Param `domain` either way. The check runs
 *   again under the names' advisory locks (domain/orders/store.ts lockHostNames), which orders and
 *   the provisioner take too, so two claims racing for one name never both win.
 * - It must point here (its A records through DNS_RESOLVER hold the site's `ip`; an apex's `www.`
 *   too) unless `force`: `400 domain_not_pointed`.
 * - The first custom domain becomes primary. `home` and `siteurl` are `http://<primary host>`, where
 *   the primary host of an apex is its `www.` form.
 * - Certificates (custom domains only; the platform hostname's stays `none`): each attempt checks
 *   that the names point here, then has the host's certificate authority issue one
 *   (providers.wordpress.issueCertificate). A failed attempt is recorded with its time in
 *   `certificate_failures`; the authority allows CERT_FAILURES_PER_HOUR failures per domain in any
 *   hour, so at that count no attempt is made (status `failed`) until the oldest is an hour old. An
 *   attempt the host or the resolver did not answer leaves `pending` and counts nothing.
 *
 * Changes hold the site's row lock and call the backend inside the transaction: a backend that
 * refuses or does not answer leaves the records as they were, and a retry is safe.
 */
export const CERT_FAILURES_PER_HOUR = 5;
const HOUR_MS = 3_600_000;
const HOST = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$/;
const UNIQUE_VIOLATION = '23505';

export interface DomainDeps {
  db: Knex;
  wordpress: WordpressProvider;
  /** DNS_RESOLVER (`host:port`); unset: the system's resolver. */
  resolver?: string;
  /** Names a customer's domain may neither be nor lie under. */
  reserved: readonly string[];
  now?: () => Date;
}

export interface DnsRecord {
  type: 'A' | 'AAAA';
  host: string;
  value: string;
}

export interface Pointing {
  points: boolean;
  /** Null when it points here. */
  reason: string | null;
}

const hostnameTaken = (domain: string) =>
  new DomainError(400, 'invalid_request_error', 'hostname_taken', `${domain} is already used by another site.`, 'domain');
const alreadyExists = (domain: string) =>
  new DomainError(409, 'invalid_request_error', 'already_exists', `${domain} is already a domain of this site.`, 'domain');
const notPointed = (domain: string, reason: string) =>
  new DomainError(
    400,
    'invalid_request_error',
    'domain_not_pointed',
    `${domain} does not point to this site yet (${reason}); publish the DNS records first, or pass force.`,
    'domain',
  );

/** The domain as stored (lower-case, no final dot), or `400 validation_failed` (param `domain`). */
export function normalizeDomain(raw: string, reserved: readonly string[]): string {
  const domain = raw.trim().toLowerCase().replace(/\.$/, '');
  const refuse = (message: string) => validationFailed([{ param: 'domain', message }]);
  if (!HOST.test(domain)) throw refuse('must be a DNS name of two labels or more ([a-z0-9-]), without scheme, port, path or wildcard');
  if (/^\d+$/.test(domain.slice(domain.lastIndexOf('.') + 1)) || isIP(domain)) throw refuse('must be a DNS name, not an IP address');
  if (isPublicSuffix(domain)) throw refuse(`${domain} is a public suffix: use a domain registered below it`);
  for (const name of reserved) {
    if (domain === name || domain.endsWith(`.${name}`)) throw refuse(`${domain} is reserved for the platform's own use`);
  }
  return domain;
}

/** The names a domain serves and its certificate holds: an apex custom domain and its `www.` form. */
export function namesOf(d: Pick<DomainRow, 'domain' | 'platform'>): string[] {
  return !d.platform && isApex(d.domain) ? [d.domain, `www.${d.domain}`] : [d.domain];
}

/** The host `home` and `siteurl` use when the domain is primary: an apex custom domain's `www.` form. */
export function primaryHostOf(d: Pick<DomainRow, 'domain' | 'platform'>): string {
  return !d.platform && isApex(d.domain) ? `www.${d.domain}` : d.domain;
}

/** The site's primary host (the platform hostname when no row says otherwise). */
export function primaryHost(site: Pick<SiteRow, 'name'>, domains: DomainRow[]): string {
  const primary = domains.find((d) => d.primary);
  return primary ? primaryHostOf(primary) : site.name;
}

/** The records a customer publishes for the domain. */
export function dnsRecordsOf(d: Pick<DomainRow, 'domain' | 'platform'>, ip: string): DnsRecord[] {
  const type = isIP(ip) === 6 ? 'AAAA' : 'A';
  return namesOf(d).map((host) => ({ type, host, value: ip }));
}

/** Whether every name resolves (A, or AAAA for an IPv6 site) to `ip` through the resolver; 503 when it does not answer. */
export async function pointsHere(resolverAddress: string | undefined, names: string[], ip: string): Promise<Pointing> {
  const resolver = new Resolver({ timeout: 2_000, tries: 2 });
  if (resolverAddress) resolver.setServers([resolverAddress]);
  const v6 = isIP(ip) === 6;
  const type = v6 ? 'AAAA' : 'A';
  for (const name of names) {
    let found: string[];
    try {
      found = v6 ? await resolver.resolve6(name) : await resolver.resolve4(name);
    } catch (err) {
      const code = (err as { code?: string }).code ?? '';
      if (!['ENOTFOUND', 'ENODATA', 'ENONAME', 'NOTFOUND', 'NODATA', 'SERVFAIL', 'REFUSED'].includes(code))
        throw backendUnavailable('wordpress', 'DNS resolver');
      found = [];
    }
    if (found.length === 0) return { points: false, reason: `${name}: no ${type} record` };
    if (!found.includes(ip)) return { points: false, reason: `${name}: ${type} records ${found.join(', ')} do not include ${ip}` };
  }
  return { points: true, reason: null };
}

/**
 * Refuses a name this site has (409) or that another site serves, another service is labelled
 * with or a live order claims (400 hostname_taken): the names `domain` would serve (an apex's `www.`
 * form too) against every name the others serve (an apex custom domain's `www.` form too).
 */
async function checkAvailable(db: Knex | Knex.Transaction, serviceId: number, domain: string, own: DomainRow[]): Promise<void> {
  const ownNames = hostnamesOf(own);
  if (ownNames.includes(domain)) throw alreadyExists(domain);
  // The names this domain would serve, and the apex whose `www.` form it is.
  const served = namesOf({ domain, platform: false });
  const apexOfWww = domain.startsWith('www.') && isApex(domain.slice(4)) ? domain.slice(4) : null;
  const rows: DomainRow[] = (
    await db('wordpress_domains')
      .whereIn('domain', apexOfWww ? [...served, apexOfWww] : served)
      .whereNot({ service_id: serviceId })
  ).map(domainOf);
  if (rows.some((r) => served.includes(r.domain) || (r.domain === apexOfWww && !r.platform))) throw hostnameTaken(domain);
  // A live order's site name (or another service's label) counts as taken, as for orders.
  for (const name of served) {
    if (!ownNames.includes(name) && (await isSiteNameTaken(db, name))) throw hostnameTaken(domain);
  }
}

/** The certificate's attempt for one custom domain, recorded on its row (see the module comment). */
async function attemptCertificate(deps: DomainDeps, site: SiteRow, row: DomainRow): Promise<DomainRow> {
  if (row.platform) return row;
  const now = deps.now?.() ?? new Date();
  const recent = (row.certificate_failures ?? []).filter((t) => now.getTime() - Date.parse(t) < HOUR_MS);
  let status: DomainRow['certificate_status'];
  let failures = recent;
  if (recent.length >= CERT_FAILURES_PER_HOUR) {
    status = 'failed';
  } else {
    try {
      const names = namesOf(row);
      const pointing = await pointsHere(deps.resolver, names, site.ip!);
      if (!pointing.points) throw new Error(pointing.reason!);
      await deps.wordpress.issueCertificate(site.service_id, row.domain, names);
      status = 'active';
    } catch (err) {
      const unanswered = err instanceof BackendUnavailableError || (err instanceof DomainError && err.status === 503);
      status = unanswered ? 'pending' : 'failed';
      if (!unanswered) failures = [...recent, now.toISOString()];
    }
  }
  const [updated] = await deps
    .db('wordpress_domains')
    .where({ id: row.id })
    .update({ certificate_status: status, certificate_failures: JSON.stringify(failures) })
    .returning('*');
  return updated ? domainOf(updated) : { ...row, certificate_status: status, certificate_failures: failures };
}

/** Adds a custom domain (module comment), then attempts its certificate. */
export async function addDomain(deps: DomainDeps, site: SiteRow, raw: string, force: boolean): Promise<{ domain: DomainRow; dnsRecords: DnsRecord[] }> {
  const domain = normalizeDomain(raw, deps.reserved);
  const sid = site.service_id;
  // Checked first without locks (no DNS lookup for a name that is taken), then again under them.
  await checkAvailable(deps.db, sid, domain, await domainsOf(deps.db, sid));
  if (!force) {
    const pointing = await pointsHere(deps.resolver, namesOf({ domain, platform: false }), site.ip!);
    if (!pointing.points) throw notPointed(domain, pointing.reason!);
  }
  const added = await deps.db.transaction(async (trx) => {
    await trx('wordpress_sites').where({ service_id: sid }).forUpdate().first();
    // The claims of these names (another site's domain, an order's site name) wait for this one.
    await lockHostNames(trx, namesOf({ domain, platform: false }));
    const own = await domainsOf(trx, sid);
    await checkAvailable(trx, sid, domain, own);
    const first = !own.some((d) => !d.platform);
    if (first) await trx('wordpress_domains').where({ service_id: sid }).update({ primary: false });
    let row: DomainRow;
    try {
      const [inserted] = await trx('wordpress_domains')
        .insert({ service_id: sid, domain, platform: false, primary: first, certificate_status: 'pending' })
        .returning('*');
      row = domainOf(inserted);
    } catch (err) {
      if ((err as { code?: string }).code === UNIQUE_VIOLATION) throw hostnameTaken(domain);
      throw err;
    }
    const all = [...own.map((d) => (first ? { ...d, primary: false } : d)), row];
    await deps.wordpress.setHostnames(sid, hostnamesOf(all), primaryHost(site, all));
    return row;
  });
  return { domain: await attemptCertificate(deps, site, added), dnsRecords: dnsRecordsOf(added, site.ip!) };
}

/** Removes a custom domain: its certificate, its names; a primary one hands primary back to the platform hostname. */
export async function deleteDomain(deps: DomainDeps, site: SiteRow, rawId: string): Promise<void> {
  const sid = site.service_id;
  const target = await findDomain(deps.db, sid, rawId);
  if (target.platform) throw validationFailed([{ param: 'domain_id', message: 'the platform hostname cannot be removed' }]);
  await deps.db.transaction(async (trx) => {
    await trx('wordpress_sites').where({ service_id: sid }).forUpdate().first();
    const own = await domainsOf(trx, sid);
    const row = own.find((d) => d.id === target.id);
    if (!row) return; // removed meanwhile
    const rest = own.filter((d) => d.id !== row.id).map((d) => (row.primary && d.platform ? { ...d, primary: true } : d));
    await trx('wordpress_domains').where({ id: row.id }).delete();
    if (row.primary) await trx('wordpress_domains').where({ service_id: sid, platform: true }).update({ primary: true });
    await deps.wordpress.removeCertificate(sid, row.domain);
    await deps.wordpress.setHostnames(sid, hostnamesOf(rest), primaryHost(site, rest));
  });
}

/** Makes the domain primary: `home` and `siteurl` become `http://<its primary host>`. */
export async function makePrimary(deps: DomainDeps, site: SiteRow, rawId: string): Promise<DomainRow> {
  const sid = site.service_id;
  const target = await findDomain(deps.db, sid, rawId);
  return deps.db.transaction(async (trx) => {
    await trx('wordpress_sites').where({ service_id: sid }).forUpdate().first();
    const own = await domainsOf(trx, sid);
    const row = own.find((d) => d.id === target.id);
    if (!row) throw notFound('domain');
    await trx('wordpress_domains').where({ service_id: sid }).whereNot({ id: row.id }).update({ primary: false });
    await trx('wordpress_domains').where({ id: row.id }).update({ primary: true });
    const all = own.map((d) => ({ ...d, primary: d.id === row.id }));
    await deps.wordpress.setHostnames(sid, hostnamesOf(all), primaryHostOf(row));
    return { ...row, primary: true };
  });
}

/**
 * Tries again every custom domain without an active certificate: its `failed` status is cleared and
 * an attempt made. Failures the authority still counts are kept: a domain with
 * CERT_FAILURES_PER_HOUR of them in the last hour stays `failed` without an attempt.
 */
export async function retryCertificates(deps: DomainDeps, site: SiteRow): Promise<DomainRow[]> {
  const own = await domainsOf(deps.db, site.service_id);
  const out: DomainRow[] = [];
  for (const row of own) out.push(row.platform || row.certificate_status === 'active' ? row : await attemptCertificate(deps, site, row));
  return out;
}

/** Whether the domain (and an apex's `www.`) points at the site now, and why not. */
export async function verifyDomain(deps: DomainDeps, site: SiteRow, rawId: string): Promise<{ domain: string; points_here: boolean; reason: string | null }> {
  const row = await findDomain(deps.db, site.service_id, rawId);
  const pointing = await pointsHere(deps.resolver, namesOf(row), site.ip!);
  return { domain: row.domain, points_here: pointing.points, reason: pointing.reason };
}

/** The CDN stand-in's base URL for the site: the host's nginx serves its uploads (cached) under it. */
export function cdnUrlOf(site: Pick<SiteRow, 'service_id' | 'ip' | 'http_port'>): string {
  const host = site.ip!.includes(':') ? `[${site.ip}]` : site.ip!;
  return `http://${host}:${site.http_port}/_cdn/svc_${site.service_id}`;
}

/** Turns the CDN on or off: front-end upload URLs start with its URL while on. */
export async function setCdn(deps: Pick<DomainDeps, 'db' | 'wordpress'>, site: SiteRow, enabled: boolean): Promise<{ enabled: boolean; url: string | null }> {
  const url = enabled ? cdnUrlOf(site) : null;
  await deps.wordpress.setCdn(site.service_id, url);
  await deps.db('wordpress_sites').where({ service_id: site.service_id }).update({ cdn_enabled: enabled });
  return { enabled, url };
}
