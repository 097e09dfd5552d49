import { z } from 'zod';
import { SUBSCRIBABLE_EVENTS } from '../../../domain/webhooks/webhooks';
import { enumField } from '../../enums';
import { idParam } from '../../schemas';

/** Request and response schemas of webhooks (one schema: validation, handler types, OpenAPI). */
export const ts = z.string().nullable().meta({ description: 'ISO 8601 timestamp' });

export const WebhookSchema = z
  .object({
    object: z.literal('webhook'),
    id: z.string().meta({ example: 'whk_1' }),
    url: z.string(),
    events: z.array(z.string()),
    enabled: z.boolean(),
    consecutive_failures: z.number().int().meta({ description: 'Failed deliveries in a row; reset by a delivered one and when the webhook is re-enabled.' }),
    created_at: ts,
  })
  .meta({ id: 'Webhook' });

export const WebhookWithSecretSchema = WebhookSchema.extend({
  secret: z.string().meta({ description: 'Signing secret. Shown only here; store it now.' }),
}).meta({ id: 'WebhookWithSecret' });

export const WebhookDeliverySchema = z
  .object({
    object: z.literal('webhook_delivery'),
    id: z.string().meta({ example: 'dlv_01JD0000000000000000000000' }),
    webhook: z.string(),
    event_id: z.string(),
    event_type: z.string(),
    status: z.enum(['queued', 'delivered', 'failed']),
    attempts: z.number().int().meta({ description: 'HTTP attempts made for this delivery (redeliveries included).' }),
    body: z
      .string()
      .nullable()
      .meta({ description: 'The exact signed request body; `null` for a credential that cannot see the service the event is about (docs/security.md).' }),
    last_status: z.number().int().nullable().meta({ description: 'HTTP status of the last attempt; null when it got no answer.' }),
    last_error: z.string().nullable(),
    next_attempt_at: ts,
    created_at: ts,
    delivered_at: ts,
  })
  .meta({ id: 'WebhookDelivery' });

export const urlField = z
  .string()
  .min(1)
  .max(2048)
  .meta({ description: 'https URL reachable from the public internet.', example: 'https://hooks.example.com/cloud' });
/** One subscribable event type: an enum in the document, refused with the list of types. */
const eventType = enumField(
  SUBSCRIBABLE_EVENTS as [string, ...string[]],
  (event) => `"${event}" is not an event type (one of ${SUBSCRIBABLE_EVENTS.join(', ')})`,
);
export const eventsField = z
  .array(eventType)
  .min(1)
  .max(20)
  .meta({ description: `Event types to receive: ${SUBSCRIBABLE_EVENTS.map((e) => `\`${e}\``).join(', ')} (\`*\` is every type, including future ones).` });

export const CreateBody = z.object({ url: urlField, events: eventsField, enabled: z.boolean().optional() }).strict();
export const UpdateBody = z.object({ url: urlField.optional(), events: eventsField.optional(), enabled: z.boolean().optional() }).strict();

export const webhookParams = z.object({ id: idParam('whk_1') });
export const deliveryParams = z.object({ id: idParam('whk_1'), delivery_id: idParam('dlv_01JD0000000000000000000000') });
