import { readFileSync } from 'node:fs';
import { Context } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { formatId } from '../../common/ids';
import type { Logger } from '../../common/logger';
import type { Db } from '../../db/knex';
import { DeliveryClient, type CheckedTarget, type WebhookPostResult } from '../../infra/webhook-delivery-client';
import { signPayload } from '../../domain/webhooks/signature';
import { TargetRejected } from '../../infra/webhook-targets';
import type { TemporalGateway } from '../../infra/temporal';
import { deliverToEndpoint, WEBHOOK_SECRET_PURPOSE, type DeliveryRow } from '../../domain/webhooks/webhooks';

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

export interface BatchAttemptInput {
  webhookId: number;
  timeoutMs: number;
  /** Attempts in flight at once (the endpoint's WEBHOOK_ENDPOINT_CONCURRENCY, or what its other batches leave of it). */
  concurrency: number;
  /** False while the endpoint's circuit is open: the attempts are recorded as failed without being sent. */
  send: boolean;
  /** The failed attempts in a row that opened the circuit (for the record), when `send` is false. */
  circuitOpenAfter: number | null;
  deliveries: Array<{ id: string; attempt: number; nextDelayMs: number | null }>;
}

export interface BatchAttemptResult extends DeliveryAttemptOutcome {
  id: string;
  /** The endpoint was tried: the breaker counts these. */
  sent: boolean;
  /** The attempt counts on the delivery record (`attempts`). */
  counted: boolean;
}

interface AttemptRecord {
  id: string;
  status: 'delivered' | 'queued' | 'failed';
  counted: 0 | 1;
  last_status: number | null;
  last_error: string | null;
  next_attempt_at: string | null;
  /** A final failure that counts towards the webhook's consecutive_failures. */
  failure: boolean;
}

type HookRow = { id: number; url: string; enabled: boolean; secret_sealed: string };

/**
 * Records attempts on their delivery rows (only rows still queued: a row deleted or finished
 * meanwhile is left alone) and the webhook's consecutive_failures (deliveries that ended failed in a
 * row; a delivered one resets it), in one transaction. `records` are in the order the attempts
 * ended. Returns the ids it updated.
 */
async function recordAttempts(db: Knex, webhookId: number, records: AttemptRecord[]): Promise<Set<string>> {
  if (records.length === 0) return new Set();
  return db.transaction(async (trx) => {
    const { rows } = await trx.raw(
      `update webhook_deliveries as d set
         status = v.status,
         attempts = d.attempts + v.counted,
         last_status = v.last_status,
         last_error = v.last_error,
         next_attempt_at = v.next_attempt_at,
         delivered_at = case when v.status = 'delivered' then now() else d.delivered_at end,
         updated_at = now()
       from jsonb_to_recordset(?::jsonb) as v(id text, status text, counted int, last_status int, last_error text, next_attempt_at timestamptz)
       where d.id = v.id and d.webhook_id = ? and d.status = 'queued'
       returning d.id`,
      [JSON.stringify(records.map(({ failure: _failure, ...r }) => r)), webhookId],
    );
    const updated = new Set<string>(rows.map((r: { id: string }) => r.id));
    let reset = false;
    let failures = 0;
    for (const r of records) {
      if (!updated.has(r.id)) continue;
      if (r.status === 'delivered') {
        reset = true;
        failures = 0;
      } else if (r.failure) failures++;
    }
    if (reset) {
      await trx('webhooks').where({ id: webhookId }).whereNot('consecutive_failures', failures).update({ consecutive_failures: failures });
    } else if (failures > 0) {
      await trx('webhooks')
        .where({ id: webhookId })
        .update({ consecutive_failures: trx.raw('consecutive_failures + ?', [failures]) });
    }
    return updated;
  });
}

/**
 * Activities of the webhook workflows. An attempt: load the delivery and its webhook, check the
 * target (resolve once, every address allowed), sign the stored body with the current secret, POST
 * it to a checked address, and record the result on the delivery (and the webhook's
 * consecutive_failures). The endpoint workflow makes its attempts in batches (`attemptWebhookBatch`);
 * `attemptWebhookDelivery` and `markWebhookDeliveryFailed` serve runs of the per-delivery workflow
 * that were in flight when it was replaced, until each hands its delivery over.
 */
