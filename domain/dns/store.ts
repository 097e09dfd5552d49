import type { Knex } from 'knex';
import { DomainError, notFound, validationFailed } from '../errors';
import { whereVisibleService, type Principal } from '../principal';
import { ServiceModel } from '../../db/models';
import type { ServiceRow } from '../services';
import { normalizeZoneName, parseZoneName } from './names';
import { overlapOf, policyRefusal, selfAndAncestors, takenRefusal, treeLockKey, type ZoneOverlap, type ZoneRefusal } from './zone-policy';

/**
 * The DNS family's control-plane records, and the only SQL on its tables: which zone each dns
 * service owns (`dns_zones`). A zone name is held by one service at a time, and no account's zone
 * equals, contains or lies inside another account's (zone-policy.ts); the records themselves live
 * on the DNS server only.
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

function visibleZones(db: Knex, principal: Principal, opts: { ended?: boolean } = {}): Knex.QueryBuilder {
  const qb = db('dns_zones')
    .join('services', 'services.id', 'dns_zones.service_id')
    .where({ 'services.account_id': principal.accountId, 'services.family': 'dns' });
  if (!opts.ended) qb.whereNotIn('services.status', ENDED);
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
 * otherwise, also for text that cannot be a zone name (convention 8). Reads do not find the zone of
 * a terminated or cancelled service; writes ask for it with `ended` (until the teardown frees the
 * name), so that they can refuse it with `409` naming the status like every other family's action.
 */
export async function findVisibleZone(db: Knex, principal: Principal, rawZone: string, opts: { ended?: boolean } = {}): Promise<DnsZoneTarget> {
  const name = parseZoneName(rawZone);
  const hit = name ? await visibleZones(db, principal, opts).where('dns_zones.name', name).first('dns_zones.service_id') : undefined;
  if (!hit) throw notFound('DNS zone');
  const serviceId = Number(hit.service_id);
  const [zone, service] = await Promise.all([findZoneOfService(db, serviceId), ServiceModel.query(db).findById(serviceId)]);
  if (!zone || !service) throw notFound('DNS zone');
  return { zone, service };
}

export async function findZoneOfService(db: Knex | Knex.Transaction, serviceId: number): Promise<DnsZoneRow | null> {
  const row = await db('dns_zones').where({ service_id: serviceId }).first();
  return row ? { ...row, service_id: Number(row.service_id) } : null;
}

/**
 * How the nearest zone held by someone else stands to `zone`: the same name held by any service or
 * live order (also the asker's own), or an overlapping one (a parent or a sub-zone) of another
 * account; null when nothing stands in the way.
 *
 * Held are the zones of `dns_zones` (every service's until its teardown frees the name, whatever its
 * status) other than `serviceId`'s, and, with `orders`, the zones of orders that are not cancelled
 * and did not end with their service: pending (unpaid) and active orders, provisioned or not.
 */
async function heldOverlap(
  db: Knex | Knex.Transaction,
  zone: string,
  asker: { accountId: number; serviceId?: number },
  opts: { orders: boolean },
): Promise<ZoneOverlap | null> {
  const above = selfAndAncestors(zone);
  const below = `.${zone}`;
  const zones = db('dns_zones as d')
    .join('services as s', 's.id', 'd.service_id')
    .where((q) => q.whereIn('d.name', above).orWhereRaw('right(d.name, ?) = ?', [below.length, below]))
    .select('d.name as name', 's.account_id as account_id');
  if (asker.serviceId !== undefined) zones.whereNot('d.service_id', asker.serviceId);
  const held: Array<{ name: string; account_id: string | number }> = await zones;
  if (opts.orders) {
    const orders = await db('orders as o')
      .join('products as p', 'p.id', 'o.product_id')
      .where('p.product_family', 'dns')
      .whereNot('o.status', 'cancelled')
      .where((q) =>
        q.whereRaw(`o.options->>'zone' in (${above.map(() => '?').join(', ')})`, above).orWhereRaw(`right(o.options->>'zone', ?) = ?`, [below.length, below]),
      )
      .whereNotExists(db('services as ended').whereRaw('ended.order_id = o.id').whereIn('ended.status', ENDED))
      .select(db.raw(`o.options->>'zone' as name`), 'o.account_id as account_id');
    held.push(...orders);
  }
  const overlaps = held.map((row) => ({ overlap: overlapOf(zone, row.name), mine: Number(row.account_id) === asker.accountId }));
  if (overlaps.some((o) => o.overlap === 'same')) return 'same';
  return overlaps.find((o) => o.overlap && !o.mine)?.overlap ?? null;
}

