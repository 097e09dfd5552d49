import type { Knex } from 'knex';
import type { HostStatus } from '../../common/hosts';
import { formatId } from '../../common/ids';

/**
 * The host registry and the placements (docs/hosts.md): which host agents exist, whether they are
 * alive, and on which host the server of each placed service lives. Host status is computed by
 * PostgreSQL's clock, the one every process shares: `down` three heartbeat intervals after the last
 * heartbeat, else `draining` while an operator drained it, else `up`.
 */

/** What a host can take: resources placed on it at most, and the address ranges its servers listen in. */
export interface HostCapacity {
  resources: number;
  lb_bind_address?: string;
  dbaas_address_range?: string;
}

export interface HostRegistration {
  name: string;
  families: string[];
  capacity: HostCapacity;
  heartbeatIntervalMs: number;
}

export interface HostView {
  name: string;
  families: string[];
  status: HostStatus;
  draining: boolean;
  capacity: HostCapacity;
  heartbeat_at: Date;
  /** The placed services, by family (their resource object names come from the family: `load_balancer`, `dbaas`). */
  placements: Array<{ service_id: number; family: string }>;
}

/** A host's status, as SQL over `hosts` (so every process judges it by the same clock). */
const STATUS_SQL = `case when hosts.heartbeat_at < now() - (3 * hosts.heartbeat_interval_ms) * interval '1 millisecond' then 'down'
  when hosts.draining then 'draining' else 'up' end`;

/** Registers a host, or refreshes its families and capacity when it comes back; a drain stays as the operator left it. */
export async function registerHost(db: Knex, host: HostRegistration): Promise<void> {
  await db('hosts')
    .insert({
      name: host.name,
      families: host.families,
      capacity: JSON.stringify(host.capacity),
      heartbeat_interval_ms: host.heartbeatIntervalMs,
    })
    .onConflict('name')
    .merge({
      families: host.families,
      capacity: JSON.stringify(host.capacity),
      heartbeat_interval_ms: host.heartbeatIntervalMs,
      heartbeat_at: db.fn.now(),
    });
}

export async function heartbeat(db: Knex, name: string): Promise<void> {
  await db('hosts').where({ name }).update({ heartbeat_at: db.fn.now() });
}

/** Every host with its status and what is placed on it, by name. */
export async function listHosts(db: Knex): Promise<HostView[]> {
  const rows = await db('hosts')
    .select('*', db.raw(`${STATUS_SQL} as status`))
    .orderBy('name');
  const placed: Array<{ host: string; service_id: string; family: string }> = await db('placements')
    .orderBy('service_id')
    .select('host', 'service_id', 'family');
  return rows.map((row) => ({
    name: row.name,
    families: row.families,
    status: row.status,
    draining: row.draining,
    capacity: row.capacity,
    heartbeat_at: row.heartbeat_at,
    placements: placed.filter((p) => p.host === row.name).map((p) => ({ service_id: Number(p.service_id), family: p.family })),
  }));
}

export async function findHost(db: Knex, name: string): Promise<HostView | null> {
  return (await listHosts(db)).find((h) => h.name === name) ?? null;
}

export async function hostStatus(db: Knex, name: string): Promise<{ status: HostStatus; heartbeat_at: Date } | null> {
  const row = await db('hosts')
    .where({ name })
    .first('heartbeat_at', db.raw(`${STATUS_SQL} as status`));
  return row ? { status: row.status, heartbeat_at: row.heartbeat_at } : null;
}

/** Drains a host (no new placements there) or undrains it; null when there is no such host. */
export async function setDraining(db: Knex, name: string, draining: boolean): Promise<HostView | null> {
  const changed = await db('hosts').where({ name }).update({ draining });
  return changed ? findHost(db, name) : null;
}

export interface Placement {
  service_id: number;
  family: string;
  host: string;
  status: HostStatus;
  /** The host its server is moving to, while it moves. */
  moving_to: string | null;
}

