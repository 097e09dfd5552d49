import { condition, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import type { OrderActivities, OrderPaymentState } from '../../activities/orders/activities';
import { OperationTracker, type OperationInput } from '../kit/operation';
import { orderCancelledSignal, orderInvoicePaidSignal } from './signals';

export interface OrderWorkflowInput extends OperationInput {
  /** Numeric order id (`ord_<n>`). */
  orderId: number;
  /** ORDER_ACTIVATION_TIMEOUT: how long an accepted order may take to become active. */
  activationTimeoutMs: number;
  /**
   * While waiting for payment the workflow also re-reads the invoice this often, so that a payment
   * whose signal was lost is still noticed. Not a timeout: the wait itself has none.
   */
  paymentRecheckMs?: number;
}

const DEFAULT_PAYMENT_RECHECK_MS = 6 * 3_600_000;
const FIRST_POLL_MS = 2_000;
const MAX_POLL_MS = 60_000;

const billing = proxyActivities<OrderActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumInterval: '1 minute' },
});

const provisioning = proxyActivities<OrderActivities>({
  startToCloseTimeout: '2 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

function describeMs(ms: number): string {
  if (ms % 60_000 === 0) return `${ms / 60_000} minutes`;
  if (ms % 1_000 === 0) return `${ms / 1_000} seconds`;
  return `${ms} ms`;
}

/**
 * `orders.create`: issue the invoice; if it is not settled at once, stay `pending` (with
 * `result.invoice.payment_url`) until it is paid or the order is cancelled, with no timeout. Once
 * paid: `running`, create the service and provision it through the family's provisioner; succeed
 * with `result.service` when it is active, or fail with `provisioning_timeout` after
 * `activationTimeoutMs`.
 */
export async function orderWorkflow(input: OrderWorkflowInput): Promise<void> {
  const orderRef = `ord_${input.orderId}`;
  const op = new OperationTracker(input.operationId, { status: 'pending', result: { order: { id: orderRef, status: 'pending' }, invoice: null } });
  let woken = false;
  setHandler(orderInvoicePaidSignal, () => {
    woken = true;
  });
  setHandler(orderCancelledSignal, () => {
    woken = true;
  });

  let state: OrderPaymentState = await billing.placeOrder(input.orderId);
  if (state.invoice.status === 'unpaid') {
    await op.update({ status: 'pending', result: { ...state } });
    while (state.invoice.status === 'unpaid') {
      await condition(() => woken, input.paymentRecheckMs ?? DEFAULT_PAYMENT_RECHECK_MS);
      woken = false;
      state = await billing.readOrderPayment(input.orderId);
    }
  }

  if (state.invoice.status !== 'paid') {
    await op.fail({ code: 'order_cancelled', message: 'The order was cancelled before its invoice was paid; the invoice is void.' }, { ...state });
    return;
  }

  await op.update({ status: 'running', progress: 10, result: { ...state } });
  let timedOut = false;
  void sleep(input.activationTimeoutMs).then(() => {
    timedOut = true;
  });

  const [serviceId] = await billing.createOrderServices(input.orderId);
  await op.progress(20);
  let provisioned = false;
  let pollMs = FIRST_POLL_MS;
  while (!timedOut) {
    if (!provisioned) {
      provisioned = await provisioning.startProvisioning(serviceId);
      if (provisioned) await op.progress(40);
    }
    if (provisioned && (await provisioning.checkServiceActive(serviceId))) {
      const service = await billing.activateService(serviceId);
      await op.succeed({ ...state, service });
      return;
    }
    if (await condition(() => timedOut, pollMs)) break;
    pollMs = Math.min(Math.round(pollMs * 1.5), MAX_POLL_MS);
  }
  await op.fail(
    {
      code: 'provisioning_timeout',
      message: `The service svc_${serviceId} did not become active within ${describeMs(input.activationTimeoutMs)} of the order being accepted.`,
    },
    { ...state },
  );
}