export function createWebhookActivities({
  db,
  keyring,
  config,
  logger,
  temporal,
}: {
  db: Db;
  keyring: Keyring;
  config: Config;
  logger: Logger;
  temporal: TemporalGateway;
}) {
  let extraCa: string | null | undefined;
  const loadExtraCa = () => {
    if (extraCa === undefined) extraCa = config.WEBHOOK_EXTRA_CA_FILE ? readFileSync(config.WEBHOOK_EXTRA_CA_FILE, 'utf8') : null;
    return extraCa;
  };
  // One client per worker process: keep-alive per endpoint, bounded sockets (WEBHOOK_MAX_SOCKETS).
  const http = new DeliveryClient({ maxSockets: config.WEBHOOK_MAX_SOCKETS, perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY });
  const policy = { allowInsecure: config.WEBHOOK_ALLOW_INSECURE_TARGETS };

  const headers = (secret: string, row: Pick<DeliveryRow, 'id' | 'event_id' | 'event_type' | 'body'>) => ({
    'Content-Type': 'application/json',
    'User-Agent': 'Cloud-Webhooks/1.0',
    'Cloud-Signature': signPayload(secret, row.body),
    'Cloud-Event': row.event_type,
    'Cloud-Event-Id': row.event_id,
    'Cloud-Delivery': row.id,
  });

  const nextAttemptAt = (nextDelayMs: number | null) => (nextDelayMs === null ? null : new Date(Date.now() + nextDelayMs).toISOString());

  /** The record of an attempt that was made (or refused) for the endpoint. */
  const attemptRecord = (id: string, result: Pick<WebhookPostResult, 'delivered' | 'status' | 'error'>, nextDelayMs: number | null): AttemptRecord => {
    const status = result.delivered ? 'delivered' : nextDelayMs === null ? 'failed' : 'queued';
    return {
      id,
      status,
      counted: 1,
      last_status: result.status,
      last_error: result.error,
      next_attempt_at: status === 'queued' ? nextAttemptAt(nextDelayMs) : null,
      failure: status === 'failed',
    };
  };

  /**
   * Heartbeats when running as an activity (a no-op when called directly), at most once a second:
   * each heartbeat crosses into the SDK's native core, and a batch makes an attempt every few ms.
   */
  const heartbeater = () => {
    let context: Context | null = null;
    try {
      context = Context.current();
    } catch {
      // not in an activity
    }
    let last = 0;
    return () => {
      const now = Date.now();
      if (!context || now - last < 1_000) return;
      last = now;
      context.heartbeat();
    };
  };

  const outcomeOf = (record: AttemptRecord): DeliveryAttemptOutcome['outcome'] => (record.status === 'queued' ? 'retry' : record.status);

  async function attemptWebhookBatch(input: BatchAttemptInput): Promise<BatchAttemptResult[]> {
    const ids = input.deliveries.map((d) => d.id);
    const [hook, rows] = await Promise.all([
      db('webhooks').where({ id: input.webhookId }).first('id', 'url', 'enabled', 'secret_sealed') as Promise<HookRow | undefined>,
      db('webhook_deliveries').whereIn('id', ids).where({ webhook_id: input.webhookId }).select('id', 'event_id', 'event_type', 'status', 'body') as Promise<
        Array<Pick<DeliveryRow, 'id' | 'event_id' | 'event_type' | 'status' | 'body'>>
      >,
    ]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    const results: BatchAttemptResult[] = [];
    const records: AttemptRecord[] = [];
    const toSend: Array<{ row: (typeof rows)[number]; attempt: number; nextDelayMs: number | null }> = [];
    for (const d of input.deliveries) {
      const row = byId.get(d.id);
      if (!hook || !row) {
        results.push({ id: d.id, outcome: 'dropped', status: null, error: 'the webhook or the delivery was deleted', sent: false, counted: false });
      } else if (row.status !== 'queued') {
        // A retried batch whose first run already recorded this one: report it again.
        results.push({ id: d.id, outcome: row.status, status: null, error: null, sent: false, counted: false });
      } else if (!hook.enabled) {
        const error = 'webhook is disabled; enable it and redeliver';
        records.push({ id: d.id, status: 'failed', counted: 0, last_status: null, last_error: error, next_attempt_at: null, failure: false });
      } else if (!input.send) {
        const error = `not sent: the circuit for this endpoint is open after ${input.circuitOpenAfter} failed attempts in a row; attempts follow the schedule and one probe is sent every ${config.WEBHOOK_BREAKER_COOLDOWN} ms`;
        records.push(attemptRecord(d.id, { delivered: false, status: null, error }, d.nextDelayMs));
      } else toSend.push({ row, attempt: d.attempt, nextDelayMs: d.nextDelayMs });
    }

    const sent = new Set<string>();
    const heartbeat = heartbeater();
    if (toSend.length > 0) {
      let target: CheckedTarget | null = null;
      let refused: string | null = null;
      try {
        // Checked once for the attempts made together, after DNS resolution; they connect to these addresses.
        target = await http.check(hook!.url, policy);
      } catch (err) {
        if (!(err instanceof TargetRejected)) throw err;
        refused = `target refused: ${err.message}`;
      }
      if (refused !== null || target === null) {
        for (const d of toSend) {
          sent.add(d.row.id);
          records.push(attemptRecord(d.row.id, { delivered: false, status: null, error: refused }, d.nextDelayMs));
        }
      } else {
        const secret = keyring.decrypt(WEBHOOK_SECRET_PURPOSE, hook!.secret_sealed);
        const extra = loadExtraCa();
        let next = 0;
        const lane = async () => {
          while (next < toSend.length) {
            const d = toSend[next++];
            const result = await http.send(target!, {
              url: hook!.url,
              endpoint: formatId('whk', hook!.id),
              body: d.row.body,
              timeoutMs: input.timeoutMs,
              policy,
              extraCa: extra,
              headers: headers(secret, d.row),
            });
            if (result.sent) sent.add(d.row.id);
            records.push(attemptRecord(d.row.id, result, d.nextDelayMs));
            heartbeat();
          }
        };
        await Promise.all(Array.from({ length: Math.min(Math.max(1, input.concurrency), toSend.length) }, lane));
      }
    }

    const updated = await recordAttempts(db, input.webhookId, records);
    const attempts = new Map(input.deliveries.map((d) => [d.id, d.attempt]));
    for (const record of records) {
      const stillThere = updated.has(record.id);
      const outcome = stillThere ? outcomeOf(record) : 'dropped';
      results.push({
        id: record.id,
        outcome,
        status: record.last_status,
        error: record.last_error,
        sent: sent.has(record.id),
        counted: stillThere && record.counted === 1,
      });
      logger.info(
        {
          delivery: record.id,
          webhook: formatId('whk', input.webhookId),
          attempt: attempts.get(record.id),
          outcome,
          status: record.last_status,
          error: record.last_error,
        },
        'webhook delivery attempt',
      );
    }
    return results;
  }

  return {
    attemptWebhookBatch,

    /** A batch whose attempts could not run (or be recorded) on their last attempt: the deliveries are failed. */
    async markWebhookDeliveriesFailed(input: { webhookId: number; deliveryIds: string[]; error: string }): Promise<void> {
      await recordAttempts(
        db,
        input.webhookId,
        input.deliveryIds.map((id) => ({ id, status: 'failed', counted: 0, last_status: null, last_error: input.error, next_attempt_at: null, failure: true })),
      );
    },

    /**
     * A run of the per-delivery workflow that was in flight when the endpoint workflow replaced it
     * hands its delivery over at its next attempt, with the attempt number it had reached.
     */
    async handOverWebhookDelivery(input: { deliveryId: string; attempt: number }): Promise<'handed-over' | 'delivered' | 'failed' | 'dropped'> {
      const row = (await db('webhook_deliveries').where({ id: input.deliveryId }).first('id', 'status', 'webhook_id', 'account_id')) as
        Pick<DeliveryRow, 'id' | 'status' | 'webhook_id' | 'account_id'> | undefined;
      if (!row) return 'dropped';
      if (row.status !== 'queued') return row.status;
      await deliverToEndpoint(temporal, config, { webhookId: row.webhook_id, accountId: row.account_id }, [{ id: row.id, attempt: input.attempt }]);
      logger.info(
        { delivery: row.id, webhook: formatId('whk', row.webhook_id), attempt: input.attempt },
        'webhook delivery handed over to its endpoint workflow',
      );
      return 'handed-over';
    },

    /** One attempt of the per-delivery workflow (runs started before the endpoint workflow). */
    async attemptWebhookDelivery(input: DeliveryAttemptInput): Promise<DeliveryAttemptOutcome> {
      const row = (await db('webhook_deliveries').where({ id: input.deliveryId }).first('webhook_id')) as { webhook_id: number } | undefined;
      if (!row) return { outcome: 'dropped', status: null, error: 'the webhook or the delivery was deleted' };
      const [result] = await attemptWebhookBatch({
        webhookId: row.webhook_id,
        timeoutMs: input.timeoutMs,
        concurrency: 1,
        send: true,
        circuitOpenAfter: null,
        deliveries: [{ id: input.deliveryId, attempt: input.attempt, nextDelayMs: input.nextDelayMs }],
      });
      return { outcome: result.outcome, status: result.status, error: result.error };
    },

    /** The per-delivery workflow's schedule ran out without a recorded final attempt. */
    async markWebhookDeliveryFailed(input: { deliveryId: string; error: string }): Promise<void> {
      const row = await db('webhook_deliveries').where({ id: input.deliveryId, status: 'queued' }).first('webhook_id');
      if (!row) return;
      await recordAttempts(db, row.webhook_id, [
        { id: input.deliveryId, status: 'failed', counted: 0, last_status: null, last_error: input.error, next_attempt_at: null, failure: true },
      ]);
    },
  };
}

export type WebhookActivities = ReturnType<typeof createWebhookActivities>;
