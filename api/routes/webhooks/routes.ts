import { z } from 'zod';
import { formatId, newUlidId } from '../../../common/ids';
import { emitEvent } from '../../../domain/events';
import { checkTarget, TargetRejected } from '../../../infra/webhook-targets';
import {
  eventBody,
  findDelivery,
  findWebhook,
  MAX_WEBHOOKS_PER_ACCOUNT,
  newWebhookSecret,
  presentDeliveriesFor,
  presentDelivery,
  presentWebhook,
  presentWebhookWithSecret,
  deliverToEndpoint,
  stopEndpointWorkflow,
  SUBSCRIBABLE_EVENTS,
  WEBHOOK_SECRET_PURPOSE,
  type DeliveryRow,
  type WebhookRow,
} from '../../../domain/webhooks/webhooks';
import type { AppDeps } from '../../deps';
import { backendUnavailable, conflict, quotaExceeded, validationFailed, type FieldError } from '../../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';

import { CreateBody, deliveryParams, UpdateBody, WebhookDeliverySchema, webhookParams, WebhookSchema, WebhookWithSecretSchema } from './schemas';
/**
 * Webhooks (SPEC Endpoints "Webhooks", Events; DECISIONS "Webhook delivery record"). How deliveries
 * work, and the choices SPEC leaves open, are in docs/webhooks.md.
 */

function checkEvents(events: string[]): string[] {
  const errors: FieldError[] = [];
  events.forEach((event, i) => {
    if (!SUBSCRIBABLE_EVENTS.includes(event)) {
      errors.push({ param: `events.${i}`, message: `"${event}" is not an event type (one of ${SUBSCRIBABLE_EVENTS.join(', ')})` });
    }
  });
  if (errors.length) throw validationFailed(errors);
  return [...new Set(events)];
}

async function checkUrl(deps: AppDeps, url: string): Promise<string> {
  try {
    return await checkTarget(url, { allowInsecure: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS });
  } catch (err) {
    if (err instanceof TargetRejected) throw validationFailed([{ param: 'url', message: err.message }]);
    throw err;
  }
}

