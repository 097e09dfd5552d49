import type { Knex } from 'knex';
import { formatId, parseNumericId } from '../common/ids';
import { notFound, unsupportedForProduct } from '../api/errors';
import { dateOnly, iso } from '../common/time';
import { ServiceModel } from '../db/models';
import { canSeeService, type Principal } from './principal';
import { emitEvent } from './events';

export type ServiceRow = Pick<
  ServiceModel,
  'id' | 'account_id' | 'family' | 'product' | 'status' | 'name' | 'label' | 'primary_ip' | 'billing_cycle' | 'next_due_date' | 'capabilities' | 'created_at'
>;

/** Families of the Service resource; products without a dedicated v1 resource are `other`. */
export const SERVICE_FAMILIES = ['vps', 'dns', 'dbaas', 'caas', 'lb', 'objectstorage', 'mailgateway', 'other'] as const;

export function presentService(row: ServiceRow) {
  return {
    object: 'service' as const,
    id: formatId('svc', row.id),
    family: (SERVICE_FAMILIES as readonly string[]).includes(row.family) ? row.family : 'other',
    status: row.status,
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

/** Convention 9: an operation whose capability is false is a permanent 400. */
export function requireCapability(service: Pick<ServiceRow, 'capabilities'>, capability: string): void {
  if (service.capabilities?.[capability] !== true) throw unsupportedForProduct(capability);
}

const STATUS_EVENTS = { active: 'service.active', suspended: 'service.suspended', terminated: 'service.terminated' } as const;

/**
 * Billing moves a service (first activation, suspension, unsuspension, termination). The status
 * change and its event are written in one transaction (outbox).
 */
export async function moveServiceStatus(
  db: Knex,
  serviceId: number,
  to: keyof typeof STATUS_EVENTS,
  trx?: Knex.Transaction,
): Promise<ServiceRow> {
  const apply = async (t: Knex.Transaction) => {
    const [row] = await t('services').where({ id: serviceId }).update({ status: to, updated_at: t.fn.now() }).returning('*');
    if (!row) throw notFound('service');
    const summary = presentService(row);
    await emitEvent(t, {
      accountId: row.account_id,
      type: STATUS_EVENTS[to],
      data: { object: 'service', id: summary.id, family: summary.family, status: summary.status, name: summary.name, label: summary.label },
    });
    return row as ServiceRow;
  };
  return trx ? apply(trx) : db.transaction(apply);
}
