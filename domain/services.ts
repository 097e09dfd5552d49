import type { Knex } from 'knex';
import { formatId, parseNumericId } from '../common/ids';
import { conflict, notFound, unsupportedForProduct } from './errors';
import { dateOnly, iso } from '../common/time';
import { SERVICE_FAMILIES, type ServiceFamily } from '../common/families';
import { ServiceModel } from '../db/models';
import { isoSql, preparedQuery } from '../db/knex';
import { ReadBatcher } from '../db/read-batcher';
import { canSeeService, visibleServiceIds, type Principal } from './principal';
import { emitEvent } from './events';
import type { OperationGuard } from './operations/guards';

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
  /** The fingerprint of the page this process holds for the key, if any. */
  known: string | null;
}

/**
 * One statement for the pages of every request of a turn (db/read-batcher.ts). Each page carries a
 * fingerprint of its rows as PostgreSQL sees them now: their ids and `xmin` (the transaction that
 * wrote each row's current version, new on every insert and update). When it equals the one this
 * process already holds for the key, the page comes back as one row of nulls and the held rows are
 * served; otherwise its rows come back. Any change that alters the page (a row of it updated or
 * deleted, a row entering it through the filters) alters the fingerprint, so a page is never
 * served stale, and a page that did not change costs PostgreSQL the same read but the API a
 * single short row instead of a page to parse.
 */
const LIST_BATCH_SQL =
  'with q as (select * from unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[], $7::text[]) ' +
  'with ordinality as q(account_id, family, status, before_id, lim, visible, known, n)), ' +
  'page as (select q.n, s.id, s.xmin::text as version from q cross join lateral (select s.id, s.xmin from services s where s.account_id = q.account_id ' +
  'and (q.family is null or s.family = q.family) and (q.status is null or s.status = q.status) ' +
  'and (q.before_id is null or s.id < q.before_id) and (q.visible is null or s.id = any(q.visible::bigint[])) ' +
  'order by s.id desc limit q.lim) s), ' +
  "fp as (select q.n, q.known, md5(coalesce(string_agg(p.id || ':' || p.version, ',' order by p.id desc), '')) as fingerprint " +
  'from q left join page p on p.n = q.n group by q.n, q.known), ' +
  // The rows of the pages that changed (one statement, one snapshot: the versions fingerprinted above).
  'changed as (select p.n, s.id, s.family, s.status, s.name, s.label, s.primary_ip, s.billing_cycle, ' +
  `to_char(s.next_due_date, 'YYYY-MM-DD') as next_due_date, ${isoSql('s.created_at')} as created_at, s.capabilities ` +
  'from fp join page p on p.n = fp.n and fp.fingerprint is distinct from fp.known join services s on s.id = p.id) ' +
  'select fp.n, fp.fingerprint, c.id, c.family, c.status, c.name, c.label, c.primary_ip, c.billing_cycle, c.next_due_date, c.created_at, c.capabilities ' +
  'from fp left join changed c on c.n = fp.n order by fp.n, c.id desc';

interface ListedPage {
  fingerprint: string;
  /** Shared by every request served from the same fingerprint: read-only. */
  rows: readonly ServiceListRow[];
}

/** Pages held per key (principal's visibility and filters), at most this many per process. */
const HELD_PAGES = 2_000;

class ServicePages {
  private readonly held = new Map<string, ListedPage>();
  private readonly batcher: ReadBatcher<ListKey, ListedPage>;

  constructor(db: Knex) {
    this.batcher = new ReadBatcher(async (keys) => {
      const rows = await preparedQuery<ServiceListRow & { n: string | number; fingerprint: string; id: number | null }>(
        db,
        'services-list-batch',
        LIST_BATCH_SQL,
        [
          keys.map((k) => k.accountId),
          keys.map((k) => k.family),
          keys.map((k) => k.status),
          keys.map((k) => k.beforeId),
          keys.map((k) => k.limit),
          keys.map((k) => k.visible),
          keys.map((k) => k.known),
        ],
      );
      const pages: Array<{ n: number; row: ListedPage }> = [];
      let current: { n: number; row: ListedPage & { rows: ServiceListRow[] } } | undefined;
      for (const { n: position, fingerprint, ...row } of rows) {
        const n = Number(position) - 1;
        if (current?.n !== n) {
          current = { n, row: { fingerprint, rows: [] } };
          pages.push(current);
        }
        if (row.id !== null) current.row.rows.push(row as ServiceListRow);
      }
      return pages;
    });
  }

  async load(key: Omit<ListKey, 'known'>): Promise<readonly ServiceListRow[]> {
    const id = `${key.accountId}|${key.family}|${key.status}|${key.beforeId}|${key.limit}|${key.visible}`;
    const held = this.held.get(id);
    const [page] = await this.batcher.load({ ...key, known: held?.fingerprint ?? null });
    if (held && page.fingerprint === held.fingerprint) return held.rows;
    if (!held && this.held.size >= HELD_PAGES) this.held.delete(this.held.keys().next().value!);
    this.held.set(id, page);
    return page.rows;
  }
}

const servicePages = new WeakMap<Knex, ServicePages>();

