import type { Knex } from 'knex';
import { ApiError, notFound } from '../../api/errors';
import { whereVisibleService, type Principal } from '../principal';
import { ServiceModel } from '../../db/models';
import type { ServiceRow } from '../services';
import { normalizeZoneName, parseZoneName } from './names';

/**
 * The DNS family's control-plane records, and the only SQL on its tables: which zone each dns
 * service owns (`dns_zones`). A zone name is held by one service at a time; the records themselves
 * live on the DNS server only.
 */
export interface DnsZoneRow {
  service_id: number;
  name: string;
  kind: string;
  nameservers: string[];
  created_at: Date;
}

export interface DnsZoneTarget {
  zone: DnsZoneRow;
  service: ServiceRow;
}

/** Services whose zone is gone or going: their zone is not shown and not served any more. */
const ENDED = ['terminated', 'cancelled'];

function visibleZones(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('dns_zones')
    .join('services', 'services.id', 'dns_zones.service_id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'dns' })
    .whereNotIn('services.status', ENDED);
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

const ZONE_COLUMNS = ['dns_zones.service_id', 'dns_zones.name', 'dns_zones.kind', 'dns_zones.nameservers', 'dns_zones.created_at', 'services.id'];

/** Zones the principal sees, for keysetPage on `services.id` (newest service first). */
export function visibleZonesQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  return visibleZones(db, principal).select(ZONE_COLUMNS);
}

/**
 * The zone `{zone}` names (any case, trailing dot, IDN) if the principal sees its service; 404
 * otherwise, also for text that cannot be a zone name (convention 8).
 */
export async function findVisibleZone(db: Knex, principal: Principal, rawZone: string): Promise<DnsZoneTarget> {
  const name = parseZoneName(rawZone);
  const hit = name ? await visibleZones(db, principal).where('dns_zones.name', name).first('dns_zones.service_id') : undefined;
  if (!hit) throw notFound('DNS zone');
  const serviceId = Number(hit.service_id);
  const [zone, service] = await Promise.all([findZoneOfService(db, serviceId), ServiceModel.query(db).findById(serviceId)]);
  if (!zone || !service) throw notFound('DNS zone');
  return { zone, service };
}

export async function findZoneOfService(db: Knex, serviceId: number): Promise<DnsZoneRow | null> {
  const row = await db('dns_zones').where({ service_id: serviceId }).first();
  return row ? { ...row, service_id: Number(row.service_id) } : null;
}

/** Whether a live service holds the zone (another one than `exceptServiceId`). */
export async function isZoneHeld(db: Knex, name: string, exceptServiceId?: number): Promise<boolean> {
  const qb = db('dns_zones').join('services', 'services.id', 'dns_zones.service_id').where('dns_zones.name', name);
  if (exceptServiceId !== undefined) qb.whereNot('dns_zones.service_id', exceptServiceId);
  return (await qb.first('dns_zones.service_id')) !== undefined;
}

/**
 * Records that the service owns the zone (idempotent for the same service). False when another
 * service holds the name: the unique index decides, so two orders racing for one zone cannot both win.
 */
export async function claimZone(db: Knex, serviceId: number, name: string, nameservers: string[]): Promise<boolean> {
  const existing = await findZoneOfService(db, serviceId);
  if (existing) return existing.name === name;
  const inserted = await db('dns_zones').insert({ service_id: serviceId, name, nameservers }).onConflict('name').ignore().returning('service_id');
  return inserted.length > 0;
}

/** Forgets the service's zone (after it was deleted from the server); the name is free again. */
export async function releaseZone(db: Knex, serviceId: number): Promise<void> {
  await db('dns_zones').where({ service_id: serviceId }).delete();
}

/** Keeps the list's kind and name servers as the server last reported them. */
export async function recordZoneFacts(db: Knex, serviceId: number, facts: { kind: string; nameservers: string[] }): Promise<void> {
  await db('dns_zones').where({ service_id: serviceId }).update({ kind: facts.kind, nameservers: facts.nameservers });
}

/**
 * Runs `fn` holding the zone's write lock: a PostgreSQL advisory lock (per zone name, for the
 * transaction), so that compare-and-write on the zone's ETag is one step across every API process.
 *
 * The lock's transaction holds a pooled connection for the whole write, and the write itself needs
 * more (the outage switch reads PostgreSQL). So that waiting writers cannot take every connection and
 * starve the one holding the lock, a process queues writes to one zone in memory before they ask
 * PostgreSQL, and lets at most (pool size - 2) zone writes hold a connection at once.
 */
export async function withZoneLock<T>(db: Knex, zone: string, fn: () => Promise<T>): Promise<T> {
  return inProcessQueue(zone, () =>
    writeSlots(db).run(() =>
      db.transaction(async (trx) => {
        await trx.raw('select pg_advisory_xact_lock(hashtextextended(?, 0))', [`dns-zone:${zone}`]);
        return fn();
      }),
    ),
  );
}

const zoneQueues = new Map<string, Promise<unknown>>();

async function inProcessQueue<T>(zone: string, fn: () => Promise<T>): Promise<T> {
  const previous = zoneQueues.get(zone) ?? Promise.resolve();
  const mine = previous.then(fn, fn);
  const tail = mine.catch(() => undefined);
  zoneQueues.set(zone, tail);
  try {
    return await mine;
  } finally {
    if (zoneQueues.get(zone) === tail) zoneQueues.delete(zone);
  }
}

class Slots {
  private free: number;
  private readonly waiting: Array<() => void> = [];

  constructor(size: number) {
    this.free = size;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

const slotsByDb = new WeakMap<Knex, Slots>();

function writeSlots(db: Knex): Slots {
  let slots = slotsByDb.get(db);
  if (!slots) {
    const poolMax = Number((db.client as { config?: { pool?: { max?: number } } }).config?.pool?.max ?? 10);
    slots = new Slots(Math.max(1, poolMax - 2));
    slotsByDb.set(db, slots);
  }
  return slots;
}

/**
 * An order's `zone` option, normalised (case, trailing dot, IDN to punycode), and refused while a
 * live service holds that zone (`400 hostname_taken`, param `options.zone`).
 */
export async function prepareZoneOrder(db: Knex, options: Record<string, unknown>): Promise<Record<string, unknown>> {
  const zone = normalizeZoneName(String(options.zone ?? ''), 'options.zone');
  if (await isZoneHeld(db, zone)) {
    throw new ApiError(400, 'invalid_request_error', 'hostname_taken', `The zone ${zone} is already hosted here.`, 'options.zone');
  }
  return { ...options, zone };
}
