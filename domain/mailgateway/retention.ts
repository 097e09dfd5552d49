import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';

/** SPEC "Mail message retention": 90 days. */
export const MESSAGE_RETENTION_DAYS = 90;
/** `Idempotency-Key`s of `/emails` are kept a day, like the API's. */
const IDEMPOTENCY_HOURS = 24;

/** Deletes messages (with their recipients and events) older than the retention, and old idempotency keys. */
export async function sweepMail(db: Knex, now = new Date()): Promise<{ messages: number }> {
  const before = new Date(now.getTime() - MESSAGE_RETENTION_DAYS * 86_400_000);
  await db('mail_idempotency')
    .where('created_at', '<', new Date(now.getTime() - IDEMPOTENCY_HOURS * 3_600_000))
    .delete();
  let messages = 0;
  // In batches: a gateway that sent a great deal must not hold one long transaction.
  for (;;) {
    const deleted = await db('mail_messages')
      .whereIn('id', db('mail_messages').where('created_at', '<', before).select('id').limit(1_000))
      .delete();
    messages += deleted;
    if (deleted < 1_000) return { messages };
  }
}

/** Runs `sweepMail` beside the worker, hourly. */
export class MailRetentionSweeper extends PeriodicService {
  readonly name = 'mail-retention';

  constructor(private readonly deps: { db: Knex; logger: Logger; intervalMs?: number }) {
    super({ intervalMs: deps.intervalMs ?? 3_600_000, atStart: true });
  }

  async pass(): Promise<void> {
    try {
      const { messages } = await sweepMail(this.deps.db);
      if (messages) this.deps.logger.info({ messages }, 'mail messages past their 90 days deleted');
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'mail retention sweep failed; next pass retries');
    }
  }
}
