import { ApplicationFailure } from '@temporalio/activity';
import type { Knex } from 'knex';
import { formatId } from '../../common/ids';
import { moveServiceStatus, presentService, type ServiceRow } from '../../domain/services';
import { toOperationInvoice } from '../../domain/orders/orders';
import type { OperationInvoice } from '../../providers/billing.provider';
import { billableOrder, createOrderServices, followInvoice, getOrderById, type OrderStatus } from '../../domain/orders/store';
import type { Providers } from '../../providers';
import { provisionTargetOf, type ProvisionTarget, type ProvisionerRegistry } from '../../domain/provisioning';
import { BackendUnavailableError } from '../../providers/errors';
import type { Logger } from '../../common/logger';
import type { OperationTransitions } from '../../domain/operations/transitions';

export interface OrderPaymentState {
  order: { id: string; status: OrderStatus };
  invoice: OperationInvoice;
}

/** Activities of the `orders.create` workflow. Each is idempotent (Temporal retries them). */
export function createOrderActivities({
  db,
  providers,
  provisioners,
  operations,
  logger,
}: {
  db: Knex;
  providers: Providers;
  provisioners: ProvisionerRegistry;
  operations: Pick<OperationTransitions, 'attachService'>;
  logger: Logger;
}) {
  const { billing } = providers;

  async function provisionTarget(serviceId: number): Promise<ProvisionTarget> {
    const target = await provisionTargetOf(db, serviceId);
    if (!target) throw new Error(`service ${serviceId} does not exist`);
    return target;
  }

  /** Issues (or re-reads) the order's invoice and brings the order's status in line with it. */
  async function paymentState(orderId: number, issue: boolean): Promise<OrderPaymentState> {
    const order = await getOrderById(db, orderId);
    // Taken back with its operation when the workflow's start timed out: a run that starts anyway
    // fails for good here instead of retrying for ever (nothing was issued or charged).
    if (!order)
      throw ApplicationFailure.create({ message: `order ${orderId} does not exist: its request was given up`, type: 'OrderGone', nonRetryable: true });
    const invoice = issue ? await billing.issueInvoice(billableOrder(order)) : await billing.getInvoiceForOrder(orderId);
    if (!invoice) throw new Error(`order ${orderId} has no invoice yet`);
    const current = (await followInvoice(db, orderId, invoice))!;
    return { order: { id: formatId('ord', current.id), status: current.status }, invoice: toOperationInvoice(invoice) };
  }

  return {
    /** Issues the order's invoice (settled at once when free, 100 % off or covered by credit). */
    async placeOrder(orderId: number): Promise<OrderPaymentState> {
      return paymentState(orderId, true);
    },

    /** Reads whether the invoice has been paid or the order cancelled. */
    async readOrderPayment(orderId: number): Promise<OrderPaymentState> {
      return paymentState(orderId, false);
    },

    /** Creates the order's services in `pending` (once); the order's operation then follows the service's visibility. */
    async createOrderServices(orderId: number): Promise<number[]> {
      const ids = await createOrderServices(db, billing, orderId);
      const order = await getOrderById(db, orderId);
      // The order's operation now belongs to its service: visibility of both follows the service's.
      if (order && ids.length > 0) await operations.attachService(order.operation_id, ids[0]);
      return ids;
    },

    /** Asks the family's provisioner to build the service; false while its backend does not answer. */
    async startProvisioning(serviceId: number): Promise<boolean> {
      const target = await provisionTarget(serviceId);
      try {
        await provisioners.for(target.productFamily).provision(target);
        return true;
      } catch (err) {
        if (err instanceof BackendUnavailableError) {
          logger.warn({ service: serviceId, backend: err.family }, 'provisioning backend unavailable; will retry');
          return false;
        }
        throw err;
      }
    },

    /** True once the provisioner reports the service active; false while it does not (or cannot answer). */
    async checkServiceActive(serviceId: number): Promise<boolean> {
      const target = await provisionTarget(serviceId);
      try {
        return await provisioners.for(target.productFamily).isActive(target);
      } catch (err) {
        if (err instanceof BackendUnavailableError) return false;
        throw err;
      }
    },

    /**
     * First activation: `pending` -> `active` with the `service.active` event (once: a service that
     * already moved on, e.g. billing suspended it meanwhile, is left as it is). Returns the Service.
     */
    async activateService(serviceId: number) {
      const row: ServiceRow = await db.transaction(async (trx) => {
        const current = await trx('services').where({ id: serviceId }).forUpdate().first();
        if (!current) throw new Error(`service ${serviceId} does not exist`);
        if (current.status !== 'pending') return current;
        return moveServiceStatus(db, serviceId, 'active', trx);
      });
      return presentService(row);
    },
  };
}

export type OrderActivities = ReturnType<typeof createOrderActivities>;
