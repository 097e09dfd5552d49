import { CancellationScope, condition, isCancellation, patched, proxyActivities, setHandler, sleep } from '@temporalio/workflow';
import type { OrderActivities, OrderPaymentState } from '../../activities/orders/activities';
import { OperationTracker, type OperationInput } from '../kit/operation';
import { onHost, placement, whenHostAnswers, type HostWait } from '../kit/hosts';
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
/**
 * Runs started since this patch cut a provisioning call short when the activation timeout fires:
 * before, the timeout was only looked at between calls, so a provisioner that kept failing (retried
 * without end) kept the order `running` for ever. Runs started before it keep the old path.
 */
const TIMEOUT_CUTS_PROVISIONING_CALLS = 'order-activation-timeout-cuts-provisioning-calls';
/**
 * Runs started since this patch place the service on a host first (when its family's servers run on
 * hosts) and provision it there, through the host's task queue (docs/hosts.md); while that host is
 * down the order says so in `result.waiting` and resumes when it is back.
 */
const PROVISIONS_ON_ITS_HOST = 'order-provisions-on-the-service-host';
const FIRST_POLL_MS = 2_000;
const MAX_POLL_MS = 60_000;

const billing = proxyActivities<OrderActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumInterval: '1 minute' },
});

const PROVISIONING = { startToCloseTimeout: '2 minutes', retry: { initialInterval: '1 second', maximumInterval: '30 seconds' } } as const;
const provisioning = proxyActivities<OrderActivities>(PROVISIONING);

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
  const timeoutCutsCalls = patched(TIMEOUT_CUTS_PROVISIONING_CALLS);
  // Provisioning runs in a scope of its own, which the activation timeout cancels: the workflow then
  // stops waiting for a call still running or still being retried (the call itself is not told: it
  // does not heartbeat). Billing's calls stay outside it (a billing outage is waited out,
  // docs/orders.md), and so does the activation of a service found active.
  const provisioningScope = new CancellationScope();
  let timedOut = false;
  void sleep(input.activationTimeoutMs).then(() => {
    timedOut = true;
    if (timeoutCutsCalls) provisioningScope.cancel();
  });

  const [serviceId] = await billing.createOrderServices(input.orderId);
  await op.progress(20);
  const onItsHost = patched(PROVISIONS_ON_ITS_HOST);
  // The host the service is placed on (null: its family runs on no host), and its activities there.
  let host: string | null | undefined;
  let provisioner = provisioning;
  const tell = (wait: HostWait | null) => op.update({ result: wait ? { ...state, waiting: wait } : { ...state } });
  const onHostWhenUp = <T>(call: () => Promise<T>) => (onItsHost ? whenHostAnswers(host ?? null, tell, call) : call());
  /** True once the service is active; false when the activation timeout came first. */
  const provisionUntilActive = async (): Promise<boolean> => {
    let provisioned = false;
    let pollMs = FIRST_POLL_MS;
    while (!timedOut) {
      if (onItsHost && host === undefined) {
        host = (await placement.placeService(serviceId)).host;
        provisioner = onHost<OrderActivities>(host, PROVISIONING);
      }
      if (!provisioned) {
        provisioned = await onHostWhenUp(() => provisioner.startProvisioning(serviceId));
        // Not cut short: a progress write cancelled in flight could land after the failure.
        if (provisioned) await (timeoutCutsCalls ? CancellationScope.nonCancellable(() => op.progress(40)) : op.progress(40));
      }
      if (provisioned && (await onHostWhenUp(() => provisioner.checkServiceActive(serviceId)))) return true;
      if (await condition(() => timedOut, pollMs)) return false;
      pollMs = Math.min(Math.round(pollMs * 1.5), MAX_POLL_MS);
    }
    return false;
  };
  let active: boolean;
  if (!timeoutCutsCalls) active = await provisionUntilActive();
  else {
    try {
      active = await provisioningScope.run(provisionUntilActive);
    } catch (err) {
      // Only the timeout's own cancellation means "timed out"; a cancelled workflow stays cancelled.
      if (!isCancellation(err) || !timedOut) throw err;
      active = false;
    }
  }
  if (active) {
    const service = await billing.activateService(serviceId);
    await op.succeed({ ...state, service });
    return;
  }
  await op.fail(
    {
      code: 'provisioning_timeout',
      message: `The service svc_${serviceId} did not become active within ${describeMs(input.activationTimeoutMs)} of the order being accepted.`,
    },
    { ...state },
  );
}
