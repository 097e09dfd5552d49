import type { Knex } from 'knex';
import { dateOnly } from '../../common/time';
import {
  CYCLE_MONTHS,
  type BillableOrder,
  type BillingCycle,
  type BillingProvider,
  type CancellationType,
  type InvoiceView,
  type ProductRecord,
} from '../../providers/billing.provider';
import { moveServiceStatus } from '../services';
import { isApex } from '../wordpress/store';

/**
 * The control plane's order store, and the only SQL on `orders` and on the services orders create.
 * Billing (providers/billing.provider.ts) is asked for what billing decides (promo uses, invoices,
 * credit, contracts) and keeps its own records; this module keeps ours in step with its answers.
 */
export type OrderStatus = 'pending' | 'active' | 'cancelled';

export interface OrderRecord {
  id: number;
  account_id: number;
  operation_id: string;
  product_id: number;
  product: string;
  billing_cycle: string;
  options: Record<string, unknown>;
  promo_code: string | null;
  site_name: string | null;
  payment_method: string;
  currency: string;
  price: number | string;
  percent_off: number | string;
  status: OrderStatus;
  cancellation_type: CancellationType | null;
  cancellation_reason: string | null;
  cancellation_requested_at: Date | null;
  credential_id: string | null;
  created_at: Date;
  paid_at: Date | null;
  cancelled_at: Date | null;
}

export interface NewOrder {
  /** Taken from the orders sequence beforehand (the operation names the order before it exists). */
  id?: number;
  accountId: number;
  operationId: string;
  product: ProductRecord;
  billingCycle: BillingCycle;
  options: Record<string, unknown>;
  promoCode: string | null;
  siteName: string | null;
  paymentMethod: string;
  currency: string;
  credentialId: string | null;
}

/** The outcome of cancelling an order (POST /v1/orders/{id}/cancel). */
export interface CancelOutcome {
  /** `voided`: an unpaid order was voided with its invoice; `requested`: a cancellation request per service. */
  kind: 'voided' | 'requested' | 'already_cancelled';
  order: OrderRecord;
}

export const billableOrder = (order: OrderRecord): BillableOrder => ({
  orderId: Number(order.id),
  accountId: Number(order.account_id),
  currency: order.currency,
  price: Number(order.price),
  percentOff: Number(order.percent_off),
});

/** `from` plus whole months, in UTC, clamped to the month's last day (Jan 31 + 1 month = Feb 28/29). */
export function addMonths(from: Date, months: number): string {
  const y = from.getUTCFullYear();
  const m = from.getUTCMonth() + months;
  const lastDay = new Date(Date.UTC(y, m + 1, 0)).getUTCDate();
  return new Date(Date.UTC(y, m, Math.min(from.getUTCDate(), lastDay))).toISOString().slice(0, 10);
}

const todayUtc = () => new Date().toISOString().slice(0, 10);

/**
 * The advisory-lock keys that serialise every claim of a host name (an order's site name, a hosted
 * site's custom domain, a site's platform row): the name itself and, because an apex custom domain
 * also serves its `www.` form, the apex of a `www.<apex>` name and the `www.` form of an apex. Two
 * claims that could collide always share a key.
 */
export function hostNameLockKeys(name: string): string[] {
  const n = name.toLowerCase();
  const keys = new Set([n]);
  if (n.startsWith('www.') && isApex(n.slice(4))) keys.add(n.slice(4));
  if (isApex(n)) keys.add(`www.${n}`);
  return [...keys].map((k) => `site:${k}`);
}

/**
 * Takes (until the transaction ends) the advisory locks of every name in `names` with
 * hostNameLockKeys, in the order of their lock ids so that two callers never wait on each other.
 */
export async function lockHostNames(trx: Knex.Transaction, names: readonly string[]): Promise<void> {
  const keys = [...new Set(names.flatMap(hostNameLockKeys))];
  if (keys.length === 0) return;
  const ids = await trx.raw(`select distinct hashtext(k) as id from unnest(array[${keys.map(() => '?::text').join(', ')}]) as k order by 1`, keys);
  // The same lock ids as `pg_advisory_xact_lock(hashtext(key))`.
  for (const { id } of ids.rows as Array<{ id: number }>) await trx.raw('select pg_advisory_xact_lock(?::bigint)', [id]);
}

/**
 * Whether `siteName` is held: by a live order, a live service's label, or a hosted site that serves
 * it (a domain of that name, or an apex custom domain whose `www.` form it is: `www.example.com`
 * while `example.com` is another site's custom domain).
 */
