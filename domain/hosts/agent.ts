import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import { adoptService, heartbeat, registerHost, type HostRegistration } from './registry';

/** The servers a host has of one placed family (their services), read from its data directory. */
export interface LocalServers {
  family: string;
  services(): Promise<number[]>;
}

/**
 * The host agent's presence in the registry (docs/hosts.md), beside the worker: it registers the
 * host (families, capacity) before the worker polls, adopts the servers it finds in its data
 * directory that no placement names yet (servers built before hosts existed), and heartbeats every
 * interval. A host that stops heartbeating is `down` after three intervals: its resources' live
 * fields are null and the operations on them wait for it.
 */
export class HostAgent extends PeriodicService {
  readonly name = 'host-agent';
  private registered = false;

  constructor(private readonly deps: { db: Knex; logger: Logger; registration: HostRegistration; local: LocalServers[] }) {
    super({ intervalMs: deps.registration.heartbeatIntervalMs });
  }

  /** Registers at once (placements may choose this host as soon as the worker polls), then beats. */
  override async start(): Promise<void> {
    await this.pass();
    await super.start();
  }

  protected async pass(): Promise<void> {
    const { db, logger, registration } = this.deps;
    try {
      if (this.registered) {
        await heartbeat(db, registration.name);
        return;
      }
      await registerHost(db, registration);
      const adopted = await this.adopt();
      this.registered = true;
      logger.info({ host: registration.name, families: registration.families, adopted }, 'host registered');
    } catch (err) {
      logger.warn({ host: registration.name, err: (err as Error).message }, 'host heartbeat failed; next beat retries');
    }
  }

  /** Places on this host the services whose servers are here and that no placement names. */
  private async adopt(): Promise<string[]> {
    const adopted: string[] = [];
    for (const { family, services } of this.deps.local) {
      if (!this.deps.registration.families.includes(family)) continue;
      const ids = await services();
      if (ids.length === 0) continue;
      const known: Array<{ id: string }> = await this.deps.db('services').whereIn('id', ids).select('id');
      const placements: Array<{ service_id: string; host: string }> = await this.deps.db('placements').whereIn('service_id', ids).select('service_id', 'host');
      const placed = new Set(placements.map((r) => Number(r.service_id)));
      const elsewhere = placements.filter((p) => p.host !== this.deps.registration.name).map((p) => `svc_${p.service_id} on ${p.host}`);
      if (elsewhere.length > 0) {
        // Servers here that the registry places on another host: a copy a move left behind while
        // this host was down (its destroy is on its way), or this machine under another name.
        this.deps.logger.warn(
          { host: this.deps.registration.name, servers: elsewhere },
          'servers in this host’s data directory are placed on other hosts; if this machine ran them under another name, start it with that HOST_NAME',
        );
      }
      for (const { id } of known) {
        if (placed.has(Number(id))) continue;
        await adoptService(this.deps.db, family, Number(id), this.deps.registration.name);
        adopted.push(`svc_${id}`);
      }
    }
    return adopted;
  }
}

/** What a host agent registers: its name, the placed families it serves (HOST_FAMILIES, or all), its capacity and beat. */
export function hostRegistrationOf(config: Config, placedFamilies: string[]): HostRegistration {
  return {
    name: config.HOST_NAME,
    families: (config.HOST_FAMILIES ?? placedFamilies).filter((f) => placedFamilies.includes(f)),
    capacity: { resources: config.HOST_CAPACITY, lb_bind_address: config.LB_BIND_ADDRESS, dbaas_address_range: config.DBAAS_ADDRESS_RANGE },
    heartbeatIntervalMs: config.HOST_HEARTBEAT_INTERVAL,
  };
}
