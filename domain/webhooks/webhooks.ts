import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import { randomBase62 } from '../../common/crypto';
import { formatId, parseNumericId, parseUlidId } from '../../common/ids';
import { notFound } from '../errors';
import { iso } from '../../common/time';
import { EVENT_TYPES } from '../events';
import { canSeeService, visibleServiceIds, type Principal } from '../principal';
import type { TemporalGateway } from '../../infra/temporal';
import { webhookDeliveriesSignal, type WebhookEndpointInput } from '../../workflows/webhooks/webhook-endpoint.workflow';

/** Keyring purpose of the sealed webhook secrets (never stored, logged or passed to a workflow in clear). */
export const WEBHOOK_SECRET_PURPOSE = 'webhook-secret';
export const MAX_WEBHOOKS_PER_ACCOUNT = 10;
/** One workflow per webhook endpoint (`webhook-whk_<n>`): every delivery of that webhook. */
export const WEBHOOK_ENDPOINT_WORKFLOW = 'webhookEndpointWorkflow';
/** Deliveries per local activity of the endpoint workflow. */
export const WEBHOOK_BATCH_SIZE = 100;
/** Every subscribable value: the event types, and `*` (every type, including future ones). */
export const SUBSCRIBABLE_EVENTS: readonly string[] = [...EVENT_TYPES, '*'];

export function newWebhookSecret(): string {
  return `whsec_${randomBase62(40)}`;
}

export interface WebhookRow {
  id: number;
  account_id: number;
  url: string;
  events: string[];
  enabled: boolean;
  secret_sealed: string;
  consecutive_failures: number;
  created_at: Date;
  updated_at: Date;
}

export type DeliveryStatus = 'queued' | 'delivered' | 'failed';

export interface DeliveryRow {
  id: string;
  webhook_id: number;
  account_id: number;
  event_id: string;
  event_type: string;
  status: DeliveryStatus;
  attempts: number;
  body: string;
  last_status: number | null;
  last_error: string | null;
  next_attempt_at: Date | null;
  created_at: Date;
  updated_at: Date;
  delivered_at: Date | null;
}

/** The Webhook resource, never with its secret. */
export function presentWebhook(row: WebhookRow) {
  return {
    object: 'webhook' as const,
    id: formatId('whk', row.id),
    url: row.url,
    events: row.events,
    enabled: row.enabled,
    consecutive_failures: row.consecutive_failures,
    created_at: iso(row.created_at),
  };
}

/** The Webhook with its secret in clear: only the create and rotate-secret responses. */
export function presentWebhookWithSecret(row: WebhookRow, secret: string) {
  return { ...presentWebhook(row), secret };
}

/** The delivery record (DECISIONS "Webhook delivery record"). `body` is the exact signed string. */
export function presentDelivery(row: DeliveryRow, redactBody = false) {
  return {
    object: 'webhook_delivery' as const,
    id: row.id,
    webhook: formatId('whk', row.webhook_id),
    event_id: row.event_id,
    event_type: row.event_type,
    status: row.status,
    attempts: row.attempts,
    body: redactBody ? null : row.body,
    last_status: row.last_status,
    last_error: row.last_error,
    next_attempt_at: iso(row.next_attempt_at),
    created_at: iso(row.created_at),
    delivered_at: iso(row.delivered_at),
  };
}

/**
 * Delivery records as the principal may read them. A credential narrowed to some services (key
 * allowlist, user per-service permissions) still sees every delivery of the account's webhooks, but
 * the body of an event about a service it cannot see is redacted to `null` (docs/security.md).
 */
export async function presentDeliveriesFor(db: Knex, principal: Principal, rows: DeliveryRow[]) {
  if (visibleServiceIds(principal) === null || rows.length === 0) return rows.map((row) => presentDelivery(row));
  const events: Array<{ id: string; service_id: number | null }> = await db('events')
    .whereIn(
      'id',
      rows.map((r) => r.event_id),
    )
    .select('id', 'service_id');
  const serviceOf = new Map(events.map((e) => [e.id, e.service_id === null ? null : Number(e.service_id)]));
  return rows.map((row) => {
    const serviceId = serviceOf.get(row.event_id);
    // An event no longer on record cannot be placed: redacted too.
    const hidden = serviceId === undefined || (serviceId !== null && !canSeeService(principal, serviceId));
    return presentDelivery(row, hidden);
  });
}

