import type { ServiceFamily } from '../../common/families';
import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import { iso } from '../../common/time';
import { getOrder, type OrderRecord } from './store';
import type { InvoiceView, OperationInvoice, ProductOption, ProductRecord, ServiceBillingView } from '../../providers/billing.provider';
import type { FieldError } from '../errors';
import { canSeeService, type Principal } from '../principal';
import { presentService, type ServiceRow } from '../services';

/**
 * Orders: presentation of products, orders and their invoices, and the validation of a product's
 * options. The state itself lives behind the billing provider (providers/billing.provider.ts).
 */

export function presentProduct(p: ProductRecord) {
  return {
    object: 'product' as const,
    product: p.slug,
    name: p.name,
    description: p.description,
    family: p.family as ServiceFamily,
    product_family: p.product_family,
    prices: p.prices,
    options: p.options_schema,
    requires_site_name: p.requires_site_name,
    capabilities: p.capabilities,
  };
}

export const toOperationInvoice = (invoice: InvoiceView): OperationInvoice => ({
  id: invoice.id,
  status: invoice.status,
  total: invoice.total,
  currency: invoice.currency,
  payment_url: invoice.payment_url,
});

export function presentOrder(order: OrderRecord, invoice: InvoiceView | null, services: Array<{ row: ServiceRow; billing: ServiceBillingView }>) {
  return {
    object: 'order' as const,
    id: formatId('ord', order.id),
    status: order.status,
    product: order.product,
    billing_cycle: order.billing_cycle,
    options: order.options ?? {},
    promo_code: order.promo_code,
    site_name: order.site_name,
    payment_method: order.payment_method,
    currency: order.currency,
    operation: order.operation_id,
    invoice,
    services: services.map(({ row, billing }) => ({
      ...presentService(row),
      recurring_amount: billing.recurring_amount,
      currency: billing.currency,
      cancellation: billing.cancellation,
    })),
    cancellation: order.cancellation_type
      ? { type: order.cancellation_type, reason: order.cancellation_reason, requested_at: iso(order.cancellation_requested_at) }
      : null,
    created_at: iso(order.created_at),
    paid_at: iso(order.paid_at),
    cancelled_at: iso(order.cancelled_at),
  };
}

export type OrderView = ReturnType<typeof presentOrder>;

/**
 * Whether a credential may see an order: every service the order created must be visible to it
 * (key allowlist, the user's per-service permissions). An order that has not created a service yet
 * is visible to every credential of the account that may read orders. Invisible is `404`.
 */
export function canSeeOrder(principal: Principal, serviceIds: number[]): boolean {
  return serviceIds.every((id) => canSeeService(principal, id));
}

/** The order if the principal may see it (its account, its services), else null. */
export async function findVisibleOrder(
  db: Knex,
  billing: { servicesOfOrders(ids: number[]): Promise<Map<number, ServiceBillingView[]>> },
  principal: Principal,
  orderId: number,
): Promise<OrderRecord | null> {
  const order = await getOrder(db, principal.accountId, orderId);
  if (!order) return null;
  const services = (await billing.servicesOfOrders([orderId])).get(orderId) ?? [];
  return canSeeOrder(
    principal,
    services.map((s) => s.service_id),
  )
    ? order
    : null;
}

/**
 * Loads invoices and created services of some orders and presents those the principal may see
 * (canSeeOrder): an order with a service the credential cannot see is left out entirely.
 */
