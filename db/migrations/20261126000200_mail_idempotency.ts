import type { Knex } from 'knex';

/**
 * Mail gateway, after review: an `/emails` Idempotency-Key is claimed before the MTA takes the
 * message and completed (with the answer to replay) only once it has, so that a concurrent retry
 * is told to wait (`409 idempotency_key_in_use`) instead of being answered for a message that may
 * yet be undone. And the messages list's keyset index (newest first per gateway).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('mail_idempotency', (t) => {
    t.timestamp('completed_at', { useTz: true });
    t.jsonb('response');
  });
  await knex.schema.alterTable('mail_messages', (t) => {
    t.index(['service_id', 'id']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('mail_messages', (t) => {
    t.dropIndex(['service_id', 'id']);
  });
  await knex.schema.alterTable('mail_idempotency', (t) => {
    t.dropColumn('response');
    t.dropColumn('completed_at');
  });
}
