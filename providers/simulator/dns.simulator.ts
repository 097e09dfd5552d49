import type { Knex } from 'knex';
import { formatZoneFile } from '../dns.zone-file';
import {
  compareRRsets,
  fingerprintRRsets,
  type DnsProvider,
  type DnsRRset,
  type DnsZoneInfo,
  type DnsZoneKind,
  type RRsetType,
  type ZoneDefaults,
} from '../dns.provider';
import { canonicalValue, DnsValueError } from '../dns.values';
import { BackendGoneError, BackendRefusedError } from '../errors';
import { simulatedDelay } from '../switchboard';

/** Latency of one call to the DNS server's API, at SIM_DELAY_SCALE 1. */
const CALL_MS = 20;

interface ZoneRow {
  name: string;
  kind: DnsZoneKind;
  serial: string | number;
  soa_mname: string;
  soa_rname: string;
  soa_ttl: number;
  soa_refresh: number;
  soa_retry: number;
  soa_expire: number;
  soa_minimum: number;
}

interface RRsetRow {
  zone: string;
  name: string;
  type: string;
  ttl: number;
  values: string[];
}

const host = (name: string) => `${name.replace('@', '.').replace(/\.$/, '').toLowerCase()}.`;

/**
 * The authoritative DNS server, simulated in PostgreSQL (DNS_BACKEND=simulator): it keeps zones and
 * RRsets, raises the SOA serial by one on every change (as PowerDNS does with SOA-EDIT-API INCREASE),
 * refuses what PowerDNS refuses (content not in presentation form, names out of the zone, a CNAME
 * beside other data, duplicate values) and exports the zone file in PowerDNS's form. It answers no
 * DNS queries. Changes to one zone are serialised by a row lock on the zone.
 */
export class DnsSimulator implements DnsProvider {
  private readonly backend = 'dns';

  constructor(
    private readonly db: Knex,
    private readonly scale: number,
  ) {}

  async createZone(zone: string, defaults: ZoneDefaults): Promise<DnsZoneInfo> {
    await this.call();
    const [primary] = defaults.nameservers;
    if (!primary) throw new BackendRefusedError(this.backend, 'No name servers are configured for new zones.', 'misconfigured');
    await this.db.transaction(async (trx) => {
      const inserted = await trx('sim_dns_zones')
        .insert({
          name: zone,
          serial: 1,
          soa_mname: host(primary),
          soa_rname: host(defaults.hostmaster),
          soa_ttl: defaults.ttl,
          soa_refresh: defaults.refresh,
          soa_retry: defaults.retry,
          soa_expire: defaults.expire,
          soa_minimum: defaults.minimum,
        })
        .onConflict('name')
        .ignore()
        .returning('name');
      if (inserted.length === 0) return;
      await trx('sim_dns_rrsets').insert({ zone, name: zone, type: 'NS', ttl: defaults.ttl, values: [...new Set(defaults.nameservers.map(host))].sort() });
    });
    return this.zoneInfo(zone);
  }

  async deleteZone(zone: string): Promise<void> {
    await this.call();
    await this.db('sim_dns_zones').where({ name: zone }).delete();
  }

  async zoneInfo(zone: string): Promise<DnsZoneInfo> {
    await this.call();
    const row = await this.zoneRow(this.db, zone);
    const rrsets = await this.rrsets(this.db, row);
    const ns = rrsets.find((r) => r.name === zone && r.type === 'NS');
    return {
      name: zone,
      kind: row.kind,
      serial: Number(row.serial),
      nameservers: (ns?.values ?? []).map((v) => v.replace(/\.$/, '')),
      recordCount: rrsets.reduce((n, r) => n + r.values.length, 0),
    };
  }

  async listRRsets(zone: string): Promise<DnsRRset[]> {
    await this.call();
    return this.rrsets(this.db, await this.zoneRow(this.db, zone));
  }

  async getRRset(zone: string, name: string, type: RRsetType | 'SOA'): Promise<DnsRRset | null> {
    await this.call();
    const zoneRow = await this.zoneRow(this.db, zone);
    if (type === 'SOA') return name === zone ? this.soaOf(zoneRow) : null;
    const row: RRsetRow | undefined = await this.db('sim_dns_rrsets').where({ zone, name, type }).first();
    return row ? { name: row.name, type: row.type, ttl: row.ttl, values: [...row.values].sort() } : null;
  }

