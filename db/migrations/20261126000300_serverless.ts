import type { Knex } from 'knex';

/**
 * Serverless primitives (docs/serverless.md): one tenant per account and primitive (cron, db,
 * functions, kv), each the account's live `serverless-<p>` service.
 * - `serverless_tenants`: the primitive, the tenant's handle (its keys, files and processes are
 *   named by it, never by a customer's string), the plan and the data plane's URL.
 *   `dropped_at` is set once the data plane has removed a terminated tenant's data.
 * - `serverless_tokens`: data-plane tokens (`crt_`, `dbt_`, `fnt_`, `kvt_`), SHA-256 only;
 *   `retired_at` is when a rotated-out token stops (null: live).
 * - `serverless_usage_days`: the metered counts per UTC day (each primitive fills its own columns;
 *   `storage_bytes_peak` is the day's maximum).
 * - `serverless_cron_schedules` / `serverless_cron_runs`: the cron jobs (each one Temporal Schedule)
 *   and every firing's outcome, keyed by its workflow id so a retried firing is counted once.
 * - `serverless_db_namespaces`: the db namespaces (one SQLite file each on the data plane's host).
 * - `serverless_functions`: the deployed module of each function (the data plane runs them again
 *   from here after a restart).
 * - `sim_kv_entries`: the kv fallback backend's data (KV_BACKEND=simulator).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('serverless_tenants', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable();
    t.text('primitive').notNullable();
    t.text('handle').notNullable().unique();
    t.text('plan').notNullable();
    t.text('api_endpoint').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    // Set once the data plane has removed the tenant's data after its service ended.
    t.timestamp('dropped_at', { useTz: true });
    t.index(['account_id', 'primitive']);
  });
  await knex.raw(`alter table serverless_tenants add constraint serverless_tenants_primitive check (primitive in ('cron', 'db', 'functions', 'kv'))`);
  await knex.schema.createTable('serverless_tokens', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('serverless_tenants.service_id').onDelete('CASCADE');
    t.text('token_hash').notNullable().unique();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('retired_at', { useTz: true });
    t.index(['service_id', 'id']);
  });
  await knex.schema.createTable('serverless_usage_days', (t) => {
    t.bigInteger('service_id').notNullable().references('serverless_tenants.service_id').onDelete('CASCADE');
    t.date('day').notNullable();
    for (const metric of [
      'executions',
      'skipped',
      'rows_read',
      'rows_written',
      'invocations',
      'errors',
      'execution_ms',
      'reads',
      'writes',
      'storage_bytes_peak',
    ]) {
      t.bigInteger(metric).notNullable().defaultTo(0);
    }
    t.primary(['service_id', 'day']);
  });
  await knex.schema.createTable('serverless_cron_schedules', (t) => {
    t.text('id').primary();
    t.bigInteger('service_id').notNullable().references('serverless_tenants.service_id').onDelete('CASCADE');
    t.text('destination').notNullable();
    t.text('cron');
    t.integer('interval_seconds');
    t.text('body').notNullable().defaultTo('');
    t.text('secret_sealed').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('deleted_at', { useTz: true });
    t.index(['service_id', 'created_at']);
  });
  await knex.schema.createTable('serverless_cron_runs', (t) => {
    t.text('run_key').primary();
    t.text('schedule_id').notNullable().references('serverless_cron_schedules.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable();
    t.timestamp('scheduled_at', { useTz: true }).notNullable();
    t.timestamp('started_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text('outcome').notNullable();
    t.integer('status_code');
    t.text('error');
    t.index(['schedule_id', 'scheduled_at']);
  });
  await knex.schema.createTable('serverless_db_namespaces', (t) => {
    t.bigInteger('service_id').notNullable().references('serverless_tenants.service_id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'name']);
  });
  await knex.schema.createTable('serverless_functions', (t) => {
    t.bigInteger('service_id').notNullable().references('serverless_tenants.service_id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('code').notNullable();
    t.timestamp('deployed_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'name']);
  });
  await knex.schema.createTable('sim_kv_entries', (t) => {
    t.text('tenant').notNullable();
    t.text('ns').notNullable();
    t.binary('key').notNullable();
    t.binary('value').notNullable();
    t.primary(['tenant', 'ns', 'key']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'sim_kv_entries',
    'serverless_functions',
    'serverless_db_namespaces',
    'serverless_cron_runs',
    'serverless_cron_schedules',
    'serverless_usage_days',
    'serverless_tokens',
    'serverless_tenants',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
}