/** A webhook of the principal's account, or 404. */
export async function findWebhook(db: Knex | Knex.Transaction, principal: Principal, rawId: string, forUpdate = false): Promise<WebhookRow> {
  const id = parseNumericId('whk', rawId);
  if (id === null) throw notFound('webhook');
  const qb = db('webhooks').where({ id, account_id: principal.accountId }).first();
  if (forUpdate) qb.forUpdate();
  const row = (await qb) as WebhookRow | undefined;
  if (!row) throw notFound('webhook');
  return row;
}

/** A delivery of that webhook, or 404. */
export async function findDelivery(db: Knex | Knex.Transaction, webhook: WebhookRow, rawId: string): Promise<DeliveryRow> {
  const id = parseUlidId('dlv', rawId);
  if (id === null) throw notFound('webhook delivery');
  const row = (await db('webhook_deliveries').where({ id, webhook_id: webhook.id }).first()) as DeliveryRow | undefined;
  if (!row) throw notFound('webhook delivery');
  return row;
}

/** The exact body of every delivery of an event: its envelope, serialised once. */
export function eventBody(event: { id: string; type: string; created_at: Date | string; data: unknown }): string {
  return JSON.stringify({ id: event.id, object: 'event' as const, type: event.type, created_at: new Date(event.created_at).toISOString(), data: event.data });
}

/** Input of the per-delivery workflow of the previous design (runs in flight hand their delivery over). */
export interface WebhookDeliveryInput {
  deliveryId: string;
  /** Delay after failed attempt n before attempt n+1 (WEBHOOK_RETRY_DELAYS); attempts = delays + 1. */
  retryDelaysMs: number[];
  /** WEBHOOK_TIMEOUT: an attempt must get a 2xx within it. */
  timeoutMs: number;
}

/** The endpoint workflow's id: found in the Temporal UI from the delivery record's `webhook`. */
export function endpointWorkflowId(webhookId: number): string {
  return `webhook-${formatId('whk', webhookId)}`;
}

export function endpointWorkflowInput(config: Config, webhookId: number): WebhookEndpointInput {
  return {
    webhookId,
    retryDelaysMs: config.WEBHOOK_RETRY_DELAYS,
    timeoutMs: config.WEBHOOK_TIMEOUT,
    batchSize: WEBHOOK_BATCH_SIZE,
    concurrency: config.WEBHOOK_ENDPOINT_CONCURRENCY,
    breaker: { threshold: config.WEBHOOK_BREAKER_THRESHOLD, cooldownMs: config.WEBHOOK_BREAKER_COOLDOWN },
  };
}

/**
 * Hands deliveries to their endpoint's workflow: signal-with-start, so the workflow is started if it
 * is not running (it ends whenever it holds nothing) and signalled if it is. A delivery it already
 * holds is not taken twice; one it is attempting right now is taken again once that attempt ends
 * (a redelivery racing its own last attempt).
 */
export async function deliverToEndpoint(
  temporal: TemporalGateway,
  config: Config,
  endpoint: { webhookId: number; accountId: number },
  deliveries: Array<{ id: string; attempt?: number }>,
): Promise<void> {
  const webhook = formatId('whk', endpoint.webhookId);
  await temporal.client.workflow.signalWithStart(WEBHOOK_ENDPOINT_WORKFLOW, {
    workflowId: endpointWorkflowId(endpoint.webhookId),
    taskQueue: temporal.taskQueue,
    args: [endpointWorkflowInput(config, endpoint.webhookId)],
    signal: webhookDeliveriesSignal,
    signalArgs: [{ deliveries }],
    typedSearchAttributes: temporal.searchAttributes({
      operationType: 'webhook.delivery',
      accountId: formatId('cus', endpoint.accountId),
      resourceId: webhook,
    }),
    memo: { webhook, account: formatId('cus', endpoint.accountId) },
  });
}

/** Stops the endpoint workflow of a deleted webhook (best effort: a run that misses it finds the rows gone). */
export async function stopEndpointWorkflow(temporal: TemporalGateway, webhookId: number): Promise<void> {
  await temporal.withDeadline(2_000, () => temporal.handle(endpointWorkflowId(webhookId)).terminate('webhook deleted')).catch(() => undefined);
}
