import { createWebhookActivities } from '../activities/webhooks/activities';
import { webhookRoutes } from '../api/routes/webhooks/routes';
import { defineFamily } from './manifest';

/** Webhooks (SPEC "Webhooks"): endpoints, their deliveries and the workflows that make them. */
export const webhooksFamily = defineFamily({
  name: 'webhooks',
  routes: webhookRoutes,
  activities: (deps) => createWebhookActivities(deps),
  workflows: 'workflows/webhooks',
  config: [
    'WEBHOOK_RETRY_DELAYS',
    'WEBHOOK_TIMEOUT',
    'WEBHOOK_ALLOW_INSECURE_TARGETS',
    'WEBHOOK_SWEEP_INTERVAL',
    'WEBHOOK_PROTECTED_PORTS',
    'WEBHOOK_EXTRA_CA_FILE',
    'WEBHOOK_MAX_SOCKETS',
    'WEBHOOK_ENDPOINT_CONCURRENCY',
    'WEBHOOK_BREAKER_THRESHOLD',
    'WEBHOOK_BREAKER_COOLDOWN',
  ],
});
