import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import {
  CYCLE_MONTHS,
  type BillingCycle,
  type BillingProvider,
  type CancelOutcome,
  type CancellationType,
  type CreateOrderOutcome,
  type InvoiceView,
  type NewOrder,
  type OrderRecord,
  type OrderStatus,
  type PaymentMethodView,
  type ProductRecord,
  type PromoCheck,
  type ServiceBillingView,
} from '../billing.provider';
import { simulatedDelay, type BackendSwitchboard } from '../switchboard';
import { dateOnly, iso } from '../../common/time';
import { moveServiceStatus } from '../../domain/services';

/** Where the simulated control panel would take a payment (locally: POST /_dev/invoices/{id}/pay). */
export const SIMULATED_PANEL_URL = 'https://panel.cloud.example.test';

const cents = (amount: number | string) => Math.round(Number(amount) * 100);
const money = (c: number) => Math.round(c) / 100;

/** `from` plus whole months, in UTC, clamped to the month's last day (Jan 31 + 1 month = Feb 28/29). */
export function addMonths(from: Date, months: number): string {
  const y = from.getUTCFullYear();
  const m = from.getUTCMonth() + months;
  const lastDay = new Date(Date.UTC(y, m + 1, 0)).getUTCDate();
  return new Date(Date.UTC(y, m, Math.min(from.getUTCDate(), lastDay))).toISOString().slice(0, 10);
}

interface InvoiceRow {
  id: number;
  account_id: number;
  order_id: number;
  status: 'unpaid' | 'paid' | 'cancelled';
  currency: string;
  subtotal: number;
  discount: number;
  total: number;
  credit_applied: number;
  settled_by: string | null;
  created_at: Date;
  paid_at: Date | null;
  cancelled_at: Date | null;
}

export function presentInvoice(row: InvoiceRow): InvoiceView {
  const id = formatId('inv', row.id);
  return {
    object: 'invoice',
    id,
    status: row.status,
    currency: row.currency,
    subtotal: Number(row.subtotal),
    discount: Number(row.discount),
    total: Number(row.total),
    credit_applied: Number(row.credit_applied),
    amount_due: row.status === 'unpaid' ? money(cents(row.total) - cents(row.credit_applied)) : 0,
    settled_by: row.settled_by,
    payment_url: row.status === 'unpaid' ? `${SIMULATED_PANEL_URL}/billing/invoices/${id}/pay` : null,
    created_at: iso(row.created_at),
    paid_at: iso(row.paid_at),
    cancelled_at: iso(row.cancelled_at),
  };
}

interface PromoRow {
  active: boolean;
  expires_at: Date | null;
  max_uses: number | null;
  uses: number;
  product_slugs: string[] | null;
  billing_cycles: string[] | null;
}

/** Why a promo code cannot be used for this product and cycle (shown after "The promo code"), or null. */
function promoRefusal(row: PromoRow | undefined, product: ProductRecord, cycle: BillingCycle): string | null {
  if (!row || !row.active) return 'is not a valid promo code';
  if (row.expires_at && new Date(row.expires_at).getTime() <= Date.now()) return 'has expired';
  if (row.max_uses !== null && row.uses >= row.max_uses) return 'has been used up';
  if (row.product_slugs && !row.product_slugs.includes(product.slug)) return `does not apply to the product "${product.slug}"`;
  if (row.billing_cycles && !row.billing_cycles.includes(cycle)) return `does not apply to the billing cycle "${cycle}"`;
  return null;
}

/**
 * The billing backend, simulated in PostgreSQL. The catalog, orders and invoices are records the
 * control plane reads from its own database (so reads and validation never need the backend); the
 * billing actions (issue, pay, void, cancel, create services) check the `billing` switch of the
 * switchboard (POST /_dev/backends/billing/outage) and take a little simulated time.
 */
export class BillingSimulator implements BillingProvider {
  constructor(
    private readonly db: Knex,
    private readonly switchboard: BackendSwitchboard,
    private readonly delayScale: number,
  ) {}

  private async call(ms = 20): Promise<void> {
    await this.switchboard.assertUp('billing');
    await simulatedDelay(ms, this.delayScale);
  }

  private async withPrices(rows: Array<Omit<ProductRecord, 'prices'>>, currency: string): Promise<ProductRecord[]> {
    if (rows.length === 0) return [];
    const prices = await this.db('product_prices')
      .whereIn(
        'product_id',
        rows.map((r) => r.id),
      )
      .andWhere({ currency });
    return rows.map((row) => {
      const own = prices.filter((p) => Number(p.product_id) === Number(row.id));
      const sorted = own.sort((a, b) => CYCLE_MONTHS[a.billing_cycle as BillingCycle] - CYCLE_MONTHS[b.billing_cycle as BillingCycle]);
      return { ...row, prices: Object.fromEntries(sorted.map((p) => [p.billing_cycle, Number(p.amount)])) };
    });
  }

