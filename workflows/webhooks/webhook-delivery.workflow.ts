import { ActivityFailure, patched, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';
import type { WebhookActivities } from '../../activities/webhooks/activities';
import type { WebhookDeliveryInput } from '../../domain/webhooks/webhooks';

/**
 * The previous design: one workflow per delivery (workflow id = delivery id `dlv_<ulid>`). Nothing
 * starts it any more; it stays registered so that runs in flight when the endpoint workflow
 * (webhook-endpoint.workflow.ts) replaced it still finish. Such a run hands its delivery over to its
 * endpoint's workflow at its next attempt, with the attempt number it had reached (the
 * `webhook-delivery-to-endpoint` patch), so the rest of its schedule runs there; replaying a history
 * from before the patch takes the old path. Once no run from before the patch can be open (the
 * longest wait of the schedule after the deploy), deprecate the patch, then remove this workflow.
 */
export type WebhookDeliveryResult = 'delivered' | 'failed' | 'dropped' | 'handed-over';

export const HAND_OVER_PATCH = 'webhook-delivery-to-endpoint';

export async function webhookDeliveryWorkflow(input: WebhookDeliveryInput): Promise<WebhookDeliveryResult> {
  // One HTTP attempt per activity: it catches HTTP failures itself; activity retries only cover
  // infrastructure errors (database briefly away, worker lost mid-attempt), and only a few times.
  const { attemptWebhookDelivery } = proxyLocalActivities<WebhookActivities>({
    startToCloseTimeout: input.timeoutMs + 20_000,
    retry: { maximumAttempts: 3, initialInterval: '2 seconds', backoffCoefficient: 2 },
  });
  const { markWebhookDeliveryFailed, handOverWebhookDelivery } = proxyActivities<WebhookActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '2 seconds', maximumInterval: '1 minute' },
  });

  const maxAttempts = input.retryDelaysMs.length + 1;
  let lastError = 'no attempt could be recorded';
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    if (patched(HAND_OVER_PATCH)) {
      return handOverWebhookDelivery({ deliveryId: input.deliveryId, attempt });
    }
    const nextDelayMs = attempt < maxAttempts ? input.retryDelaysMs[attempt - 1] : null;
    try {
      const result = await attemptWebhookDelivery({ deliveryId: input.deliveryId, attempt, nextDelayMs, timeoutMs: input.timeoutMs });
      if (result.outcome !== 'retry') return result.outcome;
    } catch (err) {
      if (!(err instanceof ActivityFailure)) throw err;
      lastError = `attempt ${attempt} could not run: ${err.cause?.message ?? err.message}`;
    }
    if (nextDelayMs !== null) await sleep(nextDelayMs);
  }
  await markWebhookDeliveryFailed({ deliveryId: input.deliveryId, error: lastError });
  return 'failed';
}
