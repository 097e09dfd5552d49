import type { Knex } from 'knex';

/**
 * Container apps (docs/caas.md): a service (`caas-starter`) holds apps, each built from a source
 * archive into deployments, served by `Host` through the service's router.
 * - `caas_services`: where the service's router listens (`ip`, `ingress_url`), set when it is built.
 * - `caas_apps`: the apps; `status` and `current_deployment_id` (the serving one) as SPEC's table says.
 * - `caas_deployments`: the history (newest first by id), each with its image's tag and its
 *   container's port while it runs.
 * - `caas_env`: an app's variables, values sealed (never returned).
 * - `caas_domains`: host names routed to apps (one app per host, platform-wide).
 * - `caas_databases`: the service's databases; the password sealed, returned by no endpoint.
 * - `caas_db_servers`: the service's database servers (a DBaaS instance per engine), their admin
 *   password sealed.
 * - `caas_logs`: build and platform lines of each deployment (the app's own output is read from
 *   its container).
 * - `sim_caas_*`: the simulator's state (CAAS_BACKEND=simulator).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('caas_services', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('ip').notNullable();
    t.text('ingress_url').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('caas_apps', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.jsonb('source');
    t.text('status').notNullable().defaultTo('idle');
    t.text('current_deployment_id');
    t.text('default_host').notNullable().unique();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['service_id', 'name']);
  });
  await knex.schema.createTable('caas_deployments', (t) => {
    t.text('id').primary();
    t.bigInteger('app_id').notNullable().references('caas_apps.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable();
    t.text('operation_id');
    t.text('status').notNullable().defaultTo('pending');
    t.text('source_sha256');
    t.text('error_code');
    t.text('error_message');
    t.integer('host_port');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('finished_at', { useTz: true });
    t.index(['app_id', 'id']);
  });
  // One deployment of an app in progress at a time (a second deploy is 409 conflict).
  await knex.raw(`create unique index caas_deployments_one_running on caas_deployments (app_id) where status in ('pending', 'building', 'starting')`);
  await knex.schema.createTable('caas_env', (t) => {
    t.bigInteger('app_id').notNullable().references('caas_apps.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('value_sealed').notNullable();
    t.integer('position').notNullable();
    t.primary(['app_id', 'name']);
  });
  await knex.schema.createTable('caas_domains', (t) => {
    t.text('host').primary();
    t.bigInteger('app_id').notNullable().references('caas_apps.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('caas_databases', (t) => {
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('engine').notNullable();
    t.text('env_var').notNullable();
    t.text('username').notNullable();
    t.text('password_sealed').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'name']);
  });
  await knex.schema.createTable('caas_db_servers', (t) => {
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('engine').notNullable();
    t.text('instance').notNullable().unique();
    t.text('admin_password_sealed').notNullable();
    t.primary(['service_id', 'engine']);
  });
  await knex.schema.createTable('caas_logs', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('app_id').notNullable().references('caas_apps.id').onDelete('CASCADE');
    t.text('deployment_id');
    t.text('source').notNullable();
    t.timestamp('at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text('message').notNullable();
    t.index(['app_id', 'id']);
  });
  await knex.schema.createTable('sim_caas_deployments', (t) => {
    t.text('deployment_id').primary();
    t.bigInteger('service_id').notNullable();
    t.text('app').notNullable();
    t.text('state').notNullable();
    t.jsonb('env');
    t.timestamp('started_at', { useTz: true });
  });
  await knex.schema.createTable('sim_caas_routes', (t) => {
    t.bigInteger('service_id').notNullable();
    t.text('app').notNullable();
    t.specificType('hosts', 'text[]').notNullable();
    t.text('deployment_id');
    t.primary(['service_id', 'app']);
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'sim_caas_routes',
    'sim_caas_deployments',
    'caas_logs',
    'caas_db_servers',
    'caas_databases',
    'caas_domains',
    'caas_env',
    'caas_deployments',
    'caas_apps',
    'caas_services',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
}
