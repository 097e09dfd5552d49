import type { Knex } from 'knex';
import { InternalConnectionLikeSymbol, type Client } from '@temporalio/client';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/common';
import type { Config } from '../../common/config';
import { randomBase62 } from '../../common/crypto';
import { formatId, parseNumericId, parseUlidId } from '../../common/ids';
import { notFound } from '../../api/errors';
import { iso } from '../../api/schemas';
import { EVENT_TYPES } from '../events';
import { canSeeService, visibleServiceIds, type Principal } from '../principal';
import type { TemporalGateway } from '../temporal';

/** Keyring purpose of the sealed webhook secrets (never stored, logged or passed to a workflow in clear). */
export const WEBHOOK_SECRET_PURPOSE = 'webhook-secret';
export const MAX_WEBHOOKS_PER_ACCOUNT = 10;
export const WEBHOOK_DELIVERY_WORKFLOW = 'webhookDeliveryWorkflow';
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

export interface WebhookDeliveryInput {
  deliveryId: string;
  /** Delay after failed attempt n before attempt n+1 (WEBHOOK_RETRY_DELAYS); attempts = delays + 1. */
  retryDelaysMs: number[];
  /** WEBHOOK_TIMEOUT: an attempt must get a 2xx within it. */
  timeoutMs: number;
}

export function deliveryWorkflowInput(config: Config, deliveryId: string): WebhookDeliveryInput {
  return { deliveryId, retryDelaysMs: config.WEBHOOK_RETRY_DELAYS, timeoutMs: config.WEBHOOK_TIMEOUT };
}

function startOptions(temporal: TemporalGateway, config: Config, delivery: Pick<DeliveryRow, 'id' | 'account_id' | 'webhook_id'>) {
  return {
    workflowId: delivery.id,
    taskQueue: temporal.taskQueue,
    args: [deliveryWorkflowInput(config, delivery.id)] as [WebhookDeliveryInput],
    typedSearchAttributes: temporal.searchAttributes({
      operationType: 'webhook.delivery',
      accountId: formatId('cus', delivery.account_id),
      resourceId: formatId('whk', delivery.webhook_id),
    }),
    memo: { webhook: formatId('whk', delivery.webhook_id), account: formatId('cus', delivery.account_id) },
  };
}

/**
 * Starts the delivery workflow of a queued delivery (workflow id = delivery id). Idempotent: a run
 * that is already going is left alone; a run that failed or was terminated may be started again; a
 * run that completed is never started again by the dispatcher (redeliver starts new runs itself).
 */
/**
 * Eager start: when the client shares a NativeConnection with a worker of this process (the worker
 * process's dispatcher), the server hands the first workflow task straight back with the start
 * response, skipping a round of task matching per delivery.
 */
function supportsEagerStart(client: Client): boolean {
  const internals = (client.connection as { [InternalConnectionLikeSymbol]?: { supportsEagerStart?: boolean } })[InternalConnectionLikeSymbol];
  return internals?.supportsEagerStart === true;
}

export async function startDeliveryWorkflow(
  temporal: TemporalGateway,
  config: Config,
  delivery: Pick<DeliveryRow, 'id' | 'account_id' | 'webhook_id'>,
): Promise<'started' | 'already-started'> {
  try {
    await temporal.client.workflow.start(WEBHOOK_DELIVERY_WORKFLOW, {
      ...startOptions(temporal, config, delivery),
      workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
      requestEagerStart: supportsEagerStart(temporal.client),
    });
    return 'started';
  } catch (err) {
    if (err instanceof WorkflowExecutionAlreadyStartedError) return 'already-started';
    throw err;
  }
}

/**
 * Redeliver: a new run under the same workflow id. The previous run has recorded its final state
 * (that is why the delivery is delivered or failed), but it may still be closing; wait for it.
 */
export async function restartDeliveryWorkflow(
  temporal: TemporalGateway,
  config: Config,
  delivery: Pick<DeliveryRow, 'id' | 'account_id' | 'webhook_id'>,
): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await temporal.client.workflow.start(WEBHOOK_DELIVERY_WORKFLOW, {
        ...startOptions(temporal, config, delivery),
        workflowIdReusePolicy: 'ALLOW_DUPLICATE',
      });
      return;
    } catch (err) {
      if (!(err instanceof WorkflowExecutionAlreadyStartedError) || attempt >= 2) throw err;
      await temporal.withDeadline(3_000, () => temporal.handle(delivery.id).result()).catch(() => undefined);
    }
  }
}
