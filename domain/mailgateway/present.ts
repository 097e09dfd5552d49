import type { Knex } from 'knex';
import { iso } from '../../common/time';
import { notFound } from '../errors';
import type { MessageStatus } from './messages';

/** A message as SPEC shows it (`mail_message`): its recipients with their statuses and the remote's last reply; never a body. */
export interface MailMessageView {
  object: 'mail_message';
  id: string;
  domain: string;
  from: string;
  subject: string;
  status: MessageStatus;
  recipients: Array<{ email: string; status: MessageStatus; response: string | null }>;
  created_at: string;
  updated_at: string;
}

export function messageView(
  m: { id: string; domain: string; from: string; subject: string; status: string; created_at: Date; updated_at: Date },
  recipients: Array<{ email: string; status: string; response: string | null }>,
): MailMessageView {
  return {
    object: 'mail_message',
    id: m.id,
    domain: m.domain,
    from: m.from,
    subject: m.subject,
    status: m.status as MessageStatus,
    recipients: recipients.map((r) => ({ email: r.email, status: r.status as MessageStatus, response: r.response })),
    created_at: iso(m.created_at)!,
    updated_at: iso(m.updated_at)!,
  };
}

export async function presentMessage(db: Knex, id: string): Promise<MailMessageView> {
  const message = await db('mail_messages').where({ id }).first();
  if (!message) throw notFound('mail message');
  const recipients = await db('mail_recipients').where({ message_id: id }).orderBy('email');
  return messageView(message, recipients);
}
