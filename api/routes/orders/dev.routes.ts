import { z } from 'zod';
import { formatId, parseNumericId } from '../../../common/ids';
import { followInvoice } from '../../../domain/orders/store';
import { orderInvoicePaidSignal } from '../../../workflows/orders/signals';
import { conflict, notFound } from '../../../domain/errors';
import { defineDevRoute } from '../../route';

/**
 * Local stand-in for the control panel's "pay invoice" (DECISIONS "Local development stand-ins").
 * Mounted only with CLOUD_DEV_ENDPOINTS=1 and answered only from loopback.
 */
export const orderDevRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/invoices/{id}/pay',
    operationId: 'devPayInvoice',
    summary: 'The customer pays an invoice in the panel',
    params: z.object({ id: z.string() }),
    responses: [{ status: 200, description: 'The paid invoice' }],
    async handler({ params, deps }) {
      const id = parseNumericId('inv', params.id);
      const paid = id === null ? null : await deps.providers.billing.payInvoice(id);
      if (!paid) throw notFound('invoice');
      if (paid.invoice.status === 'cancelled') throw conflict('The invoice was voided with its order; it cannot be paid.');
      const order = (await followInvoice(deps.db, paid.orderId, paid.invoice))!;
      // Payment is committed; the signal wakes the order workflow (which also re-reads it periodically).
      await deps.temporal
        .handle(order.operation_id)
        .signal(orderInvoicePaidSignal)
        .catch((err: Error) => deps.logger.warn({ invoice: params.id, err: err.message }, 'could not signal the order workflow'));
      return { body: { ...paid.invoice, order: formatId('ord', order.id), operation: order.operation_id } };
    },
  }),
];
