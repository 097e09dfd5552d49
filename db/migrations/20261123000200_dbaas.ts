import type { Knex } from 'knex';

/**
 * Managed databases.
 *
 * Control plane (what the API serves lists and connection details from):
 * - `dbaas_instances`: which backend instance serves a dbaas service, its engine, its admin user
 *   with the admin password sealed by the keyring (`dbaas-admin-password`), and where clients
 *   reach it (host, port, default database, TLS mode, the CA that signed its certificate).
 *   Customer users' passwords are stored nowhere.
 *
 * DBaaS simulator (providers/simulator/dbaas.simulator.ts), standing in for the instances that
 * providers/dbinstances/ runs for real: instances, their databases, users (a hash of the password,
 * for simulated logins), the sessions of simulated clients (so a restart or a deleted user can end
 * them), the engine log and backups (dump tasks of the shared task engine, so they take time).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw('create sequence sim_dbaas_address_seq start 10');

  await knex.schema.createTable('sim_dbaas_instances', (t) => {
    t.text('name').primary();
    t.bigInteger('service_id').references('services.id').onDelete('SET NULL');
    t.text('engine').notNullable(); // postgresql | mysql
    t.text('version').notNullable();
    t.text('host').notNullable();
    t.integer('port').notNullable();
    t.text('admin_username').notNullable();
    t.text('state').notNullable(); // running | stopped
    t.timestamp('started_at', { useTz: true });
    // Counters a real engine keeps in its statistics views.
    t.bigInteger('commits').notNullable().defaultTo(0);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('sim_dbaas_databases', (t) => {
    t.text('instance').notNullable().references('sim_dbaas_instances.name').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('owner');
    t.text('charset');
    t.text('collation');
    t.bigInteger('size_bytes').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['instance', 'name']);
  });

  await knex.schema.createTable('sim_dbaas_users', (t) => {
    t.text('instance').notNullable().references('sim_dbaas_instances.name').onDelete('CASCADE');
    t.text('username').notNullable();
    // `%` for MySQL accounts made here; '' on PostgreSQL, which has no host part.
    t.text('host').notNullable();
    t.text('password_hash').notNullable();
    t.boolean('is_admin').notNullable().defaultTo(false);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['instance', 'username', 'host']);
  });

  await knex.schema.createTable('sim_dbaas_sessions', (t) => {
    t.bigIncrements('id');
    t.text('instance').notNullable().references('sim_dbaas_instances.name').onDelete('CASCADE');
    t.text('username').notNullable();
    t.text('database');
    t.timestamp('opened_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['instance', 'username']);
  });

  await knex.schema.createTable('sim_dbaas_log', (t) => {
    t.bigIncrements('id');
    t.text('instance').notNullable().references('sim_dbaas_instances.name').onDelete('CASCADE');
    t.timestamp('at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text('level').notNullable();
    t.text('message').notNullable();
    t.index(['instance', 'id']);
  });

  await knex.schema.createTable('sim_dbaas_backups', (t) => {
    t.text('id').primary();
    t.text('instance').notNullable().references('sim_dbaas_instances.name').onDelete('CASCADE');
    t.text('request_key').notNullable();
    t.bigInteger('size_bytes').notNullable();
    // What the dump holds, to show in tests that it is a snapshot of that moment.
    t.jsonb('databases').notNullable();
    // The dump is a task of the shared task engine (sim_tasks): its state is the backup's.
    t.text('task_id').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.unique(['instance', 'request_key']);
  });

  await knex.schema.createTable('dbaas_instances', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('instance').notNullable().unique(); // the provider's name for it
    t.text('engine').notNullable(); // postgresql | mysql
    t.text('admin_username').notNullable();
    t.text('sealed_admin_password').notNullable();
    // Known once the instance exists (null while it is being built).
    t.text('host');
    t.integer('port');
    t.text('default_database');
    t.text('tls_mode');
    t.text('ca_certificate');
    t.timestamp('ready_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'dbaas_instances',
    'sim_dbaas_backups',
    'sim_dbaas_log',
    'sim_dbaas_sessions',
    'sim_dbaas_users',
    'sim_dbaas_databases',
    'sim_dbaas_instances',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
  await knex.raw('drop sequence if exists sim_dbaas_address_seq');
}
