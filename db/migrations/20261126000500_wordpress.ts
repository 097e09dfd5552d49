import type { Knex } from 'knex';

/**
 * Hosted WordPress sites (docs/wordpress.md): a service (`wordpress-starter`) is one site.
 * - `wordpress_sites`: the site's platform hostname (`name`), where it answers, its database
 *   instance (a DBaaS MariaDB instance of the platform) with the site user's sealed password, its
 *   PHP version and settings as last applied, CDN and backup settings.
 * - `wordpress_domains`: the platform hostname and custom domains (`dom_<n>`), one primary per
 *   site; host names are unique platform-wide; certificate state and failed attempts.
 * - `wordpress_backups`: `bkp_<n>`, manual and scheduled, the archive's path on the site's host.
 * - `wordpress_recipes`, `wordpress_recipe_versions`: registered recipes; versions immutable.
 * - `wordpress_recipe_secrets`: generated secret values of a succeeded apply, sealed, claimable once
 *   until `expires_at`.
 * - `wordpress_recovery`: what the platform repaired on its own, and whether it gave up.
 * - `sim_wordpress_sites`: the simulator's state (WORDPRESS_BACKEND=simulator).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('wordpress_sites', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('name').notNullable().unique();
    t.text('ip');
    t.integer('http_port');
    t.text('db_instance').notNullable();
    t.text('db_name').notNullable();
    t.text('db_user').notNullable();
    t.text('db_password_sealed').notNullable();
    t.text('db_admin_password_sealed').notNullable();
    t.text('php_version').notNullable();
    t.boolean('cdn_enabled').notNullable().defaultTo(false);
    t.boolean('backups_enabled').notNullable().defaultTo(true);
    t.text('backups_frequency').notNullable().defaultTo('daily');
    t.integer('backups_retention_days').notNullable().defaultTo(7);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('wordpress_domains', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('domain').notNullable().unique();
    t.boolean('platform').notNullable().defaultTo(false);
    t.boolean('primary').notNullable().defaultTo(false);
    t.text('certificate_status').notNullable().defaultTo('none');
    t.jsonb('certificate_failures').notNullable().defaultTo('[]');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['service_id']);
  });
  await knex.raw('create unique index wordpress_domains_one_primary on wordpress_domains (service_id) where "primary"');
  await knex.schema.createTable('wordpress_backups', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('kind').notNullable();
    t.text('status').notNullable().defaultTo('running');
    t.bigInteger('size_bytes');
    t.text('path');
    t.text('operation_id');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('finished_at', { useTz: true });
    t.index(['service_id', 'created_at']);
  });
  // One running backup per site.
  await knex.raw("create unique index wordpress_backups_one_running on wordpress_backups (service_id) where status = 'running'");
  await knex.schema.createTable('wordpress_recipes', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['account_id', 'name']);
  });
  await knex.schema.createTable('wordpress_recipe_versions', (t) => {
    t.bigInteger('recipe_id').notNullable().references('wordpress_recipes.id').onDelete('CASCADE');
    t.text('version').notNullable();
    /** Numeric parts for ordering (X, Y, Z). */
    t.specificType('version_parts', 'integer[]').notNullable();
    t.jsonb('manifest').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['recipe_id', 'version']);
  });
  await knex.schema.createTable('wordpress_recipe_secrets', (t) => {
    t.text('operation_id').primary();
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('recipe').notNullable();
    t.text('version').notNullable();
    t.text('secrets_sealed').notNullable();
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('wordpress_recovery', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('action').notNullable();
    t.text('reason').notNullable();
    t.boolean('ok').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['service_id', 'created_at']);
  });
  await knex.schema.createTable('sim_wordpress_sites', (t) => {
    t.bigInteger('service_id').primary();
    t.jsonb('state').notNullable();
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'sim_wordpress_sites',
    'wordpress_recovery',
    'wordpress_recipe_secrets',
    'wordpress_recipe_versions',
    'wordpress_recipes',
    'wordpress_backups',
    'wordpress_domains',
    'wordpress_sites',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
}