export async function placementOf(db: Knex, serviceId: number): Promise<Placement | null> {
  const row = await db('placements')
    .join('hosts', 'hosts.name', 'placements.host')
    .where({ 'placements.service_id': serviceId })
    .first('placements.service_id', 'placements.family', 'placements.host', 'placements.moving_to', db.raw(`${STATUS_SQL} as status`));
  return row ? { service_id: Number(row.service_id), family: row.family, host: row.host, status: row.status, moving_to: row.moving_to } : null;
}

/** No host can take a service of the family now (none serves it, all are down, drained or full). */
export class NoHostError extends Error {
  constructor(readonly family: string) {
    super(`no host that serves ${family} is up, undrained and has room`);
    this.name = 'NoHostError';
  }
}

/**
 * Places a service (idempotent: a placed service keeps its host). The least loaded `up` host that
 * serves the family and has room, ties by name; `exclude` leaves hosts out (a move away from one).
 * Placements are serialised by an advisory lock, so two at once cannot both take a host's last room.
 */
export async function placeService(db: Knex, family: string, serviceId: number, opts: { exclude?: string[] } = {}): Promise<string> {
  return db.transaction(async (trx) => {
    await trx.raw(`select pg_advisory_xact_lock(hashtext('cloud:placement'))`);
    const existing = await trx('placements').where({ service_id: serviceId }).first('host');
    if (existing) return existing.host as string;
    const host = await leastLoadedHost(trx, family, opts.exclude ?? []);
    if (!host) throw new NoHostError(family);
    await trx('placements').insert({ service_id: serviceId, family, host });
    return host;
  });
}

/** The host placement would choose for a service of `family` now, leaving out `exclude` (a move's target). */
export async function leastLoadedHost(trx: Knex, family: string, exclude: string[]): Promise<string | null> {
  const row = await trx('hosts')
    .leftJoin('placements', 'placements.host', 'hosts.name')
    .whereRaw('? = any(hosts.families)', [family])
    .whereRaw(`${STATUS_SQL} = 'up'`)
    .whereNotIn('hosts.name', exclude)
    .groupBy('hosts.name')
    .havingRaw(`count(placements.service_id) < (hosts.capacity->>'resources')::int`)
    .orderByRaw('count(placements.service_id), hosts.name')
    .first('hosts.name');
  return row ? (row.name as string) : null;
}

/** Records that a service's server is on `host` (a host adopting the servers it finds, the seed); a placed service keeps its host. */
export async function adoptService(db: Knex, family: string, serviceId: number, host: string): Promise<void> {
  await db('placements').insert({ service_id: serviceId, family, host }).onConflict('service_id').ignore();
}

/**
 * Marks a service's server as moving to `to` (a move's first step): false when another move of it
 * runs. While marked, calls about it answer `503` (providers/host-routing.ts).
 */
export async function beginMove(db: Knex, serviceId: number, to: string): Promise<boolean> {
  return (await db('placements').where({ service_id: serviceId }).whereNull('moving_to').update({ moving_to: to })) === 1;
}

/** Ends a move that did not complete: the server stays where it is placed. */
export async function endMove(db: Knex, serviceId: number): Promise<void> {
  await db('placements').where({ service_id: serviceId }).update({ moving_to: null });
}

/** Moves a placement (the move workflow, once the server runs on `host`), ending the move. */
export async function movePlacement(db: Knex, serviceId: number, host: string): Promise<void> {
  await db('placements').where({ service_id: serviceId }).update({ host, moving_to: null, placed_at: db.fn.now() });
}

export async function releasePlacement(db: Knex, serviceId: number): Promise<void> {
  await db('placements').where({ service_id: serviceId }).delete();
}

/** A placement as `/_dev/hosts` names it: the family's resource object and the service id. */
export function resourceRef(objectOf: (family: string) => string, p: { service_id: number; family: string }): { object: string; id: string } {
  return { object: objectOf(p.family), id: formatId('svc', p.service_id) };
}
