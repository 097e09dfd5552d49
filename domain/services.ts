import type { Knex } from 'knex';
import { formatId, parseNumericId } from '../common/ids';
import { conflict, notFound, unsupportedForProduct } from '../api/errors';
import { dateOnly, iso } from '../common/time';
import { SERVICE_FAMILIES, type ServiceFamily } from '../common/families';
import { ServiceModel } from '../db/models';
import { canSeeService, type Principal } from './principal';
import { emitEvent } from './events';

export type ServiceRow = Pick<
  ServiceModel,
  'id' | 'account_id' | 'family' | 'product' | 'status' | 'name' | 'label' | 'primary_ip' | 'billing_cycle' | 'next_due_date' | 'capabilities' | 'created_at'
>;

/** Families of the Service resource (common/families.ts); products without a dedicated v1 resource are `other`. */
export { SERVICE_FAMILIES } from '../common/families';

/** The billing contract status (SPEC "Service"). */
export type ServiceStatus = 'active' | 'pending' | 'suspended' | 'terminated' | 'cancelled' | 'fraud' | 'unknown';

export function presentService(row: ServiceRow) {
  return {
    object: 'service' as const,
    id: formatId('svc', row.id),
    family: ((SERVICE_FAMILIES as readonly string[]).includes(row.family) ? row.family : 'other') as ServiceFamily,
    status: row.status as ServiceStatus,
    name: row.name,
    label: row.label,
    primary_ip: row.primary_ip,
    billing_cycle: row.billing_cycle,
    next_due_date: dateOnly(row.next_due_date),
    created_at: iso(row.created_at),
    capabilities: row.capabilities ?? {},
  };
}

/**
 * Loads a service the principal may see, optionally of one family; anything else is 404
 * (convention 8: invisible and missing look the same).
 */
export async function findVisibleService(db: Knex, principal: Principal, rawId: string, family?: string): Promise<ServiceRow> {
  const id = parseNumericId('svc', rawId);
  if (id === null || !canSeeService(principal, id)) throw notFound('service');
  const row = await ServiceModel.query(db).findOne({ id, account_id: principal.accountId });
  if (!row || (family && row.family !== family)) throw notFound(family ?? 'service');
  return row;
}

/** A service of one family in any account, for the loopback-only dev stand-ins (404 otherwise). */
export async function findServiceOfFamily(db: Knex, rawId: string, family: string): Promise<ServiceRow> {
  const id = parseNumericId('svc', rawId);
  const row = id === null ? undefined : await ServiceModel.query(db).findOne({ id, family });
  if (!row) throw notFound(family);
  return row;
}

/** Convention 9: an operation whose capability is false is a permanent 400. */
export function requireCapability(service: Pick<ServiceRow, 'capabilities'>, capability: string): void {
  if (service.capabilities?.[capability] !== true) throw unsupportedForProduct(capability);
}

/**
 * Billing statuses in which a service's actions are refused with `409 conflict` (docs/security.md
 * "Suspended and terminated services"): every mutation on the service (power, reinstall, restore,
 * backups, console, rename, and whatever a family adds). Reads stay available.
 */
const REFUSED_IN: Partial<Record<ServiceStatus, string>> = {
  suspended: 'is suspended by billing; it is refused until the service is active again',
  terminated: 'is terminated; it can no longer be changed',
  cancelled: 'is cancelled; it can no longer be changed',
  fraud: 'is held for a billing review; it is refused until the review clears it',
};

/** An action on a service in a status that refuses actions is a `409 conflict` that says why. */
export function requireActionable(service: Pick<ServiceRow, 'status'>, action: string): void {
  const why = REFUSED_IN[service.status as ServiceStatus];
  if (why) throw conflict(`${action[0].toUpperCase()}${action.slice(1)} is refused: this service ${why}.`);
}

/**
 * Inside an operation's transaction: the service's status again, under a share lock, so that an
 * action cannot start on a service billing suspended or terminated after the request checked it.
 */
export async function lockActionable(trx: Knex.Transaction, serviceId: number, action: string): Promise<void> {
  const row = await trx('services').where({ id: serviceId }).forShare().first('status');
  if (row) requireActionable(row, action);
}

const STATUS_EVENTS = { active: 'service.active', suspended: 'service.suspended', terminated: 'service.terminated' } as const;

/**
 * Billing moves a service (first activation, suspension, unsuspension, termination). The status
 * change and its event are written in one transaction (outbox).
 */
export async function moveServiceStatus(db: Knex, serviceId: number, to: keyof typeof STATUS_EVENTS, trx?: Knex.Transaction): Promise<ServiceRow> {
  const apply = async (t: Knex.Transaction) => {
    const [row] = await t('services').where({ id: serviceId }).update({ status: to, updated_at: t.fn.now() }).returning('*');
    if (!row) throw notFound('service');
    const summary = presentService(row);
    await emitEvent(t, {
      accountId: row.account_id,
      type: STATUS_EVENTS[to],
      serviceId,
      data: { object: 'service', id: summary.id, family: summary.family, status: summary.status, name: summary.name, label: summary.label },
    });
    return row as ServiceRow;
  };
  return trx ? apply(trx) : db.transaction(apply);
}

/** Terminated services whose backend resources have not been torn down yet (oldest first). */
export async function servicesAwaitingTeardown(db: Knex, limit = 100): Promise<Array<{ id: number; accountId: number }>> {
  const rows = await db('services').where({ status: 'terminated' }).whereNull('deprovisioned_at').orderBy('id').limit(limit).select('id', 'account_id');
  return rows.map((r) => ({ id: Number(r.id), accountId: Number(r.account_id) }));
}

export async function markDeprovisioned(db: Knex, serviceId: number): Promise<void> {
  await db('services').where({ id: serviceId }).whereNull('deprovisioned_at').update({ deprovisioned_at: db.fn.now() });
}
