import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { formatId } from '../../common/ids';
import type { Providers } from '../../providers';
import type { BillingCycle } from '../../providers/billing.provider';
import { DomainError, validationFailed, type FieldError } from '../errors';
import type { OperationService } from '../operations';
import type { OperationView } from '../operations/contract';
import type { Principal } from '../principal';
import type { ProvisionerRegistry } from '../provisioning';
import { validateOptions } from './orders';
import { createOrder, isSiteNameTaken, withdrawOrder } from './store';

/** The body of POST /v1/orders, as its schema (api/routes/orders/schemas.ts) lets it through. */
export interface OrderRequest {
  product: string;
  billing_cycle?: BillingCycle;
  options?: Record<string, unknown>;
  promo_code?: string;
  site_name?: string;
  payment_method?: string;
}

/** What placing an order needs: the catalog (billing), the family provisioners' order hooks, operations. */
export interface OrderDeps {
  db: Knex;
  config: Config;
  providers: Providers;
  operations: OperationService;
  /** Every family's provisioner (families/<family>.ts, built at start: the domain does not import the manifests). */
  provisioners: Pick<ProvisionerRegistry, 'for'>;
}

/** The `orders.create` operation as the 202 shows it: `result` already names the pending order. */
export type PlacedOrder = OperationView & { result: { order: { id: string; status: 'pending' }; invoice: null } };

/** The account's currency: the catalog's prices are read in it. */
export async function accountCurrency(db: Knex, accountId: number): Promise<string> {
  const account = await db('accounts').where({ id: accountId }).first();
  return account?.currency ?? 'EUR';
}

const invalidPromo = (reason?: string) =>
  new DomainError(400, 'invalid_request_error', 'invalid_promocode', `The promo code ${reason ?? 'is not valid'}.`, 'promo_code');
const hostnameTaken = (siteName: string | undefined) =>
  new DomainError(400, 'invalid_request_error', 'hostname_taken', `The site name "${siteName}" is already taken.`, 'site_name');

/**
 * Places an order (SPEC "Orders", DECISIONS "Orders"): everything is validated before billing sees
 * it (product, cycle, options, site name, payment method, the family's own checks, promo code), then
 * the order row is written in the `orders.create` operation's transaction. A family checks its own
 * options through its provisioner's `prepareOrder` hook (a DNS zone is normalised and refused while
 * held); this code names no family.
 */
export async function placeOrder(deps: OrderDeps, principal: Principal, request: OrderRequest): Promise<PlacedOrder> {
  const { billing } = deps.providers;
  const currency = await accountCurrency(deps.db, principal.accountId);
  const product = await billing.getProduct(request.product, currency);
  if (!product || product.retired) throw validationFailed([{ param: 'product', message: `"${request.product}" is not an orderable product` }]);
  const sold = Object.keys(product.prices) as BillingCycle[];
  if (sold.length === 0) throw validationFailed([{ param: 'product', message: `"${request.product}" is not sold in ${currency}` }]);
  const cycle: BillingCycle = request.billing_cycle ?? (sold.includes('monthly') ? 'monthly' : sold[0]);

  const errors: FieldError[] = [];
  if (!sold.includes(cycle)) errors.push({ param: 'billing_cycle', message: `is not sold for "${product.slug}" (sold: ${sold.join(', ')})` });
  const checked = validateOptions(product.options_schema, request.options ?? {});
  errors.push(...checked.errors);
  if (product.requires_site_name && !request.site_name) errors.push({ param: 'site_name', message: 'is required for this product' });
  if (!product.requires_site_name && request.site_name) errors.push({ param: 'site_name', message: 'this product takes no site_name' });
  const methods = await billing.listPaymentMethods();
  if (request.payment_method && !methods.some((m) => m.id === request.payment_method)) {
    errors.push({ param: 'payment_method', message: `must be one of: ${methods.map((m) => m.id).join(', ')}` });
  }
  if (errors.length) throw validationFailed(errors);

  // The family's own checks (a zone is normalised and refused while held), with what it must check
  // again where the order is written.
  // (Called on the provisioner, not detached from it: the hook reads the provisioner's settings.)
  const provisioner = deps.provisioners.for(product.product_family);
  const prepared = provisioner.prepareOrder
    ? await provisioner.prepareOrder(deps.db, checked.options, { id: principal.accountId }, { slug: product.slug })
    : { options: checked.options };

  if (request.promo_code) {
    const promo = await billing.checkPromo(request.promo_code, product, cycle);
    if (!promo.ok) throw invalidPromo(promo.reason);
  }
  if (request.site_name && (await isSiteNameTaken(deps.db, request.site_name))) throw hostnameTaken(request.site_name);
  const paymentMethod = request.payment_method ?? (methods.find((m) => m.default) ?? methods[0]).id;

  // The order id is taken up front so that the operation row, its resource and the workflow input
  // all name it; the order row is written in the operation's transaction.
  const seq = await deps.db.raw(`select nextval(pg_get_serial_sequence('orders', 'id')) as id`);
  const orderId = Number(seq.rows[0].id);
  const orderRef = formatId('ord', orderId);
  const initialResult = { order: { id: orderRef, status: 'pending' as const }, invoice: null };
  const op = await deps.operations
    .start({
      principal,
      type: 'orders.create',
      workflow: 'orderWorkflow',
      input: { orderId, activationTimeoutMs: deps.config.ORDER_ACTIVATION_TIMEOUT },
      resource: { object: 'order', id: orderRef },
      initialStatus: 'pending',
      async inTransaction(trx, operationId) {
        await prepared.hold?.(trx);
        const created = await createOrder(trx, billing, {
          id: orderId,
          accountId: principal.accountId,
          operationId,
          product,
          billingCycle: cycle,
          options: prepared.options,
          promoCode: request.promo_code ?? null,
          siteName: request.site_name ?? null,
          paymentMethod,
          currency,
          credentialId: principal.credentialId,
        });
        if ('refused' in created) {
          // Checked again inside the transaction: another order took the name or the last promo use meanwhile.
          if (created.refused === 'site_name') throw hostnameTaken(request.site_name);
          throw invalidPromo(created.reason);
        }
        await trx('operations')
          .where({ id: operationId })
          .update({ result: JSON.stringify(initialResult) });
      },
    })
    .catch(async (err: unknown) => {
      // The operation could not start (Temporal did not answer): take the order back too.
      if (err instanceof DomainError && err.code === 'backend_unavailable') await withdrawOrder(deps.db, billing, orderId);
      throw err;
    });
  return { ...op, result: initialResult };
}
