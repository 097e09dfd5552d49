import { readFileSync } from 'node:fs';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import type { Logger } from '../../common/logger';
import type { Db } from '../../db/knex';
import { DeliveryClient } from '../../domain/webhooks/delivery-client';
import { signPayload } from '../../domain/webhooks/signature';
import { WEBHOOK_SECRET_PURPOSE, type DeliveryRow } from '../../domain/webhooks/webhooks';

export interface DeliveryAttemptInput {
  deliveryId: string;
  /** 1-based attempt number within this run of the schedule. */
  attempt: number;
  /** How long the workflow will sleep before the next attempt if this one fails; null for the last attempt. */
  nextDelayMs: number | null;
  timeoutMs: number;
}

export interface DeliveryAttemptOutcome {
  /** delivered; retry (a next attempt is scheduled); failed (schedule exhausted or webhook disabled); dropped (webhook or delivery deleted). */
  outcome: 'delivered' | 'retry' | 'failed' | 'dropped';
  status: number | null;
  error: string | null;
}

/**
 * Activities of the delivery workflow. One attempt = one activity: load the delivery and its
 * webhook, sign the stored body with the current secret, POST it to a freshly checked address,
 * and record the result on the delivery (and the webhook's consecutive_failures) in one transaction.
 */
export function createWebhookActivities({ db, keyring, config, logger }: { db: Db; keyring: Keyring; config: Config; logger: Logger }) {
  let extraCa: string | null | undefined;
  // One client per worker process: keep-alive per endpoint, bounded sockets (WEBHOOK_MAX_SOCKETS).
  const http = new DeliveryClient({ maxSockets: config.WEBHOOK_MAX_SOCKETS, perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY });
  const loadExtraCa = () => {
    if (extraCa === undefined) extraCa = config.WEBHOOK_EXTRA_CA_FILE ? readFileSync(config.WEBHOOK_EXTRA_CA_FILE, 'utf8') : null;
    return extraCa;
  };

  async function record(
    deliveryId: string,
    webhookId: number,
    change: {
      outcome: 'delivered' | 'retry' | 'failed';
      status: number | null;
      error: string | null;
      nextDelayMs: number | null;
      countAttempt: boolean;
      countFailure: boolean;
    },
  ): Promise<boolean> {
    return db.transaction(async (trx) => {
      const patch: Record<string, unknown> = {
        last_status: change.status,
        last_error: change.error,
        updated_at: trx.fn.now(),
        status: change.outcome === 'retry' ? 'queued' : change.outcome,
        next_attempt_at: change.outcome === 'retry' && change.nextDelayMs !== null ? new Date(Date.now() + change.nextDelayMs) : null,
      };
      if (change.countAttempt) patch.attempts = trx.raw('attempts + 1');
      if (change.outcome === 'delivered') patch.delivered_at = trx.fn.now();
      const updated = await trx('webhook_deliveries').where({ id: deliveryId, status: 'queued' }).update(patch);
      if (updated === 0) return false;
      if (change.outcome === 'delivered') {
        await trx('webhooks').where({ id: webhookId }).where('consecutive_failures', '>', 0).update({ consecutive_failures: 0 });
      } else if (change.outcome === 'failed' && change.countFailure) {
        await trx('webhooks')
          .where({ id: webhookId })
          .update({ consecutive_failures: trx.raw('consecutive_failures + 1') });
      }
      return true;
    });
  }

  return {
    async attemptWebhookDelivery(input: DeliveryAttemptInput): Promise<DeliveryAttemptOutcome> {
      const row = (await db('webhook_deliveries as d')
        .join('webhooks as w', 'w.id', 'd.webhook_id')
        .where('d.id', input.deliveryId)
        .first('d.id', 'd.webhook_id', 'd.event_id', 'd.event_type', 'd.status', 'd.body', 'w.url', 'w.enabled', 'w.secret_sealed')) as
        | (Pick<DeliveryRow, 'id' | 'webhook_id' | 'event_id' | 'event_type' | 'status' | 'body'> & { url: string; enabled: boolean; secret_sealed: string })
        | undefined;
      if (!row) return { outcome: 'dropped', status: null, error: 'the webhook or the delivery was deleted' };
      // A retried activity whose first run already recorded a final result: report it again.
      if (row.status !== 'queued') return { outcome: row.status, status: null, error: null };
      if (!row.enabled) {
        const error = 'webhook is disabled; enable it and redeliver';
        await record(row.id, row.webhook_id, { outcome: 'failed', status: null, error, nextDelayMs: null, countAttempt: false, countFailure: false });
        return { outcome: 'failed', status: null, error };
      }
      const secret = keyring.decrypt(WEBHOOK_SECRET_PURPOSE, row.secret_sealed);
      const result = await http.post({
        url: row.url,
        endpoint: `whk_${row.webhook_id}`,
        body: row.body,
        timeoutMs: input.timeoutMs,
        policy: { allowInsecure: config.WEBHOOK_ALLOW_INSECURE_TARGETS },
        extraCa: loadExtraCa(),
        headers: {
          'Content-Type': 'application/json',
          'User-Agent': 'Cloud-Webhooks/1.0',
          'Cloud-Signature': signPayload(secret, row.body),
          'Cloud-Event': row.event_type,
          'Cloud-Event-Id': row.event_id,
          'Cloud-Delivery': row.id,
        },
      });
      const outcome = result.delivered ? 'delivered' : input.nextDelayMs === null ? 'failed' : 'retry';
      const stillThere = await record(row.id, row.webhook_id, {
        outcome,
        status: result.status,
        error: result.error,
        nextDelayMs: input.nextDelayMs,
        countAttempt: true,
        countFailure: true,
      });
      logger.info(
        {
          delivery: row.id,
          webhook: `whk_${row.webhook_id}`,
          event: row.event_id,
          attempt: input.attempt,
          outcome,
          status: result.status,
          error: result.error,
        },
        'webhook delivery attempt',
      );
      if (!stillThere) return { outcome: 'dropped', status: result.status, error: result.error };
      return { outcome, status: result.status, error: result.error };
    },

    /** The schedule ran out without a recorded final attempt (the attempt activity itself kept failing). */
    async markWebhookDeliveryFailed(input: { deliveryId: string; error: string }): Promise<void> {
      const row = await db('webhook_deliveries').where({ id: input.deliveryId, status: 'queued' }).first('webhook_id');
      if (!row) return;
      await record(input.deliveryId, row.webhook_id, {
        outcome: 'failed',
        status: null,
        error: input.error,
        nextDelayMs: null,
        countAttempt: false,
        countFailure: true,
      });
    },
  };
}

export type WebhookActivities = ReturnType<typeof createWebhookActivities>;
