import type { Knex } from 'knex';
import { newUlidId } from '../../common/ids';
import { monthSends } from './store';

/**
 * What was sent and what became of it (SPEC "Mail gateway": messages, their recipients and events;
 * usage). Written by the `/emails` data plane (accepted and rejected sends), by the MTA's hooks (an
 * SMTP submission, and every delivery outcome), and read by the messages and metrics endpoints.
 *
 * A message's status, and each recipient's, is the highest-severity event it had:
 * queued < deferred < delivered < opened < bounced < complained (`bounced` beats `delivered`).
 */
export const STATUS_RANK = { queued: 0, deferred: 1, delivered: 2, opened: 3, bounced: 4, complained: 5 } as const;
export type MessageStatus = keyof typeof STATUS_RANK;

export const newMessageId = () => newUlidId('msg');

const utcDay = (at: Date) => at.toISOString().slice(0, 10);

/** Adds to the day's accepted or rejected sends. */
export async function countSend(db: Knex | Knex.Transaction, serviceId: number, kind: 'accepted' | 'rejected', at = new Date()): Promise<void> {
  await db('mail_usage_days')
    .insert({ service_id: serviceId, day: utcDay(at), [kind]: 1 })
    .onConflict(['service_id', 'day'])
    .merge({ [kind]: db.raw(`mail_usage_days.${kind} + 1`) });
}

export interface AcceptedMessage {
  id: string;
  serviceId: number;
  domain: string;
  from: string;
  subject: string;
  recipients: string[];
  /** `api` (`/emails`) or `smtp` (a submission). */
  via: 'api' | 'smtp';
  /** When it was accepted (default: the database's now). */
  at?: Date;
}

/** Records an accepted message (queued, every recipient queued) and counts it; in the caller's transaction. */
export async function recordAccepted(trx: Knex.Transaction, message: AcceptedMessage): Promise<void> {
  await trx('mail_messages').insert({
    id: message.id,
    service_id: message.serviceId,
    domain: message.domain,
    from: message.from,
    subject: message.subject,
    via: message.via,
    ...(message.at ? { created_at: message.at, updated_at: message.at } : {}),
  });
  const unique = [...new Set(message.recipients.map((r) => r.toLowerCase()))];
  await trx('mail_recipients').insert(unique.map((email) => ({ message_id: message.id, email })));
  await trx('mail_events').insert({ message_id: message.id, kind: 'queued', ...(message.at ? { at: message.at } : {}) });
  await countSend(trx, message.serviceId, 'accepted');
}

/**
 * Records an accepted message unless the gateway's month has reached `limit`: checked under the
 * gateway's row lock, in the caller's transaction, so that concurrent sends (over `/emails` or SMTP)
 * cannot pass the quota together. false: over quota, nothing recorded.
 */
export async function recordWithinQuota(trx: Knex.Transaction, message: AcceptedMessage, limit: number): Promise<boolean> {
  await trx('mail_gateways').where({ service_id: message.serviceId }).forUpdate().first('service_id');
  if ((await monthSends(trx, message.serviceId)).accepted >= limit) return false;
  await recordAccepted(trx, message);
  return true;
}

/**
 * One recipient's outcome: an event, the recipient's status and response (raised, never lowered, by
 * rank), and the message's status (the highest of its recipients'). An outcome for a message that
 * is gone (past retention) is dropped.
 */
export async function recordOutcome(
  db: Knex,
  outcome: { messageId: string; recipient: string | null; kind: Exclude<MessageStatus, 'queued'>; response: string | null; at: Date },
): Promise<{ serviceId: number } | null> {
  return db.transaction(async (trx) => {
    const message = await trx('mail_messages').where({ id: outcome.messageId }).forUpdate().first();
    if (!message) return null;
    await trx('mail_events').insert({
      message_id: outcome.messageId,
      email: outcome.recipient,
      kind: outcome.kind,
      response: outcome.response,
      at: outcome.at,
    });
    const rank = STATUS_RANK[outcome.kind];
    // An open names no recipient (one pixel for all of them): it moves the message only.
    if (outcome.recipient)
      await trx('mail_recipients')
        .where({ message_id: outcome.messageId, email: outcome.recipient.toLowerCase() })
        .update({
          status: trx.raw(`case when ${rankSql('status')} < ? then ? else status end`, [rank, outcome.kind]),
          response: outcome.response ?? trx.raw('response'),
          updated_at: outcome.at,
        });
    if (STATUS_RANK[message.status as MessageStatus] < rank) {
      await trx('mail_messages').where({ id: outcome.messageId }).update({ status: outcome.kind, updated_at: outcome.at });
    } else {
      await trx('mail_messages').where({ id: outcome.messageId }).update({ updated_at: outcome.at });
    }
    return { serviceId: Number(message.service_id) };
  });
}

/** SQL for the rank of a status column. */
function rankSql(column: string): string {
  return `(case ${column} ${Object.entries(STATUS_RANK)
    .map(([status, rank]) => `when '${status}' then ${rank}`)
    .join(' ')} else 0 end)`;
}
