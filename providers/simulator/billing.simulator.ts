import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import { dateOnly, iso } from '../../common/time';
import {
  CYCLE_MONTHS,
  type BillableOrder,
  type BillingCycle,
  type BillingProvider,
  type CancellationType,
  type InvoiceView,
  type NewContract,
  type PaymentMethodView,
  type ProductRecord,
  type PromoCheck,
  type ServiceBillingView,
} from '../billing.provider';
import { simulatedDelay, type BackendSwitchboard } from '../switchboard';

/** Where the simulated control panel would take a payment (locally: POST /_dev/invoices/{id}/pay). */
export const SIMULATED_PANEL_URL = 'https://panel.cloud.example.test';

const cents = (amount: number | string) => Math.round(Number(amount) * 100);
const money = (c: number) => Math.round(c) / 100;

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
 * The billing backend, simulated in PostgreSQL in its own tables (products, prices, payment methods,
 * promo codes, invoices, billing_accounts, service_billing); it never writes the control plane's.
 * Catalog reads serve the API's validation even while billing is switched off; the billing actions
 * (issue, pay, void, contracts, cancellations) check the `billing` switch
 * (POST /_dev/backends/billing/outage) and take a little simulated time.
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
    const rows = await this.db('payment_methods')
      .where({ active: true })
      .orderBy([{ column: 'position' }, { column: 'id' }]);
    return rows.map((r) => ({ object: 'payment_method' as const, id: r.id, name: r.name, default: r.is_default }));
  }

  async checkPromo(code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck> {
    return this.checkPromoIn(this.db, code.trim().toUpperCase(), product, cycle);
  }

  private async checkPromoIn(db: Knex | Knex.Transaction, code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck> {
    const row = await db('promo_codes').where({ code }).first();
    const reason = promoRefusal(row, product, cycle);
    return reason ? { ok: false, percentOff: 0, reason } : { ok: true, percentOff: Number(row.percent_off) };
  }

  async redeemPromo(trxArg: unknown, code: string, product: ProductRecord, cycle: BillingCycle): Promise<PromoCheck> {
    const trx = trxArg as Knex.Transaction;
    const normalized = code.trim().toUpperCase();
    // Checked again under the row lock, in the transaction that takes the use.
    await trx('promo_codes').where({ code: normalized }).forUpdate().first();
    const check = await this.checkPromoIn(trx, normalized, product, cycle);
    if (check.ok) await trx('promo_codes').where({ code: normalized }).increment('uses', 1);
    return check;
  }

  async releasePromo(code: string): Promise<void> {
    await this.db('promo_codes').where({ code: code.trim().toUpperCase() }).where('uses', '>', 0).decrement('uses', 1);
  }

  async issueInvoice(order: BillableOrder): Promise<InvoiceView> {
    await this.call(100);
    return this.db.transaction(async (trx) => {
      await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`invoice:${order.orderId}`]);
      const existing = await trx('invoices').where({ order_id: order.orderId }).first();
      if (existing) return presentInvoice(existing);
      const base = this.invoiceBase(order);
      const total = cents(base.total);
      let settledBy: string | null = null;
      let creditApplied = 0;
      if (total === 0) {
        settledBy = cents(base.subtotal) === 0 ? 'free' : 'promo';
      } else {
        const account = await trx('billing_accounts').where({ account_id: order.accountId }).forUpdate().first();
        // Credit is applied only when it covers the whole invoice; otherwise it stays untouched.
        if (account && cents(account.credit) >= total) {
          await trx('billing_accounts')
            .where({ account_id: order.accountId })
            .update({ credit: money(cents(account.credit) - total), updated_at: trx.fn.now() });
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

  async payInvoice(invoiceId: number): Promise<{ invoice: InvoiceView; orderId: number } | null> {
    await this.call();
    return this.db.transaction(async (trx) => {
      let invoice = await trx('invoices').where({ id: invoiceId }).forUpdate().first();
      if (!invoice) return null;
      if (invoice.status === 'unpaid') {
        [invoice] = await trx('invoices')
          .where({ id: invoiceId })
          .update({ status: 'paid', settled_by: 'payment_method', paid_at: trx.fn.now() })
          .returning('*');
      }
      return { invoice: presentInvoice(invoice), orderId: Number(invoice.order_id) };
    });
  }

  async voidInvoice(order: BillableOrder): Promise<InvoiceView> {
    await this.call();
    return this.db.transaction(async (trx) => {
      // The same lock as issueInvoice: a void and an issue of one order never interleave.
      await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`invoice:${order.orderId}`]);
      const invoice = await trx('invoices').where({ order_id: order.orderId }).forUpdate().first();
      if (invoice && invoice.status !== 'unpaid') return presentInvoice(invoice);
      if (invoice) {
        const [voided] = await trx('invoices').where({ id: invoice.id }).update({ status: 'cancelled', cancelled_at: trx.fn.now() }).returning('*');
        return presentInvoice(voided);
      }
      // Voided before billing issued anything: the invoice exists only to say so.
      const [row] = await trx('invoices')
        .insert({ ...this.invoiceBase(order), status: 'cancelled', cancelled_at: trx.fn.now() })
        .returning('*');
      return presentInvoice(row);
    });
  }

  async accountCredit(accountId: number): Promise<number> {
    const row = await this.db('billing_accounts').where({ account_id: accountId }).first();
    return row ? Number(row.credit) : 0;
  }

  async openContract(contract: NewContract): Promise<void> {
    await this.call(50);
    await this.db('service_billing')
      .insert({
        service_id: contract.serviceId,
        order_id: contract.orderId,
        product_family: contract.productFamily,
        recurring_amount: contract.recurringAmount,
        currency: contract.currency,
        cancellation_type: contract.cancellation?.type ?? null,
        cancellation_reason: contract.cancellation?.reason ?? null,
        cancellation_requested_at: contract.cancellation?.requestedAt ?? null,
        cancellation_effective_date: contract.cancellation?.effectiveDate ?? null,
      })
      .onConflict('service_id')
      .ignore();
  }

  async requestCancellation(requests: Array<{ serviceId: number; type: CancellationType; reason: string | null; effectiveDate: string }>): Promise<void> {
    await this.call();
    for (const r of requests) {
      await this.db('service_billing').where({ service_id: r.serviceId }).whereNull('cancellation_executed_at').update({
        cancellation_type: r.type,
        cancellation_reason: r.reason,
        cancellation_requested_at: this.db.fn.now(),
        cancellation_effective_date: r.effectiveDate,
      });
    }
  }

  async takeDueCancellations(today: string): Promise<number[]> {
    await this.call();
    const rows: Array<{ service_id: number }> = await this.db('service_billing')
      .where('cancellation_effective_date', '<=', today)
      .whereNull('cancellation_executed_at')
      .update({ cancellation_executed_at: this.db.fn.now() })
      .returning('service_id');
    return rows.map((r) => Number(r.service_id));
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

  private invoiceBase(order: BillableOrder) {
    const subtotal = cents(order.price);
    const discount = Math.round((subtotal * order.percentOff) / 100);
    return {
      account_id: order.accountId,
      order_id: order.orderId,
      currency: order.currency,
      subtotal: money(subtotal),
      discount: money(discount),
      total: money(subtotal - discount),
    };
  }
}
