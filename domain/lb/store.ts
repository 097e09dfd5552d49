import type { Knex } from 'knex';
import type { LbListener } from '../../providers/lb.provider';
import { whereVisibleService, type Principal } from '../principal';
import { findVisibleService, type ServiceRow } from '../services';

/**
 * The load-balancer family's control-plane records, and the only SQL on `lb_balancers`: the
 * balancer of an lb service, the address its listeners bind, and its listener set. The set is
 * written only after the backend applied it, inside the transaction that holds the row, so the
 * stored set is always the running one and two changes to one balancer never interleave.
 */
export interface LbBalancerRow {
  service_id: number;
  address: string;
  listeners: LbListener[];
  created_at: Date;
  updated_at: Date;
}

export interface LbTarget {
  service: ServiceRow;
  /** Null while the service has no balancer yet (still provisioning) or no more (torn down). */
  balancer: LbBalancerRow | null;
}

const normalize = (row: LbBalancerRow | undefined): LbBalancerRow | null => (row ? { ...row, service_id: Number(row.service_id) } : null);

/** A load balancer the principal may see (404 otherwise, also for services of another family). */
export async function findVisibleLb(db: Knex, principal: Principal, rawId: string): Promise<LbTarget> {
  const service = await findVisibleService(db, principal, rawId, 'lb');
  return { service, balancer: await findBalancer(db, service.id) };
}

export async function findBalancer(db: Knex | Knex.Transaction, serviceId: number): Promise<LbBalancerRow | null> {
  return normalize(await db('lb_balancers').where({ service_id: serviceId }).first());
}

/** The balancer row, locked until the transaction ends: a change holds it while the backend applies. */
export async function lockBalancer(trx: Knex.Transaction, serviceId: number): Promise<LbBalancerRow | null> {
  return normalize(await trx('lb_balancers').where({ service_id: serviceId }).forUpdate().first());
}

/** The balancer row, locked until the transaction ends, or null when a change holds it now (or there is none). */
export async function lockBalancerIfFree(trx: Knex.Transaction, serviceId: number): Promise<LbBalancerRow | null> {
  return normalize(await trx('lb_balancers').where({ service_id: serviceId }).forUpdate().skipLocked().first());
}

/**
 * The page query of the load-balancer list: the services the principal sees, of every family, with
 * their balancer. The family filter is applied to the page after it is read (SPEC: "same short-page
 * rule as caas"), so a page can hold fewer load balancers than `limit` while `has_more` is true.
 */
export function visibleServicesWithBalancerQuery(db: Knex, principal: Principal): Knex.QueryBuilder {
  const qb = db('services')
    .leftJoin('lb_balancers', 'lb_balancers.service_id', 'services.id')
    .where({ 'services.account_id': principal.accountId })
    .select('services.*', 'lb_balancers.address as lb_address', 'lb_balancers.service_id as lb_service_id');
  whereVisibleService(qb, principal, 'services.id');
  return qb;
}

/** Records a balancer the backend created (idempotent: a service keeps its first record). */
export async function recordBalancer(db: Knex, serviceId: number, address: string, listeners: LbListener[]): Promise<LbBalancerRow> {
  await db('lb_balancers')
    .insert({ service_id: serviceId, address, listeners: JSON.stringify(listeners) })
    .onConflict('service_id')
    .ignore();
  return (await findBalancer(db, serviceId))!;
}

/**
 * Where the balancer accepts traffic now (the provider's word): a balancer started again from
 * another address range (another checkout's local run, another host) keeps its record true.
 */
export async function storeAddress(db: Knex, serviceId: number, address: string): Promise<void> {
  await db('lb_balancers').where({ service_id: serviceId }).whereNot({ address }).update({ address, updated_at: db.fn.now() });
}

export async function storeListeners(trx: Knex.Transaction, serviceId: number, listeners: LbListener[]): Promise<void> {
  await trx('lb_balancers')
    .where({ service_id: serviceId })
    .update({ listeners: JSON.stringify(listeners), updated_at: trx.fn.now() });
}

export async function forgetBalancer(db: Knex, serviceId: number): Promise<void> {
  await db('lb_balancers').where({ service_id: serviceId }).delete();
}

/**
 * Every recorded balancer of services that should be serving (seed, restarts); with `host`, only
 * those placed on that host (a host's keeper keeps its own: docs/hosts.md).
 */
export async function balancersToRun(db: Knex, host?: string): Promise<LbBalancerRow[]> {
  const query = db('lb_balancers')
    .join('services', 'services.id', 'lb_balancers.service_id')
    .whereIn('services.status', ['active', 'suspended'])
    .orderBy('lb_balancers.service_id')
    .select('lb_balancers.*');
  if (host !== undefined) query.join('placements', 'placements.service_id', 'lb_balancers.service_id').where('placements.host', host);
  const rows: LbBalancerRow[] = await query;
  return rows.map((r) => normalize(r)!);
}