/**
 * A page of the services the principal may see, newest first (`GET /v1/services`): the hottest
 * read of the API, so it skips the query builder, PostgreSQL formats the dates, the reads of
 * concurrent requests go to the database together, and a page that has not changed since this
 * process last read it is not sent again (LIST_BATCH_SQL; docs/benchmarks.md). The rows are
 * shared between requests: read-only.
 */
export function listVisibleServices(
  db: Knex,
  principal: Principal,
  filters: { family?: string; status?: string; beforeId?: number; limit: number },
): Promise<readonly ServiceListRow[]> {
  let pages = servicePages.get(db);
  if (!pages) servicePages.set(db, (pages = new ServicePages(db)));
  const visible = visibleServiceIds(principal);
  return pages.load({
    accountId: principal.accountId,
    family: filters.family ?? null,
    status: filters.status ?? null,
    beforeId: filters.beforeId ?? null,
    limit: filters.limit,
    visible: visible ? `{${visible.join(',')}}` : null,
  });
}

/** The numeric id of a service the principal's permissions let it see (404 otherwise); its row is not read. */
export function visibleServiceId(principal: Principal, rawId: string): number {
  const id = parseNumericId('svc', rawId);
  if (id === null || !canSeeService(principal, id)) throw notFound('service');
  return id;
}

/**
 * The statement behind findVisibleService: `$1` the service id, `$2` the account. A family may read
 * its own record with the service row in the same round trip (a join; see findVisibleVps).
 */
export interface ServiceRead {
  name: string;
  text: string;
}

const SERVICE_READ: ServiceRead = { name: 'services-find-visible', text: 'select * from services where id = $1 and account_id = $2' };

/**
 * Loads a service the principal may see, optionally of one family; anything else is 404
 * (convention 8: invisible and missing look the same).
 */
export async function findVisibleService<R extends ServiceRow = ServiceRow>(
  db: Knex,
  principal: Principal,
  rawId: string,
  family?: string,
  read: ServiceRead = SERVICE_READ,
): Promise<R> {
  const id = visibleServiceId(principal, rawId);
  // Every action on a service reads this row first: a prepared statement, not the ORM.
  const [row] = await preparedQuery<R>(db, read.name, read.text, [id, principal.accountId]);
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

/** What a request needs of the resource it names, beyond seeing it. */
export interface TargetNeeds {
  /** A capability that must be true (400 `unsupported_for_product` otherwise: permanent). */
  capability?: string | null;
  /** What a change does (`a power action`): the service must take actions (409 while suspended, terminated...). */
  action?: string;
}

/**
 * The one lookup of the resource a request names, for every family: `find` answers 404 for what
 * the principal may not see (another account's, another family's, none), then the capability the
 * request needs (400), then for a change a service that takes actions (409), always in this order
 * (docs/security.md "Suspended and terminated services"). `find` is the family's visible read
 * (`findVisibleVps`, `findVisibleZone`...), which returns the service with the family's record.
 */
export async function findTarget<T extends { service: Pick<ServiceRow, 'capabilities' | 'status'> }>(
  find: () => Promise<T>,
  needs: TargetNeeds = {},
): Promise<T> {
  const target = await find();
  if (needs.capability) requireCapability(target.service, needs.capability);
  if (needs.action) requireActionable(target.service, needs.action);
  return target;
}

/**
 * The service's row, locked (share) and checked in the statement that writes an operation's row:
 * an action cannot start on a service billing suspended or terminated after the request checked
 * it (`allows` is requireActionable in SQL). With `checks`, for a start that read nothing before,
 * it is also findVisibleService and requireCapability, refused in the same order: another account's
 * or another family's service (or none) is 404, a false capability 400, then the status 409.
 */
export function serviceGuard(serviceId: number, action: string, checks?: { accountId: number; family: string; capability: string }): OperationGuard {
  const actionable = `status not in (${Object.keys(REFUSED_IN)
    .map((s) => `'${s}'`)
    .join(', ')})`;
  const visible = (row: Record<string, unknown> | null): row is Record<string, unknown> =>
    !!row && !!checks && Number(row.account_id) === checks.accountId && row.family === checks.family;
  return {
    name: 'service',
    table: 'services',
    key: { column: 'id', value: serviceId },
    lock: 'share',
    // Another account's service is not locked (nor waited for): it is missing, and refused as such.
    scope: checks && ((param) => `account_id = ${param(checks.accountId)}`),
    columns: checks ? ['id', 'account_id', 'family', 'status', 'capabilities'] : ['status'],
    allows: checks
      ? (param) => `family = ${param(checks.family)} and coalesce(capabilities -> ${param(checks.capability)} = 'true'::jsonb, false) and ${actionable}`
      : actionable,
    // Without checks, a service deleted meanwhile refuses nothing here: the operation's own reads find it gone.
    whenMissing: checks ? 'refuses' : 'allows',
    refuse(row) {
      if (checks) {
        if (!visible(row)) throw notFound(checks.family);
        requireCapability(row as Pick<ServiceRow, 'capabilities'>, checks.capability);
      }
      if (row) requireActionable(row as Pick<ServiceRow, 'status'>, action);
    },
  };
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