/**
 * Serialises the claims on one DNS tree (zones under one TLD) until the transaction ends, so that a
 * check and the row that claims (an order, a `dns_zones` row) are one step across every process: of
 * two concurrent claims of `example.org` and `shop.example.org` the second waits, then sees the first.
 */
async function lockZoneTree(trx: Knex.Transaction, zone: string): Promise<void> {
  await trx.raw('select pg_advisory_xact_lock(hashtextextended(?, 0))', [treeLockKey(zone)]);
}

/**
 * Records that the service owns the zone (idempotent for the same service), or says why it may not:
 * a public suffix, a reserved name, or a zone that overlaps one held by another service (of another
 * account, or the same name). The check and the insert run under the tree's lock, and the unique
 * index backs the same name, so two services racing for overlapping zones cannot both win.
 */
export async function claimZone(
  db: Knex,
  claim: { serviceId: number; accountId: number; name: string; nameservers: string[]; reserved: readonly string[] },
): Promise<ZoneRefusal | null> {
  const { serviceId, name } = claim;
  return db.transaction(async (trx) => {
    const existing = await findZoneOfService(trx, serviceId);
    if (existing) return existing.name === name ? null : takenRefusal(name, 'same');
    const refused = policyRefusal(name, claim.reserved);
    if (refused) return refused;
    await lockZoneTree(trx, name);
    const overlap = await heldOverlap(trx, name, { accountId: claim.accountId, serviceId }, { orders: false });
    if (overlap) return takenRefusal(name, overlap);
    const inserted = await trx('dns_zones')
      .insert({ service_id: serviceId, name, nameservers: claim.nameservers })
      .onConflict('name')
      .ignore()
      .returning('service_id');
    return inserted.length > 0 ? null : takenRefusal(name, 'same');
  });
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

/** A refusal as the order's answer: `400` at `options.zone`. */
function orderRefusal(refusal: ZoneRefusal): DomainError {
  if (refusal.reason === 'public_suffix') return validationFailed([{ param: 'options.zone', message: refusal.message }]);
  return new DomainError(400, 'invalid_request_error', 'hostname_taken', refusal.message, 'options.zone');
}

/**
 * An order's `zone` option, normalised (case, trailing dot, IDN to punycode), checked before billing:
 * a public suffix is `400 validation_failed`; a reserved name, a zone some service or live order
 * holds, and one that contains or lies inside another account's are `400 hostname_taken` (param
 * `options.zone`). `holdZoneForOrder` checks again under the tree's lock where the order is written.
 */
export async function prepareZoneOrder(
  db: Knex,
  accountId: number,
  options: Record<string, unknown>,
  reserved: readonly string[],
): Promise<Record<string, unknown>> {
  const zone = normalizeZoneName(String(options.zone ?? ''), 'options.zone');
  const refused = policyRefusal(zone, reserved);
  if (refused) throw orderRefusal(refused);
  const overlap = await heldOverlap(db, zone, { accountId }, { orders: true });
  if (overlap) throw orderRefusal(takenRefusal(zone, overlap));
  return { ...options, zone };
}

/**
 * The order-time check again, in the transaction that writes the order and holding the tree's lock
 * until it commits: of two orders racing for overlapping zones (`example.org` and
 * `shop.example.org`, two accounts) the second sees the first's order and is refused.
 */
export async function holdZoneForOrder(trx: Knex.Transaction, accountId: number, zone: string): Promise<void> {
  await lockZoneTree(trx, zone);
  const overlap = await heldOverlap(trx, zone, { accountId }, { orders: true });
  if (overlap) throw orderRefusal(takenRefusal(zone, overlap));
}