function siteNameTakenQuery(db: Knex | Knex.Transaction, siteName: string) {
  const name = siteName.toLowerCase();
  const apexOfWww = name.startsWith('www.') && isApex(name.slice(4)) ? name.slice(4) : null;
  return db
    .select(
      db.raw(
        `exists (
           select 1 from orders o
             left join services s on s.order_id = o.id
            where lower(o.site_name) = ? and o.status <> 'cancelled'
              and (s.id is null or s.status not in ('terminated', 'cancelled'))
         ) or exists (
           select 1 from services where lower(label) = ? and status not in ('terminated', 'cancelled')
         ) or exists (
           -- a domain of a hosted site
           select 1 from wordpress_domains where domain = ?
         ) or exists (
           -- an apex custom domain serves its www. form too
           select 1 from wordpress_domains where domain = ? and not platform
         ) as taken`,
        [name, name, name, apexOfWww ?? ''],
      ),
    )
    .first();
}

/** A hosted site's name is taken by a live order or service (any account), or served by a site. */
export async function isSiteNameTaken(db: Knex | Knex.Transaction, siteName: string): Promise<boolean> {
  return Boolean((await siteNameTakenQuery(db, siteName))?.taken);
}

/**
 * Records a new order inside the caller's transaction (beside the operation row): a taken site name
 * is refused atomically (null), and the promo code's use is taken from billing in the same
 * transaction (its checks run again under its lock; a refusal comes back as `promo`).
 */
export async function createOrder(
  trx: Knex.Transaction,
  billing: BillingProvider,
  order: NewOrder,
): Promise<{ order: OrderRecord } | { refused: 'site_name' } | { refused: 'promo'; reason: string }> {
  if (order.siteName) {
    // Serialises the claims of this name (orders, custom domains, sites) until this transaction ends.
    await lockHostNames(trx, [order.siteName]);
    if ((await siteNameTakenQuery(trx, order.siteName))?.taken) return { refused: 'site_name' };
  }
  const price = order.product.prices[order.billingCycle];
  if (price === undefined) throw new Error(`product ${order.product.slug} is not sold ${order.billingCycle}`);
  let percentOff = 0;
  const promoCode = order.promoCode ? order.promoCode.trim().toUpperCase() : null;
  if (promoCode) {
    const promo = await billing.redeemPromo(trx, promoCode, order.product, order.billingCycle);
    if (!promo.ok) return { refused: 'promo', reason: promo.reason ?? 'is not valid' };
    percentOff = promo.percentOff;
  }
  const [row] = await trx('orders')
    .insert({
      ...(order.id !== undefined ? { id: order.id } : {}),
      account_id: order.accountId,
      operation_id: order.operationId,
      product_id: order.product.id,
      product: order.product.slug,
      billing_cycle: order.billingCycle,
      options: JSON.stringify(order.options),
      promo_code: promoCode,
      site_name: order.siteName ? order.siteName.toLowerCase() : null,
      payment_method: order.paymentMethod,
      currency: order.currency,
      price,
      percent_off: percentOff,
      status: 'pending',
      credential_id: order.credentialId,
    })
    .returning('*');
  return { order: row as OrderRecord };
}

/** Takes back an order whose operation never started (and gives its promo use back). */
export async function withdrawOrder(db: Knex, billing: BillingProvider, orderId: number): Promise<void> {
  const gone = await db('orders').where({ id: orderId }).delete().returning('promo_code');
  const code = gone[0]?.promo_code;
  if (code) await billing.releasePromo(code);
}

export async function getOrder(db: Knex, accountId: number, orderId: number): Promise<OrderRecord | null> {
  return (await db('orders').where({ id: orderId, account_id: accountId }).first()) ?? null;
}

export async function getOrderById(db: Knex, orderId: number): Promise<OrderRecord | null> {
  return (await db('orders').where({ id: orderId }).first()) ?? null;
}

export async function listOrders(db: Knex, opts: { accountId: number; status?: OrderStatus; limit: number; before?: number }) {
  const qb = db('orders').where({ account_id: opts.accountId });
  if (opts.status) qb.where({ status: opts.status });
  if (opts.before !== undefined) qb.where('id', '<', opts.before);
  const rows: OrderRecord[] = await qb.orderBy('id', 'desc').limit(opts.limit + 1);
  const hasMore = rows.length > opts.limit;
  if (hasMore) rows.length = opts.limit;
  return { items: rows, hasMore };
}

/**
 * Brings the order's status in line with its invoice (paid -> active, void -> cancelled). Idempotent;
 * called wherever the invoice may have moved (issue, payment, cancellation, the workflow's re-reads).
 */
export async function followInvoice(db: Knex, orderId: number, invoice: InvoiceView): Promise<OrderRecord | null> {
  if (invoice.status === 'paid') {
    await db('orders').where({ id: orderId, status: 'pending' }).update({ status: 'active', paid_at: db.fn.now(), updated_at: db.fn.now() });
  } else if (invoice.status === 'cancelled') {
    await db('orders').where({ id: orderId, status: 'pending' }).update({ status: 'cancelled', cancelled_at: db.fn.now(), updated_at: db.fn.now() });
  }
  return getOrderById(db, orderId);
}

/**
 * Cancels an order: an unpaid one is voided with its invoice (and its promo use given back); a paid
 * one gets a cancellation request per service, which billing carries out on its date.
 */
