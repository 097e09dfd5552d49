import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { formatId, newUlidId } from '../../common/ids';
import type { Logger } from '../../common/logger';
import type { TemporalGateway } from '../../infra/temporal';
import { checkTarget, TargetRejected } from '../../infra/webhook-targets';
import { backendUnavailable, conflict, quotaExceeded, validationFailed } from '../errors';
import { emitEvent } from '../events';
import type { Principal } from '../principal';
import {
  deliverToEndpoint,
  eventBody,
  findDelivery,
  findWebhook,
  MAX_WEBHOOKS_PER_ACCOUNT,
  newWebhookSecret,
  stopEndpointWorkflow,
  WEBHOOK_SECRET_PURPOSE,
  type DeliveryRow,
  type WebhookRow,
} from './webhooks';

/**
 * Changes of an account's webhooks and their deliveries (SPEC Endpoints "Webhooks"; how deliveries
 * work is in docs/webhooks.md). Each change is one transaction on the account's rows; the event
 * types are checked by the request schema (api/routes/webhooks/schemas.ts) before they get here.
 */
export interface WebhookDeps {
  db: Knex;
  config: Config;
  keyring: Keyring;
  temporal: TemporalGateway;
  logger: Logger;
}

/** A webhook with the signing secret in clear: only a creation and a rotation show it, once. */
export interface WebhookWithSecret {
  row: WebhookRow;
  secret: string;
}

/** The URL as deliveries will use it, or `400` at `url`: https, and public after DNS resolution. */
async function checkUrl(deps: Pick<WebhookDeps, 'config'>, url: string): Promise<string> {
  try {
    return await checkTarget(url, { allowInsecure: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS });
  } catch (err) {
    if (err instanceof TargetRejected) throw validationFailed([{ param: 'url', message: err.message }]);
    throw err;
  }
}

/** Subscribed types once each, in the order given. */
const distinct = (events: readonly string[]) => [...new Set(events)];

/** Registers a webhook, at most MAX_WEBHOOKS_PER_ACCOUNT per account (`429 quota_exceeded`). */
export async function createWebhook(
  deps: WebhookDeps,
  principal: Principal,
  input: { url: string; events: readonly string[]; enabled?: boolean },
): Promise<WebhookWithSecret> {
  const url = await checkUrl(deps, input.url);
  const secret = newWebhookSecret();
  const row: WebhookRow = await deps.db.transaction(async (trx) => {
    // Serialises creations per account, so two at once cannot both take the last place.
    await trx('accounts').where({ id: principal.accountId }).forUpdate().first('id');
    const { n } = (await trx('webhooks').where({ account_id: principal.accountId }).count('* as n').first()) as { n: string | number };
    if (Number(n) >= MAX_WEBHOOKS_PER_ACCOUNT) {
      throw quotaExceeded(`An account can have at most ${MAX_WEBHOOKS_PER_ACCOUNT} webhooks; delete one before adding another.`);
    }
    const [inserted] = await trx('webhooks')
      .insert({
        account_id: principal.accountId,
        url,
        events: distinct(input.events),
        enabled: input.enabled ?? true,
        secret_sealed: deps.keyring.encrypt(WEBHOOK_SECRET_PURPOSE, secret),
      })
      .returning('*');
    return inserted;
  });
  return { row, secret };
}

/** Changes `url`, `events` and/or `enabled`; re-enabling a disabled webhook resets `consecutive_failures`. */
export async function updateWebhook(
  deps: WebhookDeps,
  principal: Principal,
  rawId: string,
  change: { url?: string; events?: readonly string[]; enabled?: boolean },
): Promise<WebhookRow> {
  await findWebhook(deps.db, principal, rawId);
  const patch: Record<string, unknown> = {};
  if (change.events !== undefined) patch.events = distinct(change.events);
  if (change.url !== undefined) patch.url = await checkUrl(deps, change.url);
  return deps.db.transaction(async (trx) => {
    const current = await findWebhook(trx, principal, rawId, true);
    if (change.enabled !== undefined) {
      patch.enabled = change.enabled;
      if (change.enabled && !current.enabled) patch.consecutive_failures = 0;
    }
    if (Object.keys(patch).length === 0) return current;
    const [updated] = await trx('webhooks')
      .where({ id: current.id })
      .update({ ...patch, updated_at: trx.fn.now() })
      .returning('*');
    return updated as WebhookRow;
  });
}

