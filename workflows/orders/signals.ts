import { defineSignal } from '@temporalio/workflow';

/**
 * Signals of the `orders.create` workflow (workflow id = operation id). Both carry no payload: the
 * workflow reads the order's state from billing after each, so a lost or repeated signal is harmless.
 */
/** The order's invoice was paid in the panel (POST /_dev/invoices/{id}/pay locally). */
export const orderInvoicePaidSignal = defineSignal('orderInvoicePaid');
/** POST /v1/orders/{id}/cancel voided the unpaid order. */
export const orderCancelledSignal = defineSignal('orderCancelled');