export const webhookRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/webhooks',
    operationId: 'createWebhook',
    summary: 'Register a webhook',
    description:
      'The URL must be https and publicly reachable (checked after DNS resolution, and again before every delivery). ' +
      `The response carries the signing \`secret\` once. At most ${MAX_WEBHOOKS_PER_ACCOUNT} webhooks per account (\`429 quota_exceeded\`).`,
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['R', 'I'],
    returnsSecret: true,
    body: CreateBody,
    exampleBody: { url: 'https://hooks.example.com/cloud', events: ['operation.completed', 'service.suspended'] },
    responses: [{ status: 201, description: 'The webhook, with its secret', schema: WebhookWithSecretSchema }],
    async handler({ body, principal, deps }) {
      const events = checkEvents(body.events);
      const url = await checkUrl(deps, body.url);
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
            events,
            enabled: body.enabled ?? true,
            secret_sealed: deps.keyring.encrypt(WEBHOOK_SECRET_PURPOSE, secret),
          })
          .returning('*');
        return inserted;
      });
      const view = presentWebhookWithSecret(row, secret);
      return { status: 201, headers: { Location: `/v1/webhooks/${view.id}` }, body: view };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/webhooks',
    operationId: 'listWebhooks',
    summary: 'List webhooks',
    description: 'Newest first. Never shows secrets.',
    tag: 'Webhooks',
    scope: 'account:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of webhooks', schema: listOf(WebhookSchema, 'WebhookList') }],
    async handler({ query, principal, deps }) {
      const qb = deps.db('webhooks').where('account_id', principal.accountId);
      const page = await keysetPage<WebhookRow>(qb, {
        cursors: deps.cursors,
        list: listFingerprint('webhooks', {}),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r) => presentWebhook(r)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/webhooks/{id}',
    operationId: 'getWebhook',
    summary: 'Get a webhook',
    description: 'Never shows the secret.',
    tag: 'Webhooks',
    scope: 'account:read',
    marks: [],
    params: webhookParams,
    responses: [{ status: 200, description: 'The webhook', schema: WebhookSchema }],
    async handler({ params, principal, deps }) {
      return { body: presentWebhook(await findWebhook(deps.db, principal, params.id)) };
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/v1/webhooks/{id}',
    operationId: 'updateWebhook',
    summary: 'Update a webhook',
    description:
      'Changes `url`, `events` and/or `enabled`. Re-enabling (`enabled: true` on a disabled webhook) resets `consecutive_failures`. ' +
      'A disabled webhook receives no new deliveries; its queued ones fail at their next attempt without being sent (redeliver them after re-enabling).',
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['R', 'I'],
    params: webhookParams,
    body: UpdateBody,
    exampleBody: { enabled: true },
    responses: [{ status: 200, description: 'The updated webhook', schema: WebhookSchema }],
    async handler({ params, body, principal, deps }) {
      await findWebhook(deps.db, principal, params.id);
      const patch: Record<string, unknown> = {};
      if (body.events !== undefined) patch.events = checkEvents(body.events);
      if (body.url !== undefined) patch.url = await checkUrl(deps, body.url);
      const row = await deps.db.transaction(async (trx) => {
        const current = await findWebhook(trx, principal, params.id, true);
        if (body.enabled !== undefined) {
          patch.enabled = body.enabled;
          if (body.enabled && !current.enabled) patch.consecutive_failures = 0;
        }
        if (Object.keys(patch).length === 0) return current;
        const [updated] = await trx('webhooks')
          .where({ id: current.id })
          .update({ ...patch, updated_at: trx.fn.now() })
          .returning('*');
        return updated as WebhookRow;
      });
      return { body: presentWebhook(row) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/webhooks/{id}',
    operationId: 'deleteWebhook',
    summary: 'Delete a webhook',
    description:
      "Deletes the webhook and its deliveries. Pending deliveries are dropped: the webhook's delivery workflow is terminated (and would find them gone at its next attempt anyway).",
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['D', 'I'],
    params: webhookParams,
    responses: [{ status: 204, description: 'The webhook is gone' }],
    async handler({ params, principal, deps }) {
      const webhookId = await deps.db.transaction(async (trx) => {
        const row = await findWebhook(trx, principal, params.id, true);
        await trx('webhooks').where({ id: row.id }).delete();
        return row.id;
      });
      await stopEndpointWorkflow(deps.temporal, webhookId);
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/webhooks/{id}/rotate-secret',
    operationId: 'rotateWebhookSecret',
    summary: 'Rotate the signing secret',
    description:
      'Returns a new `secret`; every attempt from now on is signed with it and the old one stops working at once. Requests already in flight were signed with the old one.',
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['R'],
    returnsSecret: true,
    params: webhookParams,
    responses: [{ status: 200, description: 'The webhook, with its new secret', schema: WebhookWithSecretSchema }],
    async handler({ params, principal, deps }) {
      const current = await findWebhook(deps.db, principal, params.id);
      const secret = newWebhookSecret();
      const [row] = await deps
        .db('webhooks')
        .where({ id: current.id })
        .update({ secret_sealed: deps.keyring.encrypt(WEBHOOK_SECRET_PURPOSE, secret), updated_at: deps.db.fn.now() })
        .returning('*');
      return { body: presentWebhookWithSecret(row, secret) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/webhooks/{id}/ping',
    operationId: 'pingWebhook',
    summary: 'Send a webhook.ping event to this webhook',
    description:
      'Queues a `webhook.ping` delivery to this webhook only, whatever it subscribes to (data `{object: "ping", webhook}`). ' +
      'Answers with the queued delivery; a disabled webhook answers `409 conflict`.',
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['R'],
    params: webhookParams,
    responses: [{ status: 201, description: 'The queued delivery', schema: WebhookDeliverySchema }],
    async handler({ params, principal, deps }) {
      const delivery = await deps.db.transaction(async (trx) => {
        const webhook = await findWebhook(trx, principal, params.id, true);
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
      return {
        status: 201,
        headers: { Location: `/v1/webhooks/${formatId('whk', delivery.webhook_id)}/deliveries/${delivery.id}` },
        body: presentDelivery(delivery),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/webhooks/{id}/deliveries',
    operationId: 'listWebhookDeliveries',
    summary: 'List the deliveries of a webhook',
    description: 'Newest first, each with the exact signed body (`null` when the event is about a service the credential cannot see).',
    tag: 'Webhooks',
    scope: 'account:read',
    marks: [],
    params: webhookParams,
    query: z.object({ ...paginationQuery(), status: z.enum(['queued', 'delivered', 'failed']).optional() }),
    responses: [{ status: 200, description: 'A page of deliveries', schema: listOf(WebhookDeliverySchema, 'WebhookDeliveryList') }],
    async handler({ params, query, principal, deps }) {
      const webhook = await findWebhook(deps.db, principal, params.id);
      const qb = deps.db('webhook_deliveries').where({ webhook_id: webhook.id });
      if (query.status) qb.where('status', query.status);
      const page = await keysetPage<DeliveryRow>(qb, {
        cursors: deps.cursors,
        list: listFingerprint(`webhooks/${webhook.id}/deliveries`, { status: query.status }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return { body: listEnvelope(await presentDeliveriesFor(deps.db, principal, page.rows), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/webhooks/{id}/deliveries/{delivery_id}',
    operationId: 'getWebhookDelivery',
    summary: 'Get a delivery',
    description: 'With the exact signed body, the status of the last attempt, the last error and the time of the next attempt.',
    tag: 'Webhooks',
    scope: 'account:read',
    marks: [],
    params: deliveryParams,
    responses: [{ status: 200, description: 'The delivery', schema: WebhookDeliverySchema }],
    async handler({ params, principal, deps }) {
      const webhook = await findWebhook(deps.db, principal, params.id);
      const [view] = await presentDeliveriesFor(deps.db, principal, [await findDelivery(deps.db, webhook, params.delivery_id)]);
      return { body: view };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver',
    operationId: 'redeliverWebhookDelivery',
    summary: 'Redeliver a delivered or failed delivery',
    description:
      'Re-queues the same delivery (same id and body, fresh signature) with a new run of the retry schedule. ' +
      '`attempts` keeps counting. A queued delivery, or one of a disabled webhook, answers `409 conflict`.',
    tag: 'Webhooks',
    scope: 'account:write',
    marks: ['R'],
    params: deliveryParams,
    responses: [{ status: 200, description: 'The re-queued delivery', schema: WebhookDeliverySchema }],
    async handler({ params, principal, deps }) {
      const webhook = await findWebhook(deps.db, principal, params.id);
      const before = await findDelivery(deps.db, webhook, params.delivery_id);
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
      const [view] = await presentDeliveriesFor(deps.db, principal, [requeued]);
      return { body: view };
    },
  }),
];
