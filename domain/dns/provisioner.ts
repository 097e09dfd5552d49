import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { DEFAULT_SOA_TIMERS, type DnsProvider, type ZoneDefaults } from '../../providers/dns.provider';
import { BackendGoneError, BackendRefusedError } from '../../providers/errors';
import type { PreparedOrder, ProvisionTarget, ServiceProvisioner } from '../provisioning';
import { normalizeZoneName } from './names';
import { claimZone, findZoneOfService, holdZoneForOrder, prepareZoneOrder, recordZoneFacts, releaseZone } from './store';
import { reservedZones, type ZoneRefusal } from './zone-policy';

/** The operation error's `backend_code` when the provisioner refuses a zone. */
const REFUSAL_CODES: Record<ZoneRefusal['reason'], string> = { public_suffix: 'invalid_zone', reserved: 'zone_reserved', taken: 'zone_taken' };

/** What the provisioner needs of the configuration: every zone's SOA and NS, and the names no customer may hold. */
export interface ZoneSettings extends ZoneDefaults {
  reserved: string[];
}

/**
 * SOA and NS of every new zone: the operator's configuration (DNS_NAMESERVERS, DNS_HOSTMASTER), and
 * the platform's reserved names (DNS_RESERVED_ZONES and those servers' domains).
 */
export function zoneDefaults(config: Pick<Config, 'DNS_NAMESERVERS' | 'DNS_HOSTMASTER'> & Partial<Pick<Config, 'DNS_RESERVED_ZONES'>>): ZoneSettings {
  return { nameservers: config.DNS_NAMESERVERS, hostmaster: config.DNS_HOSTMASTER, ...DEFAULT_SOA_TIMERS, reserved: reservedZones(config) };
}

/** The zone a dns service is for: the order's `zone` option, else (seeded services) its label. */
export function zoneOfTarget(service: Pick<ProvisionTarget, 'options' | 'label'>): string {
  const raw = typeof service.options.zone === 'string' ? service.options.zone : service.label;
  try {
    return normalizeZoneName(raw ?? '');
  } catch {
    throw new BackendRefusedError('dns', `"${raw ?? ''}" is not a zone name this service can host.`, 'invalid_zone');
  }
}

/**
 * Builds an ordered `dns-zone` service: claims the zone name for the service (one service per name,
 * no public suffix or reserved name, no overlap with another account's zone: the order's check made
 * again where it counts), creates the zone on the DNS server with the configured SOA and NS, and
 * names the service after it. Active once the server has the zone. Terminating the service deletes
 * the zone from the server.
 */
export class DnsZoneProvisioner implements ServiceProvisioner {
  private readonly defaults: ZoneDefaults;
  private readonly reserved: string[];

  constructor(
    private readonly db: Knex,
    private readonly dns: DnsProvider,
    settings: ZoneSettings,
  ) {
    const { reserved, ...defaults } = settings;
    this.defaults = defaults;
    this.reserved = reserved;
  }

  async provision(service: ProvisionTarget): Promise<void> {
    const zone = zoneOfTarget(service);
    const nameservers = this.defaults.nameservers.map((n) => n.replace(/\.$/, '').toLowerCase());
    const refused = await claimZone(this.db, { serviceId: service.id, accountId: service.accountId, name: zone, nameservers, reserved: this.reserved });
    if (refused) throw new BackendRefusedError('dns', refused.message, REFUSAL_CODES[refused.reason]);
    const info = await this.dns.createZone(zone, this.defaults);
    await recordZoneFacts(this.db, service.id, { kind: info.kind, nameservers: info.nameservers });
    await this.db('services').where({ id: service.id }).whereNull('label').update({ label: zone });
  }

  async isActive(service: ProvisionTarget): Promise<boolean> {
    const zone = await findZoneOfService(this.db, service.id);
    if (!zone) return false;
    try {
      await this.dns.zoneInfo(zone.name);
      return true;
    } catch (err) {
      if (err instanceof BackendGoneError) return false;
      throw err;
    }
  }

  /**
   * An order's zone is one service's at a time and never overlaps another account's: normalised
   * here (case, trailing dot, IDN) and refused while held, then checked again under the zone tree's
   * lock in the transaction that writes the order.
   */
  async prepareOrder(db: Knex, options: Record<string, unknown>, account: { id: number }): Promise<PreparedOrder> {
    const prepared = await prepareZoneOrder(db, account.id, options, this.reserved);
    const zone = String(prepared.zone);
    return { options: prepared, hold: (trx) => holdZoneForOrder(trx, account.id, zone) };
  }

  /** Deletes the zone from the server, then frees its name. */
  async deprovision(service: ProvisionTarget): Promise<void> {
    const zone = await findZoneOfService(this.db, service.id);
    if (!zone) return;
    await this.dns.deleteZone(zone.name);
    await releaseZone(this.db, service.id);
  }
}
