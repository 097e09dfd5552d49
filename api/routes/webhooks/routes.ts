import { z } from 'zod';
import {
  findDelivery,
  findWebhook,
  presentDeliveriesFor,
  presentDelivery,
  presentWebhook,
  presentWebhookWithSecret,
  MAX_WEBHOOKS_PER_ACCOUNT,
  type DeliveryRow,
  type WebhookRow,
} from '../../../domain/webhooks/webhooks';
import { createWebhook, deleteWebhook, pingWebhook, redeliver, rotateWebhookSecret, updateWebhook } from '../../../domain/webhooks/manage';
import { formatId } from '../../../common/ids';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';
import { CreateBody, deliveryParams, UpdateBody, WebhookDeliverySchema, webhookParams, WebhookSchema, WebhookWithSecretSchema } from './schemas';

/**
 * Webhooks (SPEC Endpoints "Webhooks", Events; DECISIONS "Webhook delivery record"). How deliveries
 * work, and the choices SPEC leaves open, are in docs/webhooks.md; the changes are made by
 * domain/webhooks/manage.ts.
 */

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
      const { row, secret } = await createWebhook(deps, principal, body);
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
      const row = await updateWebhook(deps, principal, params.id, body);
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
      await deleteWebhook(deps, principal, params.id);
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
      const { row, secret } = await rotateWebhookSecret(deps, principal, params.id);
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
      const delivery = await pingWebhook(deps, principal, params.id);
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
      const requeued = await redeliver(deps, principal, params.id, params.delivery_id);
      const [view] = await presentDeliveriesFor(deps.db, principal, [requeued]);
      return { body: view };
    },
  }),
];
