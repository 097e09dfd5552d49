import type { Knex } from 'knex';

/**
 * Mail gateway (docs/mailgateway.md): one gateway per account (its live `mailgateway` service).
 * - `mail_gateways`: the gateway: its plan, the data plane's URL, and why sending is suspended
 *   (bounce or complaint rate over its limit), if it is.
 * - `mail_domains`: sending domains with their DKIM key pair (the private key sealed), selector and
 *   bounce host, and the statuses of the two records the provider verifies. Deleting a domain deletes
 *   its row: adding it again makes a new key pair.
 * - `mail_keys`: sending keys (`mg_live_`), SHA-256 only.
 * - `mail_smtp_credentials`: SMTP submission credentials, a SHA-256 of the (generated, 238-bit)
 *   password only; at most one active per gateway, deactivated ones kept for good.
 * - `mail_messages`, `mail_recipients`, `mail_events`: what was sent and what happened to it, kept
 *   90 days (a sweeper deletes older messages; recipients and events go with them).
 * - `mail_idempotency`: `Idempotency-Key` of `/emails` sends, per gateway, kept 24 hours.
 * - `mail_usage_days`: accepted and rejected sends per UTC day.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('mail_gateways', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable().index();
    t.text('plan').notNullable();
    t.text('api_endpoint').notNullable();
    t.timestamp('sending_suspended_at', { useTz: true });
    t.text('sending_suspended_reason');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('mail_domains', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.text('domain').notNullable();
    t.text('status').notNullable().defaultTo('pending');
    t.timestamp('verified_at', { useTz: true });
    t.text('dkim_selector').notNullable();
    t.text('dkim_public').notNullable();
    t.text('dkim_private_sealed').notNullable();
    t.text('dkim_status').notNullable().defaultTo('pending');
    t.text('mail_from_host').notNullable();
    t.text('mail_from_status').notNullable().defaultTo('pending');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['service_id', 'domain']);
  });
  await knex.schema.createTable('mail_keys', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('secret_hash').notNullable().unique();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('last_used_at', { useTz: true });
    t.timestamp('revoked_at', { useTz: true });
    t.index(['service_id', 'id']);
  });
  await knex.schema.createTable('mail_smtp_credentials', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.text('username').notNullable().unique();
    t.text('password_hash').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('deactivated_at', { useTz: true });
  });
  await knex.raw('create unique index mail_smtp_one_active on mail_smtp_credentials (service_id) where deactivated_at is null');
  await knex.schema.createTable('mail_messages', (t) => {
    t.text('id').primary();
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.text('domain').notNullable();
    t.text('from').notNullable();
    t.text('subject').notNullable();
    t.text('status').notNullable().defaultTo('queued');
    t.text('via').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['service_id', 'created_at', 'id']);
    t.index(['created_at']);
  });
  await knex.schema.createTable('mail_recipients', (t) => {
    t.text('message_id').notNullable().references('mail_messages.id').onDelete('CASCADE');
    t.text('email').notNullable();
    t.text('status').notNullable().defaultTo('queued');
    t.text('response');
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['message_id', 'email']);
  });
  await knex.schema.createTable('mail_events', (t) => {
    t.bigIncrements('id').primary();
    t.text('message_id').notNullable().references('mail_messages.id').onDelete('CASCADE');
    t.text('email');
    t.text('kind').notNullable();
    t.text('response');
    t.timestamp('at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['message_id', 'kind']);
  });
  await knex.schema.createTable('mail_idempotency', (t) => {
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.text('key').notNullable();
    t.text('request_hash').notNullable();
    t.text('message_id').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'key']);
  });
  await knex.schema.createTable('mail_usage_days', (t) => {
    t.bigInteger('service_id').notNullable().references('mail_gateways.service_id').onDelete('CASCADE');
    t.date('day').notNullable();
    t.bigInteger('accepted').notNullable().defaultTo(0);
    t.bigInteger('rejected').notNullable().defaultTo(0);
    t.primary(['service_id', 'day']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'mail_usage_days',
    'mail_idempotency',
    'mail_events',
    'mail_recipients',
    'mail_messages',
    'mail_smtp_credentials',
    'mail_keys',
    'mail_domains',
    'mail_gateways',
  ])
    await knex.schema.dropTableIfExists(table);
}
