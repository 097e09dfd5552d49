import { createHash } from 'node:crypto';

/**
 * What an authoritative DNS server can do for the DNS family (the shape of PowerDNS's HTTP API):
 * zones, and the RRsets in them (every record of one name and type, with one TTL).
 *
 * Names crossing this interface are absolute, lower case, in ASCII (punycode), without the trailing
 * dot: `example.org`, `www.example.org`, `_sip._tcp.example.org`. Values are record contents in the
 * zone-file presentation form the server keeps (`10 mail.example.org.`, `"v=spf1 -all"`), which the
 * callers produce with providers/dns.values.ts (the server's grammar, which the API checks values
 * with); a server refuses content it would store differently.
 *
 * Every method throws only the errors of providers/errors.ts: BackendUnavailableError when the
 * server does not answer, BackendRefusedError when it refuses the change (bad content, a name out of
 * the zone, a CNAME beside other data), BackendGoneError when the zone is not on the server.
 * Implementations: providers/powerdns/powerdns.adapter.ts (the real server) and
 * providers/simulator/dns.simulator.ts (PostgreSQL). The outage switch wraps either
 * (providers/switchboard.ts `withOutageSwitch`), it is not part of them.
 */
export const RRSET_TYPES = ['A', 'AAAA', 'CNAME', 'MX', 'TXT', 'NS', 'SRV', 'CAA', 'PTR'] as const;
/** The types customers write; a zone also holds its SOA, which only the server changes. */
export type RRsetType = (typeof RRSET_TYPES)[number];

export interface DnsRRset {
  /** Absolute owner name, no trailing dot. */
  name: string;
  /** One of RRSET_TYPES, or SOA (read-only) when listing. */
  type: string;
  ttl: number;
  /** Record contents, sorted, in the server's presentation form. */
  values: string[];
}

export type DnsZoneKind = 'native' | 'master' | 'slave';

export interface DnsZoneInfo {
  name: string;
  kind: DnsZoneKind;
  /** The SOA serial; it increases with every change. */
  serial: number;
  /** Host names of the apex NS records, without the trailing dot. */
  nameservers: string[];
  /** Every record in the zone, SOA and NS included. */
  recordCount: number;
}

/** What a new zone's SOA and NS records say (the operator's configuration, not the customer's). */
export interface ZoneDefaults {
  /** Host names of the authoritative servers; the first is the SOA's primary (MNAME). */
  nameservers: string[];
  /** The SOA RNAME as a host name (`hostmaster.example.net`). */
  hostmaster: string;
  /** TTL of the SOA and NS records. */
  ttl: number;
  /** SOA refresh, retry, expire and negative-caching TTL, in seconds. */
  refresh: number;
  retry: number;
  expire: number;
  minimum: number;
}

export const DEFAULT_SOA_TIMERS = { ttl: 3600, refresh: 10800, retry: 3600, expire: 604800, minimum: 3600 } as const;

export interface DnsProvider {
  /**
   * Creates the zone with its SOA and NS records. Idempotent: when the zone already exists it is left
   * as it is and its info returned (activities retry).
   */
  createZone(zone: string, defaults: ZoneDefaults): Promise<DnsZoneInfo>;
  /** Deletes the zone and all its records. A zone that is not there counts as deleted. */
  deleteZone(zone: string): Promise<void>;
  zoneInfo(zone: string): Promise<DnsZoneInfo>;
  /** Every RRset of the zone, SOA included, sorted by name then type. */
  listRRsets(zone: string): Promise<DnsRRset[]>;
  /** One RRset (the apex SOA too), or null when the zone has none of that name and type. Cheap: it does not read the whole zone. */
  getRRset(zone: string, name: string, type: RRsetType | 'SOA'): Promise<DnsRRset | null>;
  /** Replaces every record of that name and type with `values` (at least one). */
  replaceRRset(zone: string, rrset: DnsRRset & { type: RRsetType }): Promise<void>;
  /** Deletes every record of that name and type; deleting what is not there is not an error. */
  deleteRRset(zone: string, name: string, type: RRsetType): Promise<void>;
  /** The zone file as the server writes it. */
  exportZone(zone: string): Promise<string>;
  /**
   * A digest of the zone's current content as the server holds it (SOA included), so that any change,
   * also one made on the server directly, gives a different value. The ETag of the zone's records.
   */
  fingerprint(zone: string): Promise<string>;
}

/** The digest behind `fingerprint`: the same for the same RRsets whatever their order. */
export function fingerprintRRsets(rrsets: readonly DnsRRset[]): string {
  const lines = rrsets.map((r) => `${r.name}\u0000${r.type}\u0000${r.ttl}\u0000${[...r.values].sort().join('\u0001')}`).sort();
  return createHash('sha256').update(lines.join('\n')).digest('base64url').slice(0, 32);
}

/** Sort order of listings: by name (apex first, then by labels from the right), then by type. */
export function compareRRsets(a: DnsRRset, b: DnsRRset): number {
  const byName = compareNames(a.name, b.name);
  return byName !== 0 ? byName : a.type < b.type ? -1 : a.type > b.type ? 1 : 0;
}

function compareNames(a: string, b: string): number {
  const la = a.split('.').reverse();
  const lb = b.split('.').reverse();
  for (let i = 0; i < Math.min(la.length, lb.length); i++) {
    if (la[i] !== lb[i]) return la[i] < lb[i] ? -1 : 1;
  }
  return la.length - lb.length;
}