export async function cancelOrder(
  db: Knex,
  billing: BillingProvider,
  accountId: number,
  orderId: number,
  request: { type: CancellationType; reason: string | null },
): Promise<CancelOutcome | null> {
  const order = await getOrder(db, accountId, orderId);
  if (!order) return null;
  if (order.status === 'cancelled') return { kind: 'already_cancelled', order };
  if (order.status === 'pending') {
    const invoice = await billing.voidInvoice(billableOrder(order));
    if (invoice.status === 'cancelled') {
      const voided = (await followInvoice(db, orderId, invoice))!;
      if (voided.promo_code && order.status === 'pending') await billing.releasePromo(voided.promo_code);
      return { kind: 'voided', order: voided };
    }
    await followInvoice(db, orderId, invoice);
  }
  const [updated] = await db('orders')
    .where({ id: orderId })
    .update({ cancellation_type: request.type, cancellation_reason: request.reason, cancellation_requested_at: db.fn.now(), updated_at: db.fn.now() })
    .returning('*');
  const services: Array<{ id: number; next_due_date: Date | string | null }> = await db('services')
    .where({ order_id: orderId })
    .whereNotIn('status', ['terminated', 'cancelled'])
    .select('id', 'next_due_date');
  await billing.requestCancellation(
    services.map((svc) => ({
      serviceId: Number(svc.id),
      type: request.type,
      reason: request.reason,
      effectiveDate: request.type === 'immediate' ? todayUtc() : (dateOnly(svc.next_due_date) ?? todayUtc()),
    })),
  );
  return { kind: 'requested', order: updated as OrderRecord };
}

/** Creates the paid order's service (`pending`, once) and opens its contract with billing. */
export async function createOrderServices(db: Knex, billing: BillingProvider, orderId: number): Promise<number[]> {
  // The catalog is read before the transaction: billing reads with a connection of its own, and a
  // transaction that waits for a second pooled connection deadlocks the worker's pool when a burst
  // of orders holds every connection (test/orders.pool.test.ts). An order's product never changes.
  const draft = await getOrderById(db, orderId);
  if (!draft) throw new Error(`order ${orderId} does not exist`);
  const catalogued = await billing.getProduct(draft.product, draft.currency);
  const serviceIds = await db.transaction(async (trx) => {
    const order: OrderRecord | undefined = await trx('orders').where({ id: orderId }).forUpdate().first();
    if (!order) throw new Error(`order ${orderId} does not exist`);
    const existing = await trx('services').where({ order_id: orderId }).orderBy('id').select('id');
    if (existing.length > 0) return existing.map((r) => Number(r.id));
    if (order.status !== 'active') throw new Error(`order ${orderId} is ${order.status}; only an active order creates services`);
    const product = catalogued;
    if (!product) throw new Error(`product ${order.product} of order ${orderId} is not in the catalog`);
    const paidAt = order.paid_at ? new Date(order.paid_at) : new Date();
    const label = order.site_name ?? (typeof order.options?.hostname === 'string' ? order.options.hostname : null);
    const [service] = await trx('services')
      .insert({
        account_id: order.account_id,
        order_id: orderId,
        product_family: product.product_family,
        family: product.family,
        product: product.slug,
        status: 'pending',
        name: product.name,
        label,
        billing_cycle: order.billing_cycle,
        next_due_date: addMonths(paidAt, CYCLE_MONTHS[order.billing_cycle as BillingCycle] ?? 1),
        capabilities: JSON.stringify(product.capabilities ?? {}),
      })
      .returning('id');
    return [Number(service.id)];
  });
  // Opening the contract is idempotent on billing's side, so a retry after a crash here completes it.
  const order = (await getOrderById(db, orderId))!;
  for (const serviceId of serviceIds) {
    const service = await db('services').where({ id: serviceId }).first();
    const product = await billing.getProduct(order.product, order.currency);
    await billing.openContract({
      serviceId,
      orderId,
      productFamily: product?.product_family ?? service.family,
      recurringAmount: Number(order.price),
      currency: order.currency,
      cancellation: order.cancellation_type
        ? {
            type: order.cancellation_type,
            reason: order.cancellation_reason,
            requestedAt: order.cancellation_requested_at ?? new Date(),
            effectiveDate: order.cancellation_type === 'immediate' ? todayUtc() : dateOnly(service.next_due_date)!,
          }
        : null,
    });
  }
  return serviceIds;
}

/**
 * Terminates the services whose cancellation billing carried out by `today` (with
 * `service.terminated`); the teardown sweeper then deprovisions them. Returns their ids.
 */
export async function terminateDueServices(db: Knex, billing: BillingProvider, today: string): Promise<number[]> {
  const due = await billing.takeDueCancellations(today);
  const terminated: number[] = [];
  for (const id of due) {
    await db.transaction(async (trx) => {
      const service = await trx('services').where({ id }).forUpdate().first();
      if (!service || service.status === 'terminated' || service.status === 'cancelled') return;
      await moveServiceStatus(db, id, 'terminated', trx);
      terminated.push(id);
    });
  }
  return terminated;
}