  async getProduct(slug: string, currency: string): Promise<ProductRecord | null> {
    const row = await this.db('products').where({ slug }).first();
    if (!row) return null;
    const [product] = await this.withPrices([row], currency);
    return product;
  }

  async listProducts(opts: { currency: string; family?: string; limit: number; before?: number }) {
    const qb = this.db('products')
      .where({ hidden: false, retired: false })
      .whereExists((q) => q.select(1).from('product_prices').whereRaw('product_prices.product_id = products.id').andWhere('currency', opts.currency));
    if (opts.family) qb.where((w) => w.where('family', opts.family!).orWhere('product_family', opts.family!));
    if (opts.before !== undefined) qb.where('id', '<', opts.before);
    const rows = await qb.orderBy('id', 'desc').limit(opts.limit + 1);
    const hasMore = rows.length > opts.limit;
    if (hasMore) rows.length = opts.limit;
    return { items: await this.withPrices(rows, opts.currency), hasMore };
  }

  async listPaymentMethods(): Promise<PaymentMethodView[]> {
    const rows = await this.db('payment_methods').where({ active: true }).orderBy([{ column: 'position' }, { column: 'id' }]);
    return rows.map((r) => ({ object: 'payment_method' as const, id: r.id, name: r.name, default: r.is_default }));
  }

