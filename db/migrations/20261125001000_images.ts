import type { Knex } from 'knex';

/**
 * Image services (docs/images.md): one tenant per account (its live `images` service).
 * - `images_tenants`: the tenant's handle (in signed URLs), its plan's figures, the delivery plane's URL.
 * - `images_tokens`: delivery tokens (`imgt_`), SHA-256 only; `retired_at` is when a rotated-out
 *   token stops working (null: active).
 * - `images_secrets`: the URL-signing secret, sealed, and the previous one until `previous_valid_until`.
 * - `images_origins`: the allowlist (fail-closed).
 * - `images_usage_days`: transformations, deliveries and egress per UTC day.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('images_tenants', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable().index();
    t.text('tenant').notNullable().unique();
    t.text('plan').notNullable();
    t.text('api_endpoint').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('images_tokens', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('images_tenants.service_id').onDelete('CASCADE');
    t.text('token_hash').notNullable().unique();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('retired_at', { useTz: true });
    t.index(['service_id', 'id']);
  });
  await knex.schema.createTable('images_secrets', (t) => {
    t.bigInteger('service_id').primary().references('images_tenants.service_id').onDelete('CASCADE');
    t.text('secret_sealed').notNullable();
    t.text('previous_sealed');
    t.timestamp('previous_valid_until', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('images_origins', (t) => {
    t.bigInteger('service_id').notNullable().references('images_tenants.service_id').onDelete('CASCADE');
    t.text('pattern').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'pattern']);
  });
  await knex.schema.createTable('images_usage_days', (t) => {
    t.bigInteger('service_id').notNullable().references('images_tenants.service_id').onDelete('CASCADE');
    t.date('day').notNullable();
    t.bigInteger('transformations').notNullable().defaultTo(0);
    t.bigInteger('deliveries').notNullable().defaultTo(0);
    t.bigInteger('egress_bytes').notNullable().defaultTo(0);
    t.primary(['service_id', 'day']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['images_usage_days', 'images_origins', 'images_secrets', 'images_tokens', 'images_tenants']) await knex.schema.dropTableIfExists(table);
}