/** Deletes the webhook with its deliveries, then stops its delivery workflow (best effort). */
export async function deleteWebhook(deps: WebhookDeps, principal: Principal, rawId: string): Promise<void> {
  const webhookId = await deps.db.transaction(async (trx) => {
    const row = await findWebhook(trx, principal, rawId, true);
    await trx('webhooks').where({ id: row.id }).delete();
    return row.id;
  });
  await stopEndpointWorkflow(deps.temporal, webhookId);
}

/** A new signing secret; the old one stops working at once. */
export async function rotateWebhookSecret(deps: WebhookDeps, principal: Principal, rawId: string): Promise<WebhookWithSecret> {
  const current = await findWebhook(deps.db, principal, rawId);
  const secret = newWebhookSecret();
  const [row] = await deps
    .db('webhooks')
    .where({ id: current.id })
    .update({ secret_sealed: deps.keyring.encrypt(WEBHOOK_SECRET_PURPOSE, secret), updated_at: deps.db.fn.now() })
    .returning('*');
  return { row, secret };
}

/** Queues a `webhook.ping` delivery to this webhook only; a disabled webhook is `409 conflict`. */
export async function pingWebhook(deps: WebhookDeps, principal: Principal, rawId: string): Promise<DeliveryRow> {
  return deps.db.transaction(async (trx) => {
    const webhook = await findWebhook(trx, principal, rawId, true);
    if (!webhook.enabled) throw conflict('The webhook is disabled; enable it (PATCH enabled: true) before pinging it.');
    // The event goes through the outbox like any other; the dispatcher starts its delivery.
    const event = await emitEvent(trx, {
      accountId: principal.accountId,
      type: 'webhook.ping',
      data: { object: 'ping' as const, webhook: formatId('whk', webhook.id) },
    });
    const [row] = await trx('webhook_deliveries')
      .insert({
        id: newUlidId('dlv'),
        webhook_id: webhook.id,
        account_id: principal.accountId,
        event_id: event.id,
        event_type: event.type,
        body: eventBody(event),
      })
      .returning('*');
    return row as DeliveryRow;
  });
}

/**
 * Re-queues a delivered or failed delivery (same id and body) with a fresh retry schedule in its
 * endpoint's workflow. A queued delivery, or one of a disabled webhook, is `409 conflict`; when the
 * workflow cannot be reached the delivery is put back as it was (`503`).
 */
export async function redeliver(deps: WebhookDeps, principal: Principal, rawId: string, rawDeliveryId: string): Promise<DeliveryRow> {
  const webhook = await findWebhook(deps.db, principal, rawId);
  const before = await findDelivery(deps.db, webhook, rawDeliveryId);
  if (!webhook.enabled) throw conflict('The webhook is disabled; enable it (PATCH enabled: true) before redelivering.');
  const [requeued] = (await deps
    .db('webhook_deliveries')
    .where({ id: before.id })
    .whereIn('status', ['delivered', 'failed'])
    .update({ status: 'queued', next_attempt_at: deps.db.fn.now(), delivered_at: null, updated_at: deps.db.fn.now() })
    .returning('*')) as DeliveryRow[];
  if (!requeued) throw conflict('This delivery is already queued; it is being attempted.');
  try {
    // A fresh schedule (attempt 1) in the endpoint's workflow.
    await deliverToEndpoint(deps.temporal, deps.config, { webhookId: requeued.webhook_id, accountId: requeued.account_id }, [{ id: requeued.id }]);
  } catch (err) {
    deps.logger.error({ err, delivery: requeued.id }, 'could not start the redelivery');
    await deps
      .db('webhook_deliveries')
      .where({ id: before.id, status: 'queued' })
      .update({ status: before.status, next_attempt_at: before.next_attempt_at, delivered_at: before.delivered_at });
    throw backendUnavailable('webhooks');
  }
  return requeued;
}
