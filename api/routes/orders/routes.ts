import { z } from 'zod';
import { parseNumericId } from '../../../common/ids';
import { findVisibleOrder, presentOrders, presentProduct } from '../../../domain/orders/orders';
import { accountCurrency, placeOrder } from '../../../domain/orders/place';
import { cancelOrder, listOrders } from '../../../domain/orders/store';
import { orderCancelledSignal } from '../../../workflows/orders/signals';
import type { AppDeps } from '../../deps';
import { notFound, validationFailed } from '../../../domain/errors';
import { listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { OperationSchema, idParam, listOf } from '../../schemas';

import { CancelOrderBody, CreateOrderBody, FAMILY_FILTER, OrderSchema, PaymentMethodSchema, PRODUCTS_PAGE_DEFAULT, ProductSchema } from './schemas';
/**
 * Orders (SPEC "Orders", DECISIONS "Orders"): the catalog, payment methods, placing an order (an
 * `orders.create` operation, domain/orders/place.ts), reading and cancelling orders. Static paths
 * come before `{id}`.
 */

function decodeKey(deps: AppDeps, list: string, cursor: string | undefined): number | undefined {
  if (cursor === undefined) return undefined;
  const key = deps.cursors.decode(list, cursor);
  if (typeof key !== 'number') throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
  return key;
}

export const orderRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/orders/products',
    operationId: 'listOrderProducts',
    summary: 'List the orderable catalog',
    description:
      'Products in the account currency with their `prices` per billing cycle actually sold and their `options`. Hidden and retired products are not listed. `limit` defaults to 100 here. `family` matches the Service family (`other` included) or the catalog family (`wordpress`, `images`, `serverless`).',
    tag: 'Orders',
    scope: 'orders:read',
    marks: [],
    query: z.object({ ...paginationQuery(PRODUCTS_PAGE_DEFAULT), family: z.enum(FAMILY_FILTER).optional() }),
    responses: [{ status: 200, description: 'A page of products, newest first', schema: listOf(ProductSchema, 'ProductList') }],
    async handler({ query, principal, deps }) {
      const currency = await accountCurrency(deps.db, principal.accountId);
      const list = listFingerprint('orders.products', { family: query.family, currency });
      const before = decodeKey(deps, list, query.cursor);
      const page = await deps.providers.billing.listProducts({ currency, family: query.family, limit: query.limit, before });
      const last = page.items[page.items.length - 1];
      const nextCursor = page.hasMore && last ? deps.cursors.encode(list, Number(last.id)) : null;
      return { body: listEnvelope(page.items.map(presentProduct), { hasMore: page.hasMore, nextCursor }) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/orders/payment-methods',
    operationId: 'listPaymentMethods',
    summary: 'List the payment methods accepted as `payment_method`',
    description:
      'One is flagged `default` (used when an order names none). An invoice not settled by account credit stays pending until it is paid through the panel.',
    tag: 'Orders',
    scope: 'orders:read',
    marks: [],
    responses: [{ status: 200, description: 'Every payment method (one page)', schema: listOf(PaymentMethodSchema, 'PaymentMethodList') }],
    async handler({ deps }) {
      const methods = await deps.providers.billing.listPaymentMethods();
      return { body: listEnvelope(methods, { hasMore: false, nextCursor: null }) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/orders',
    operationId: 'createOrder',
    summary: 'Place an order',
    description:
      'Requires `Idempotency-Key`. Validated before billing: an unknown or retired product, an unsold cycle, bad options or an unknown payment method are `400 validation_failed`; `invalid_promocode`; `hostname_taken` for a taken site name, or for a DNS zone that another service or live order holds, that contains or lies inside a zone of another account, or that overlaps a name the platform reserves (`DNS_RESERVED_ZONES`, the domains of its name servers); a zone that is a public suffix (`co.uk`, `github.io`) is `validation_failed`. Answers 202 with an `orders.create` operation: `running` when the invoice is settled at once (free, 100 % promo, account credit); otherwise `pending` with `result.invoice.payment_url` until paid (no timeout). It succeeds with `result.service` once the service is active, or fails with `provisioning_timeout` (30 min) or `order_cancelled`.',
    tag: 'Orders',
    scope: 'orders:write',
    marks: ['R', 'A', 'I'],
    idempotencyKey: 'required',
    body: CreateOrderBody,
    exampleBody: { product: 'dns-zone', billing_cycle: 'monthly', options: { zone: 'example.org' } },
    responses: [{ status: 202, description: 'The `orders.create` operation (Location: /v1/operations/{id})', schema: OperationSchema }],
    async handler({ body, principal, deps }) {
      const op = await placeOrder(deps, principal, body);
      return { status: 202, headers: { Location: `/v1/operations/${op.id}` }, body: op };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/orders',
    operationId: 'listOrders',
    summary: "List the account's orders",
    description:
      "Newest first, with each order's invoice and created services. Filter by `status`. Orders whose service the credential cannot see are left out, so a page may hold fewer than `limit` orders while `has_more` is true.",
    tag: 'Orders',
    scope: 'orders:read',
    marks: [],
    query: z.object({ ...paginationQuery(), status: z.enum(['pending', 'active', 'cancelled']).optional() }),
    responses: [{ status: 200, description: 'A page of orders', schema: listOf(OrderSchema, 'OrderList') }],
    async handler({ query, principal, deps }) {
      const list = listFingerprint('orders', { status: query.status });
      const before = decodeKey(deps, list, query.cursor);
      const page = await listOrders(deps.db, { accountId: principal.accountId, status: query.status, limit: query.limit, before });
      const last = page.items[page.items.length - 1];
      const nextCursor = page.hasMore && last ? deps.cursors.encode(list, Number(last.id)) : null;
      const data = await presentOrders(deps.db, deps.providers.billing, principal, page.items);
      return { body: listEnvelope(data, { hasMore: page.hasMore, nextCursor }) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/orders/{id}',
    operationId: 'getOrder',
    summary: 'Get an order with its invoice and created services',
    description: "Another account's order, or one whose service the credential cannot see, is `404`.",
    tag: 'Orders',
    scope: 'orders:read',
    marks: [],
    params: z.object({ id: idParam('ord_1') }),
    responses: [{ status: 200, description: 'The order', schema: OrderSchema }],
    async handler({ params, principal, deps }) {
      const id = parseNumericId('ord', params.id);
      const order = id === null ? null : await findVisibleOrder(deps.db, deps.providers.billing, principal, id);
      if (!order) throw notFound('order');
      const [view] = await presentOrders(deps.db, deps.providers.billing, principal, [order]);
      return { body: view };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/orders/{id}/cancel',
    operationId: 'cancelOrder',
    summary: 'Cancel an order',
    description:
      'An order whose service the credential cannot see is `404`. An unpaid order is voided at once with its invoice, and its operation fails with `order_cancelled`. An active order gets a cancellation request per service (`type`: `immediate` or `end_of_cycle`, default `end_of_cycle`) that billing carries out; nothing is destroyed by this call. Cancelling again answers the order as it is.',
    tag: 'Orders',
    scope: 'orders:write',
    marks: ['D', 'I'],
    params: z.object({ id: idParam('ord_1') }),
    body: CancelOrderBody,
    exampleBody: { type: 'end_of_cycle' },
    responses: [{ status: 200, description: 'The order after the cancellation', schema: OrderSchema }],
    async handler({ params, body, principal, deps }) {
      const id = parseNumericId('ord', params.id);
      // An order whose service the credential cannot see is as missing as any invisible resource.
      const visible = id === null ? null : await findVisibleOrder(deps.db, deps.providers.billing, principal, id);
      const outcome =
        visible === null
          ? null
          : await cancelOrder(deps.db, deps.providers.billing, principal.accountId, Number(visible.id), { type: body.type, reason: body.reason ?? null });
      if (!outcome) throw notFound('order');
      if (outcome.kind === 'voided') {
        // The void is committed; the signal only spares the workflow its periodic re-read.
        await deps.temporal
          .handle(outcome.order.operation_id)
          .signal(orderCancelledSignal)
          .catch((err: Error) => deps.logger.warn({ order: id, err: err.message }, 'could not signal the order workflow'));
      }
      const [view] = await presentOrders(deps.db, deps.providers.billing, principal, [outcome.order]);
      return { body: view };
    },
  }),
];
