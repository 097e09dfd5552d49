import type { Knex } from 'knex';

/**
 * The family kit: one table of simulated tasks for every simulator (replacing the hypervisor's own
 * task table and the generic provisioner's build jobs), armed faults, and the teardown mark of
 * terminated services.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('sim_tasks', (t) => {
    t.text('id').primary();
    t.text('backend').notNullable();
    t.text('subject').notNullable();
    t.text('request_key').unique();
    t.text('kind').notNullable();
    t.jsonb('params').notNullable().defaultTo('{}');
    t.text('status').notNullable();
    t.text('will_fail');
    t.text('error');
    t.timestamp('starts_at', { useTz: true }).notNullable();
    t.timestamp('ends_at', { useTz: true }).notNullable();
    t.timestamp('finished_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['backend', 'subject', 'status', 'ends_at']);
  });
  await knex.schema.createTable('sim_task_faults', (t) => {
    t.text('backend').notNullable();
    t.text('subject').notNullable();
    t.text('kind');
    t.text('message').notNullable();
    t.primary(['backend', 'subject']);
  });

  // Carry over what an existing local database holds.
  await knex.raw(`
    insert into sim_tasks (id, backend, subject, request_key, kind, params, status, will_fail, error, starts_at, ends_at, finished_at)
    select upid, 'vps', vmid::text, request_key, kind, params, status, will_fail, error, starts_at, ends_at, finished_at from sim_hv_tasks`);
  await knex.raw(`
    insert into sim_task_faults (backend, subject, kind, message)
    select 'vps', vmid::text, fail_next_task_kind, fail_next_task from sim_hv_machines where fail_next_task is not null`);
  await knex.raw(`
    insert into sim_tasks (id, backend, subject, request_key, kind, params, status, starts_at, ends_at)
    select 'build-' || service_id, backend, service_id::text, 'provision:' || service_id, 'build',
           jsonb_build_object('primary_ip', primary_ip), 'running', started_at, ready_at from sim_provisioning`);
  await knex.schema.dropTable('sim_hv_tasks');
  await knex.schema.dropTable('sim_provisioning');
  await knex.schema.alterTable('sim_hv_machines', (t) => {
    t.dropColumn('fail_next_task');
    t.dropColumn('fail_next_task_kind');
  });

  await knex.schema.alterTable('services', (t) => {
    t.timestamp('deprovisioned_at', { useTz: true });
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('services', (t) => t.dropColumn('deprovisioned_at'));
  await knex.schema.alterTable('sim_hv_machines', (t) => {
    t.text('fail_next_task');
    t.text('fail_next_task_kind');
  });
  await knex.schema.createTable('sim_provisioning', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('backend').notNullable();
    t.timestamp('started_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('ready_at', { useTz: true }).notNullable();
    t.text('primary_ip');
  });
  await knex.schema.createTable('sim_hv_tasks', (t) => {
    t.text('upid').primary();
    t.integer('vmid').notNullable();
    t.text('request_key').unique();
    t.text('kind').notNullable();
    t.jsonb('params').notNullable().defaultTo('{}');
    t.text('status').notNullable();
    t.text('will_fail');
    t.text('error');
    t.timestamp('starts_at', { useTz: true }).notNullable();
    t.timestamp('ends_at', { useTz: true }).notNullable();
    t.timestamp('finished_at', { useTz: true });
  });
  await knex.schema.dropTable('sim_task_faults');
  await knex.schema.dropTable('sim_tasks');
}
