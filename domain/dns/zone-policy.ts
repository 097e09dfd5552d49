import { getDomain, parse } from 'tldts';
import type { Config } from '../../common/config';

/**
 * Which zone names a customer may hold (docs/dns.md "Ordering and terminating"). One PowerDNS serves
 * every account's zones, and it answers each query from the most specific zone it has: a zone that
 * equals, contains or lies inside another account's zone would answer (or shadow) names that are not
 * its holder's. So a zone is refused when it
 * - is a public suffix (`org`, `co.uk`, `github.io`: the Public Suffix List, ICANN and private
 *   sections, from the `tldts` package, which ships the list and works offline) or a bare TLD;
 * - equals, contains or lies inside one of the platform's own names (`reservedZones`);
 * - equals, contains or lies inside a zone another account holds (the SQL is in store.ts); the same
 *   account may nest its own zones (`example.org` and `dev.example.org`), never hold one name twice.
 */

/** `allowPrivateDomains`: `github.io` is a suffix too. The names are already normalised (store.ts). */
const PSL = { allowPrivateDomains: true, extractHostname: false, validateHostname: false } as const;

/** Whether the name is a public suffix itself; an unlisted TLD (`test`, `example`) counts as one. */
export function isPublicSuffix(name: string): boolean {
  return parse(name, PSL).publicSuffix === name;
}

/** The registrable domain of a host name (`ns1.cloud.example.net` -> `example.net`), or the name itself. */
function domainOf(host: string): string {
  const name = host.trim().toLowerCase().replace(/\.$/, '');
  return getDomain(name, PSL) ?? name;
}

/**
 * The platform's own names: `DNS_RESERVED_ZONES`, and the domains of the name servers and of the
 * hostmaster every zone is served with (a customer holding them could answer for the name servers).
 */
export function reservedZones(config: Pick<Config, 'DNS_NAMESERVERS' | 'DNS_HOSTMASTER'> & Partial<Pick<Config, 'DNS_RESERVED_ZONES'>>): string[] {
  const own = [...config.DNS_NAMESERVERS, config.DNS_HOSTMASTER].map(domainOf);
  return [...new Set([...(config.DNS_RESERVED_ZONES ?? []), ...own])];
}

/** How a held zone stands to the one asked for. */
export type ZoneOverlap = 'same' | 'parent' | 'child';

/** How `held` stands to `zone`, or null when neither contains the other. */
export function overlapOf(zone: string, held: string): ZoneOverlap | null {
  if (held === zone) return 'same';
  if (zone.endsWith(`.${held}`)) return 'parent';
  if (held.endsWith(`.${zone}`)) return 'child';
  return null;
}

/** Why a zone cannot be held, for the order (400) and for the provisioner (a backend refusal). */
export interface ZoneRefusal {
  /** `public_suffix` is a bad name (`validation_failed`); the others are taken (`hostname_taken`). */
  reason: 'public_suffix' | 'reserved' | 'taken';
  message: string;
}

/** The refusal of a public suffix or of a name that overlaps a reserved one; null when neither. */
export function policyRefusal(zone: string, reserved: readonly string[]): ZoneRefusal | null {
  if (isPublicSuffix(zone)) {
    return {
      reason: 'public_suffix',
      message: `"${zone}" is a public suffix: a zone must be a domain below it, such as example.${zone}.`,
    };
  }
  for (const name of reserved) {
    const overlap = overlapOf(zone, name);
    if (overlap === 'same') return { reason: 'reserved', message: `The zone ${zone} is reserved for the platform's own use.` };
    if (overlap) {
      const where = overlap === 'parent' ? 'lies inside' : 'contains';
      return { reason: 'reserved', message: `The zone ${zone} ${where} ${name}, which is reserved for the platform's own use.` };
    }
  }
  return null;
}

/** The refusal of a zone that overlaps a held one; it never names another account's zone. */
export function takenRefusal(zone: string, overlap: ZoneOverlap): ZoneRefusal {
  const message = {
    same: `The zone ${zone} is already hosted here.`,
    parent: `The zone ${zone} lies inside a zone that another account hosts here.`,
    child: `The zone ${zone} contains a zone that another account hosts here.`,
  }[overlap];
  return { reason: 'taken', message };
}

/**
 * Every name `zone` can overlap by containment from above: itself and its ancestors
 * (`shop.example.org` -> `shop.example.org`, `example.org`, `org`).
 */
export function selfAndAncestors(zone: string): string[] {
  const labels = zone.split('.');
  return labels.map((_, i) => labels.slice(i).join('.'));
}

/**
 * The key of the advisory lock that serialises claims on one DNS tree: zones that can overlap
 * always share their top-level label, so one lock per TLD orders every pair that matters.
 */
export function treeLockKey(zone: string): string {
  return `dns-zone-tree:${zone.slice(zone.lastIndexOf('.') + 1)}`;
}
