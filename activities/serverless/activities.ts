import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { DeliveryClient } from '../../infra/webhook-delivery-client';
import { fireSchedule, type RunOutcome } from '../../domain/serverless/cron';
import { planSettingsOf } from '../../domain/serverless/plans';
import { signPayload } from '../../domain/webhooks/signature';

export interface CronFireInput {
  scheduleId: string;
  /** The firing's workflow id: one POST per key, whatever the retries. */
  runKey: string;
  /** When Temporal scheduled the firing (ISO), for the run's record and lateness. */
  scheduledAt: string;
}

/** The serverless family's activities: a cron firing (domain/serverless/cron.ts `fireSchedule`). */
export function createServerlessActivities({ db, keyring, config }: { db: Knex; keyring: Keyring; config: Config }) {
  // One client per worker process: keep-alive per destination, bounded sockets, the webhook SSRF rules.
  const http = new DeliveryClient({ maxSockets: config.WEBHOOK_MAX_SOCKETS, perEndpoint: config.WEBHOOK_ENDPOINT_CONCURRENCY });
  const policy = { allowInsecure: config.WEBHOOK_ALLOW_INSECURE_TARGETS };
  const plans = planSettingsOf(config);

  async function fireCronSchedule(input: CronFireInput): Promise<RunOutcome> {
    return fireSchedule(
      {
        db,
        keyring,
        plans,
        sign: signPayload,
        post: (req) => http.post({ ...req, timeoutMs: config.WEBHOOK_TIMEOUT, policy, endpoint: `cron:${input.scheduleId}` }),
      },
      { scheduleId: input.scheduleId, runKey: input.runKey, scheduledAt: new Date(input.scheduledAt) },
    );
  }

  return { fireCronSchedule };
}

export type ServerlessActivities = ReturnType<typeof createServerlessActivities>;