export async function presentOrders(
  db: Knex,
  billing: {
    invoicesForOrders(ids: number[]): Promise<Map<number, InvoiceView>>;
    servicesOfOrders(ids: number[]): Promise<Map<number, ServiceBillingView[]>>;
  },
  principal: Principal,
  orders: OrderRecord[],
): Promise<OrderView[]> {
  const ids = orders.map((o) => Number(o.id));
  const [invoices, billingByOrder] = await Promise.all([billing.invoicesForOrders(ids), billing.servicesOfOrders(ids)]);
  const serviceIds = [...billingByOrder.values()].flat().map((b) => b.service_id);
  const rows: ServiceRow[] = serviceIds.length ? await db('services').whereIn('id', serviceIds) : [];
  const byId = new Map(rows.map((r) => [Number(r.id), r]));
  return orders
    .filter((order) =>
      canSeeOrder(
        principal,
        (billingByOrder.get(Number(order.id)) ?? []).map((b) => b.service_id),
      ),
    )
    .map((order) =>
      presentOrder(
        order,
        invoices.get(Number(order.id)) ?? null,
        (billingByOrder.get(Number(order.id)) ?? []).filter((b) => byId.has(b.service_id)).map((b) => ({ row: byId.get(b.service_id)!, billing: b })),
      ),
    );
}

/**
 * Checks an order's `options` against the product's option definitions: unknown names, types,
 * enum values, bounds and patterns. Returns the options with defaults filled in, or the errors
 * (params in dot notation: `options.os`).
 */
export function validateOptions(schema: ProductOption[], input: Record<string, unknown>): { options: Record<string, unknown>; errors: FieldError[] } {
  const errors: FieldError[] = [];
  const options: Record<string, unknown> = {};
  const known = new Map(schema.map((o) => [o.name, o]));
  for (const name of Object.keys(input)) {
    if (!known.has(name)) {
      errors.push({
        param: `options.${name}`,
        message: schema.length ? `is not an option of this product (options: ${schema.map((o) => o.name).join(', ')})` : 'this product takes no options',
      });
    }
  }
  for (const def of schema) {
    const param = `options.${def.name}`;
    const value = input[def.name];
    if (value === undefined || value === null) {
      if (def.required && (def.default === undefined || def.default === null)) errors.push({ param, message: 'is required' });
      else if (def.default !== undefined && def.default !== null) options[def.name] = def.default;
      continue;
    }
    switch (def.type) {
      case 'enum':
        if (typeof value !== 'string' || !(def.values ?? []).includes(value)) {
          errors.push({ param, message: `must be one of: ${(def.values ?? []).join(', ')}` });
          continue;
        }
        break;
      case 'integer':
        if (typeof value !== 'number' || !Number.isInteger(value)) {
          errors.push({ param, message: 'must be an integer' });
          continue;
        }
        if (def.min !== undefined && value < def.min) {
          errors.push({ param, message: `must be at least ${def.min}` });
          continue;
        }
        if (def.max !== undefined && value > def.max) {
          errors.push({ param, message: `must be at most ${def.max}` });
          continue;
        }
        break;
      case 'boolean':
        if (typeof value !== 'boolean') {
          errors.push({ param, message: 'must be true or false' });
          continue;
        }
        break;
      case 'string':
        if (typeof value !== 'string' || value.length === 0 || value.length > 255) {
          errors.push({ param, message: 'must be a string of 1 to 255 characters' });
          continue;
        }
        if (def.pattern && !new RegExp(def.pattern).test(value)) {
          errors.push({ param, message: `has an invalid format (${def.description ?? def.pattern})` });
          continue;
        }
        break;
    }
    options[def.name] = value;
  }
  return { options, errors };
}

/**
 * Voids the order an `orders.create` operation recorded when that operation is closed because no
 * workflow ever ran it (the orphan sweeper): an order still pending with no invoice is cancelled
 * and gives its promo code use back. Billing never saw it (the workflow issues the invoice).
 */
export async function voidOrderOfAbandonedOperation(trx: Knex.Transaction, operationId: string): Promise<void> {
  const order = await trx('orders').where({ operation_id: operationId }).forUpdate().first();
  if (!order || order.status !== 'pending') return;
  if (await trx('invoices').where({ order_id: order.id }).first()) return;
  await trx('orders').where({ id: order.id }).update({ status: 'cancelled', cancelled_at: trx.fn.now(), updated_at: trx.fn.now() });
  if (order.promo_code) await trx('promo_codes').where({ code: order.promo_code }).where('uses', '>', 0).decrement('uses', 1);
}
