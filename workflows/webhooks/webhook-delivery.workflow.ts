import { ActivityFailure, proxyActivities, proxyLocalActivities, sleep } from '@temporalio/workflow';
import type { WebhookActivities } from '../../activities/webhooks/activities';
import type { WebhookDeliveryInput } from '../../domain/webhooks/webhooks';

/**
 * One delivery of one event to one webhook (workflow id = delivery id `dlv_<ulid>`). Attempt, and on
 * failure sleep the next delay of the schedule (WEBHOOK_RETRY_DELAYS, passed in the input) before
 * trying again with the same body and a fresh signature; after delays + 1 failed attempts the
 * delivery is failed. The waits are workflow timers, so the schedule shows in the history, survives
 * worker restarts and is time-skippable in tests. Each attempt records itself on the delivery row.
 */
export type WebhookDeliveryResult = 'delivered' | 'failed' | 'dropped';

export async function webhookDeliveryWorkflow(input: WebhookDeliveryInput): Promise<WebhookDeliveryResult> {
  // One HTTP attempt per activity: it catches HTTP failures itself; activity retries only cover
  // infrastructure errors (database briefly away, worker lost mid-attempt), and only a few times.
  // A local activity: it runs inside the workflow task (one marker in the history instead of three
  // activity events and two task dispatches), which keeps the server's work per delivery small.
  const { attemptWebhookDelivery } = proxyLocalActivities<WebhookActivities>({
    startToCloseTimeout: input.timeoutMs + 20_000,
    retry: { maximumAttempts: 3, initialInterval: '2 seconds', backoffCoefficient: 2 },
  });
  const { markWebhookDeliveryFailed } = proxyActivities<WebhookActivities>({
    startToCloseTimeout: '30 seconds',
    retry: { initialInterval: '2 seconds', maximumInterval: '1 minute' },
  });

  const maxAttempts = input.retryDelaysMs.length + 1;
  let lastError = 'no attempt could be recorded';
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
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
