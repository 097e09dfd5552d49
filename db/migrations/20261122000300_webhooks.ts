import type { Knex } from 'knex';

/**
 * Webhooks and their deliveries (docs/webhooks.md). The secret is stored sealed with the keyring
 * (purpose `webhook-secret`). One delivery row per (event, webhook): the unique pair makes the
 * dispatcher's fan-out idempotent, so a re-run of the sweep after a crash creates no duplicate.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('webhooks', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('url').notNullable();
    t.specificType('events', 'text[]').notNullable();
    t.boolean('enabled').notNullable().defaultTo(true);
    t.text('secret_sealed').notNullable();
    t.integer('consecutive_failures').notNullable().defaultTo(0);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['account_id', 'id']);
  });

  await knex.schema.createTable('webhook_deliveries', (t) => {
    t.text('id').primary(); // dlv_<ulid>
    // Deleting a webhook drops its deliveries (pending ones included; their workflows end on their own).
    t.bigInteger('webhook_id').notNullable().references('webhooks.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('event_id').notNullable();
    t.text('event_type').notNullable();
    t.text('status').notNullable().defaultTo('queued'); // queued | delivered | failed
    t.integer('attempts').notNullable().defaultTo(0);
    // The exact bytes that are signed and POSTed on every attempt.
    t.text('body').notNullable();
    t.integer('last_status');
    t.text('last_error');
    t.timestamp('next_attempt_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('delivered_at', { useTz: true });
    t.unique(['event_id', 'webhook_id']);
    t.index(['webhook_id', 'id']);
  });
  await knex.raw(`alter table webhook_deliveries add constraint webhook_deliveries_status check (status in ('queued', 'delivered', 'failed'))`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('webhook_deliveries');
  await knex.schema.dropTableIfExists('webhooks');
}