  async replaceRRset(zone: string, rrset: DnsRRset & { type: RRsetType }): Promise<void> {
    if (rrset.values.length === 0) return this.deleteRRset(zone, rrset.name, rrset.type);
    await this.call();
    this.checkContent(rrset);
    await this.db.transaction(async (trx) => {
      await this.zoneRow(trx, zone, { lock: true });
      if (rrset.name !== zone && !rrset.name.endsWith(`.${zone}`)) {
        throw new BackendRefusedError(
          this.backend,
          `The DNS server refused the change: RRset ${rrset.name}. IN ${rrset.type}: Name is out of zone`,
          'out_of_zone',
        );
      }
      const others: Array<{ type: string }> = await trx('sim_dns_rrsets').where({ zone, name: rrset.name }).whereNot({ type: rrset.type }).select('type');
      const conflicts = rrset.type === 'CNAME' ? others.length > 0 : others.some((o) => o.type === 'CNAME');
      if (conflicts) {
        throw new BackendRefusedError(
          this.backend,
          `The DNS server refused the change: RRset ${rrset.name}. IN ${rrset.type}: Conflicts with pre-existing RRset`,
          'conflict',
        );
      }
      await trx('sim_dns_rrsets')
        .insert({ zone, name: rrset.name, type: rrset.type, ttl: rrset.ttl, values: [...rrset.values].sort() })
        .onConflict(['zone', 'name', 'type'])
        .merge(['ttl', 'values']);
      await trx('sim_dns_zones').where({ name: zone }).increment('serial', 1);
    });
  }

  async deleteRRset(zone: string, name: string, type: RRsetType): Promise<void> {
    await this.call();
    await this.db.transaction(async (trx) => {
      await this.zoneRow(trx, zone, { lock: true });
      const deleted = await trx('sim_dns_rrsets').where({ zone, name, type }).delete();
      if (deleted > 0) await trx('sim_dns_zones').where({ name: zone }).increment('serial', 1);
    });
  }

  async exportZone(zone: string): Promise<string> {
    return formatZoneFile(await this.listRRsets(zone));
  }

  async fingerprint(zone: string): Promise<string> {
    return fingerprintRRsets(await this.listRRsets(zone));
  }

  // ---- internals --------------------------------------------------------------------------------

  private call(): Promise<void> {
    return simulatedDelay(CALL_MS, this.scale);
  }

  private async zoneRow(db: Knex | Knex.Transaction, zone: string, { lock = false } = {}): Promise<ZoneRow> {
    const query = db('sim_dns_zones').where({ name: zone }).first();
    const row: ZoneRow | undefined = await (lock ? query.forUpdate() : query);
    if (!row) throw new BackendGoneError(this.backend, `zone ${zone}`);
    return row;
  }

  private async rrsets(db: Knex | Knex.Transaction, zone: ZoneRow): Promise<DnsRRset[]> {
    const rows: RRsetRow[] = await db('sim_dns_rrsets').where({ zone: zone.name });
    return [this.soaOf(zone), ...rows.map((r) => ({ name: r.name, type: r.type, ttl: r.ttl, values: [...r.values].sort() }))].sort(compareRRsets);
  }

  private soaOf(zone: ZoneRow): DnsRRset {
    return {
      name: zone.name,
      type: 'SOA',
      ttl: zone.soa_ttl,
      values: [`${zone.soa_mname} ${zone.soa_rname} ${zone.serial} ${zone.soa_refresh} ${zone.soa_retry} ${zone.soa_expire} ${zone.soa_minimum}`],
    };
  }

  /** Content must be in the one presentation form (PowerDNS refuses "Not in expected format" otherwise). */
  private checkContent(rrset: DnsRRset & { type: RRsetType }): void {
    const seen = new Set<string>();
    for (const value of rrset.values) {
      let canonical: string;
      try {
        canonical = canonicalValue(rrset.type, value, 'value');
      } catch (err) {
        const why = err instanceof DnsValueError ? err.message : 'not valid';
        throw new BackendRefusedError(
          this.backend,
          `The DNS server refused the change: Record ${rrset.name}./${rrset.type} '${value}': ${why}`,
          'invalid_content',
        );
      }
      if (canonical !== value) {
        throw new BackendRefusedError(
          this.backend,
          `The DNS server refused the change: Record ${rrset.name}./${rrset.type} '${value}': Not in expected format (parsed as '${canonical}')`,
          'invalid_content',
        );
      }
      if (seen.has(value)) {
        throw new BackendRefusedError(
          this.backend,
          `The DNS server refused the change: Duplicate record in RRset ${rrset.name}. IN ${rrset.type} with content "${value}"`,
          'invalid_content',
        );
      }
      seen.add(value);
    }
  }
}
