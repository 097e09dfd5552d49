import type { Knex } from 'knex';
import { formatId, parseNumericId } from '../common/ids';
import { conflict, notFound, unsupportedForProduct } from '../api/errors';
import { dateOnly, iso } from '../common/time';
import { SERVICE_FAMILIES, type ServiceFamily } from '../common/families';
import { ServiceModel } from '../db/models';
import { isoSql, preparedQuery } from '../db/knex';
import { ReadBatcher } from '../db/read-batcher';
import { canSeeService, visibleServiceIds, type Principal } from './principal';
import { emitEvent } from './events';

export type ServiceRow = Pick<
  ServiceModel,
  'id' | 'account_id' | 'family' | 'product' | 'status' | 'name' | 'label' | 'primary_ip' | 'billing_cycle' | 'next_due_date' | 'capabilities' | 'created_at'
>;

/** Families of the Service resource (common/families.ts); products without a dedicated v1 resource are `other`. */
export { SERVICE_FAMILIES } from '../common/families';

/** The billing contract status (SPEC "Service"). */
export type ServiceStatus = 'active' | 'pending' | 'suspended' | 'terminated' | 'cancelled' | 'fraud' | 'unknown';

export function presentService(
  row: Omit<ServiceRow, 'account_id' | 'product' | 'next_due_date' | 'created_at'> & { next_due_date: Date | string | null; created_at: Date | string },
) {
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

type ServiceListRow = Pick<ServiceRow, 'id' | 'family' | 'status' | 'name' | 'label' | 'primary_ip' | 'billing_cycle' | 'capabilities'> & {
  next_due_date: string | null;
  created_at: string;
};

interface ListKey {
  accountId: number;
  family: string | null;
  status: string | null;
  beforeId: number | null;
  limit: number;
  /** The service ids the principal is limited to, as an array literal (`{1,2}`); null for all. */
  visible: string | null;
}

const LIST_BATCH_SQL =
  'select q.n, s.id, s.family, s.status, s.name, s.label, s.primary_ip, s.billing_cycle, ' +
  `to_char(s.next_due_date, 'YYYY-MM-DD') as next_due_date, ${isoSql('s.created_at')} as created_at, s.capabilities ` +
  'from unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[]) with ordinality as q(account_id, family, status, before_id, lim, visible, n) ' +
  'cross join lateral (select * from services s where s.account_id = q.account_id ' +
  'and (q.family is null or s.family = q.family) and (q.status is null or s.status = q.status) ' +
  'and (q.before_id is null or s.id < q.before_id) and (q.visible is null or s.id = any(q.visible::bigint[])) ' +
  'order by s.id desc limit q.lim) s order by q.n, s.id desc';

const listBatchers = new WeakMap<Knex, ReadBatcher<ListKey, ServiceListRow>>();
function listBatcher(db: Knex): ReadBatcher<ListKey, ServiceListRow> {
  let batcher = listBatchers.get(db);
  if (!batcher) {
    batcher = new ReadBatcher(async (keys) => {
      const rows = await preparedQuery<ServiceListRow & { n: string | number }>(db, 'services-list-batch', LIST_BATCH_SQL, [
        keys.map((k) => k.accountId),
        keys.map((k) => k.family),
        keys.map((k) => k.status),
        keys.map((k) => k.beforeId),
        keys.map((k) => k.limit),
        keys.map((k) => k.visible),
      ]);
      return rows.map(({ n, ...row }) => ({ n: Number(n) - 1, row }));
    });
    listBatchers.set(db, batcher);
  }
  return batcher;
}

/**
 * A page of the services the principal may see, newest first (`GET /v1/services`): the hottest
 * read of the API, so it skips the query builder, PostgreSQL formats the dates, and the reads of
 * concurrent requests go to the database together (db/read-batcher.ts, docs/benchmarks.md).
 */
export function listVisibleServices(
  db: Knex,
  principal: Principal,
  filters: { family?: string; status?: string; beforeId?: number; limit: number },
): Promise<ServiceListRow[]> {
  const visible = visibleServiceIds(principal);
  return listBatcher(db).load({
    accountId: principal.accountId,
    family: filters.family ?? null,
    status: filters.status ?? null,
    beforeId: filters.beforeId ?? null,
    limit: filters.limit,
    visible: visible ? `{${visible.join(',')}}` : null,
  });
}

/**
 * Loads a service the principal may see, optionally of one family; anything else is 404
 * (convention 8: invisible and missing look the same).
 */
export async function findVisibleService(db: Knex, principal: Principal, rawId: string, family?: string): Promise<ServiceRow> {
  const id = parseNumericId('svc', rawId);
  if (id === null || !canSeeService(principal, id)) throw notFound('service');
  // Every action on a service reads this row first: a prepared statement, not the ORM.
  const [row] = await preparedQuery<ServiceRow>(db, 'services-find-visible', 'select * from services where id = $1 and account_id = $2', [
    id,
    principal.accountId,
  ]);
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