  async checkPromo(code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck> {
    const row = await this.db('promo_codes').where({ code: code.trim().toUpperCase() }).first();
    const reason = promoRefusal(row, product, cycle);
    return reason ? { ok: false, percentOff: 0, reason } : { ok: true, percentOff: Number(row.percent_off) };
  }

  private siteNameTakenQuery(db: Knex | Knex.Transaction, siteName: string) {
    const name = siteName.toLowerCase();
    return db
      .select(
        db.raw(
          `exists (
             select 1 from orders o
               left join service_billing sb on sb.order_id = o.id
               left join services s on s.id = sb.service_id
              where lower(o.site_name) = ? and o.status <> 'cancelled'
                and (s.id is null or s.status not in ('terminated', 'cancelled'))
           ) or exists (
             select 1 from services where lower(label) = ? and status not in ('terminated', 'cancelled')
           ) as taken`,
          [name, name],
        ),
      )
      .first();
  }

  async isSiteNameTaken(siteName: string): Promise<boolean> {
    const row = await this.siteNameTakenQuery(this.db, siteName);
    return Boolean(row?.taken);
  }

  /** Records the order on the control plane's side; billing sees it when the workflow issues the invoice. */
  async createOrder(trxArg: unknown, order: NewOrder): Promise<CreateOrderOutcome> {
    const trx = trxArg as Knex.Transaction;
    if (order.siteName) {
      // Serialises orders for the same site name until this transaction ends.
      await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`site:${order.siteName.toLowerCase()}`]);
      const row = await this.siteNameTakenQuery(trx, order.siteName);
      if (row?.taken) return { ok: false, code: 'hostname_taken' };
    }
    const price = order.product.prices[order.billingCycle];
    if (price === undefined) throw new Error(`product ${order.product.slug} is not sold ${order.billingCycle}`);
    let percentOff = 0;
    if (order.promoCode) {
      // The check before the transaction was advisory: under the row lock, parallel orders see each
      // other's uses, so a code is never used more than max_uses times, nor after it expired or was switched off.
      const code = order.promoCode.trim().toUpperCase();
      const promo = await trx('promo_codes').where({ code }).forUpdate().first();
      const reason = promoRefusal(promo, order.product, order.billingCycle);
      if (reason) return { ok: false, code: 'invalid_promocode', reason };
      percentOff = Number(promo.percent_off);
      await trx('promo_codes').where({ code }).increment('uses', 1);
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
        promo_code: order.promoCode ? order.promoCode.trim().toUpperCase() : null,
        site_name: order.siteName ? order.siteName.toLowerCase() : null,
        payment_method: order.paymentMethod,
        currency: order.currency,
        price,
        percent_off: percentOff,
        status: 'pending',
        credential_id: order.credentialId,
      })
      .returning('*');
    return { ok: true, order: row as OrderRecord };
  }

  async getOrder(accountId: number, orderId: number): Promise<OrderRecord | null> {
    return (await this.db('orders').where({ id: orderId, account_id: accountId }).first()) ?? null;
  }

  async getOrderById(orderId: number): Promise<OrderRecord | null> {
    return (await this.db('orders').where({ id: orderId }).first()) ?? null;
  }

  async listOrders(opts: { accountId: number; status?: OrderStatus; limit: number; before?: number }) {
    const qb = this.db('orders').where({ account_id: opts.accountId });
    if (opts.status) qb.where({ status: opts.status });
    if (opts.before !== undefined) qb.where('id', '<', opts.before);
    const rows: OrderRecord[] = await qb.orderBy('id', 'desc').limit(opts.limit + 1);
    const hasMore = rows.length > opts.limit;
    if (hasMore) rows.length = opts.limit;
    return { items: rows, hasMore };
  }

  async issueInvoice(orderId: number): Promise<InvoiceView> {
    await this.call(100);
    return this.db.transaction(async (trx) => {
      const order = await trx('orders').where({ id: orderId }).forUpdate().first();
      if (!order) throw new Error(`order ${orderId} does not exist`);
      const existing = await trx('invoices').where({ order_id: orderId }).first();
      if (existing) return presentInvoice(existing);

      const subtotal = cents(order.price);
      const discount = Math.round((subtotal * Number(order.percent_off)) / 100);
      const total = subtotal - discount;
      const base = {
        account_id: order.account_id,
        order_id: orderId,
        currency: order.currency,
        subtotal: money(subtotal),
        discount: money(discount),
        total: money(total),
      };
      if (order.status === 'cancelled') {
        // Voided before billing issued anything: the invoice exists only to say so.
        const [row] = await trx('invoices').insert({ ...base, status: 'cancelled', cancelled_at: trx.fn.now() }).returning('*');
        return presentInvoice(row);
      }
      let settledBy: string | null = null;
      let creditApplied = 0;
      if (total === 0) {
        settledBy = subtotal === 0 ? 'free' : 'promo';
      } else {
        const account = await trx('accounts').where({ id: order.account_id }).forUpdate().first();
        // Credit is applied only when it covers the whole invoice; otherwise it stays untouched.
        if (account && cents(account.credit) >= total) {
          await trx('accounts').where({ id: order.account_id }).update({ credit: money(cents(account.credit) - total) });
          creditApplied = total;
          settledBy = 'credit';
        }
      }
      const paid = settledBy !== null;
      const [row] = await trx('invoices')
        .insert({
          ...base,
          status: paid ? 'paid' : 'unpaid',
          credit_applied: money(creditApplied),
          settled_by: settledBy,
          paid_at: paid ? trx.fn.now() : null,
        })
        .returning('*');
      if (paid) await trx('orders').where({ id: orderId }).update({ status: 'active', paid_at: trx.fn.now(), updated_at: trx.fn.now() });
      return presentInvoice(row);
    });
  }

  async getInvoiceForOrder(orderId: number): Promise<InvoiceView | null> {
    const row = await this.db('invoices').where({ order_id: orderId }).first();
    return row ? presentInvoice(row) : null;
  }

  async invoicesForOrders(orderIds: number[]): Promise<Map<number, InvoiceView>> {
    const rows: InvoiceRow[] = orderIds.length ? await this.db('invoices').whereIn('order_id', orderIds) : [];
    return new Map(rows.map((r) => [Number(r.order_id), presentInvoice(r)]));
  }

  async payInvoice(invoiceId: number): Promise<{ invoice: InvoiceView; order: OrderRecord } | null> {
    await this.call();
    return this.db.transaction(async (trx) => {
      const found = await trx('invoices').where({ id: invoiceId }).first();
      if (!found) return null;
      // Lock order before invoice, as cancelOrder does.
      let order = await trx('orders').where({ id: found.order_id }).forUpdate().first();
      let invoice = await trx('invoices').where({ id: invoiceId }).forUpdate().first();
      if (invoice.status === 'unpaid') {
        [invoice] = await trx('invoices')
          .where({ id: invoiceId })
          .update({ status: 'paid', settled_by: 'payment_method', paid_at: trx.fn.now() })
          .returning('*');
        [order] = await trx('orders').where({ id: order.id }).update({ status: 'active', paid_at: trx.fn.now(), updated_at: trx.fn.now() }).returning('*');
      }
      return { invoice: presentInvoice(invoice), order };
    });
  }

  async cancelOrder(
    accountId: number,
    orderId: number,
    request: { type: CancellationType; reason: string | null },
  ): Promise<CancelOutcome | null> {
    await this.call();
    return this.db.transaction(async (trx) => {
      const order = await trx('orders').where({ id: orderId, account_id: accountId }).forUpdate().first();
      if (!order) return null;
      if (order.status === 'cancelled') return { kind: 'already_cancelled' as const, order };
      if (order.status === 'pending') {
        const invoice = await trx('invoices').where({ order_id: orderId }).forUpdate().first();
        if (!invoice || invoice.status === 'unpaid') {
          if (invoice) await trx('invoices').where({ id: invoice.id }).update({ status: 'cancelled', cancelled_at: trx.fn.now() });
          // A voided order gives its promo code use back.
          if (order.promo_code) await trx('promo_codes').where({ code: order.promo_code }).where('uses', '>', 0).decrement('uses', 1);
          const [voided] = await trx('orders')
            .where({ id: orderId })
            .update({ status: 'cancelled', cancelled_at: trx.fn.now(), updated_at: trx.fn.now() })
            .returning('*');
          return { kind: 'voided' as const, order: voided };
        }
      }
      // Active (paid) order: a cancellation request per service; billing carries it out.
      const [updated] = await trx('orders')
        .where({ id: orderId })
        .update({
          cancellation_type: request.type,
          cancellation_reason: request.reason,
          cancellation_requested_at: trx.fn.now(),
          updated_at: trx.fn.now(),
        })
        .returning('*');
      const services = await trx('service_billing')
        .join('services', 'services.id', 'service_billing.service_id')
        .where('service_billing.order_id', orderId)
        .whereNotIn('services.status', ['terminated', 'cancelled'])
        .select('services.id', 'services.next_due_date');
      for (const svc of services) {
        await trx('service_billing')
          .where({ service_id: svc.id })
          .update({
            cancellation_type: request.type,
            cancellation_reason: request.reason,
            cancellation_requested_at: trx.fn.now(),
            cancellation_effective_date: request.type === 'immediate' ? new Date().toISOString().slice(0, 10) : dateOnly(svc.next_due_date),
          });
      }
      return { kind: 'requested' as const, order: updated };
    });
  }

  async executeDueCancellations(today: string): Promise<number[]> {
    await this.call();
    return this.db.transaction(async (trx) => {
      const due: Array<{ id: number }> = await trx('service_billing')
        .join('services', 'services.id', 'service_billing.service_id')
        .where('service_billing.cancellation_effective_date', '<=', today)
        .whereNotIn('services.status', ['terminated', 'cancelled'])
        .forUpdate()
        .skipLocked()
        .select('services.id');
      for (const { id } of due) await moveServiceStatus(this.db, id, 'terminated', trx);
      return due.map((r) => Number(r.id));
    });
  }

  async createServicesForOrder(orderId: number): Promise<number[]> {
    await this.call(100);
    return this.db.transaction(async (trx) => {
      const order = await trx('orders').where({ id: orderId }).forUpdate().first();
      if (!order) throw new Error(`order ${orderId} does not exist`);
      const existing = await trx('service_billing').where({ order_id: orderId }).orderBy('service_id');
      if (existing.length > 0) return existing.map((r) => Number(r.service_id));
      if (order.status !== 'active') throw new Error(`order ${orderId} is ${order.status}; only an active order creates services`);
      const product = await trx('products').where({ id: order.product_id }).first();
      const paidAt = order.paid_at ? new Date(order.paid_at) : new Date();
      const nextDue = addMonths(paidAt, CYCLE_MONTHS[order.billing_cycle as BillingCycle] ?? 1);
      const label = order.site_name ?? (typeof order.options?.hostname === 'string' ? order.options.hostname : null);
      const [service] = await trx('services')
        .insert({
          account_id: order.account_id,
          family: product.family,
          product: product.slug,
          status: 'pending',
          name: product.name,
          label,
          billing_cycle: order.billing_cycle,
          next_due_date: nextDue,
          capabilities: JSON.stringify(product.capabilities ?? {}),
        })
        .returning('id');
      await trx('service_billing').insert({
        service_id: service.id,
        order_id: orderId,
        product_family: product.product_family,
        recurring_amount: order.price,
        currency: order.currency,
        cancellation_type: order.cancellation_type,
        cancellation_reason: order.cancellation_reason,
        cancellation_requested_at: order.cancellation_requested_at,
        cancellation_effective_date: order.cancellation_type
          ? order.cancellation_type === 'immediate'
            ? new Date().toISOString().slice(0, 10)
            : nextDue
          : null,
      });
      return [Number(service.id)];
    });
  }

  async servicesOfOrders(orderIds: number[]): Promise<Map<number, ServiceBillingView[]>> {
    const rows = orderIds.length ? await this.db('service_billing').whereIn('order_id', orderIds).orderBy('service_id') : [];
    const out = new Map<number, ServiceBillingView[]>();
    for (const r of rows) {
      const list = out.get(Number(r.order_id)) ?? [];
      list.push({
        service_id: Number(r.service_id),
        product_family: r.product_family,
        recurring_amount: Number(r.recurring_amount),
        currency: r.currency,
        cancellation: r.cancellation_type
          ? {
              type: r.cancellation_type,
              reason: r.cancellation_reason,
              requested_at: iso(r.cancellation_requested_at),
              effective_date: dateOnly(r.cancellation_effective_date),
            }
          : null,
      });
      out.set(Number(r.order_id), list);
    }
    return out;
  }
}
