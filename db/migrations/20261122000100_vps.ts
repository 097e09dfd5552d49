import type { Knex } from 'knex';

/**
 * Virtual servers.
 *
 * Control plane (what the API serves lists from):
 * - `vps_servers`: which hypervisor machine (vmid) backs a VPS service, its last known node,
 *   type and hostname, and the reinstall in progress. `reinstalling` is derived from
 *   `reinstall_operation_id`, which falls back to null if the operation row is taken back.
 * - `vps_reinstall_secrets`: the sealed root password of a reinstall, keyed by operation id,
 *   deleted once the hypervisor has it (or with the operation row).
 *
 * Hypervisor simulator (providers/simulator/hypervisor.simulator.ts), standing in for the real
 * cluster: machines, their tasks (which take time), backups in storage, console tickets.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw('create sequence sim_hv_vmid_seq start 100');

  await knex.schema.createTable('sim_hv_machines', (t) => {
    t.integer('vmid').primary();
    t.text('node').notNullable();
    t.text('type').notNullable(); // qemu | lxc
    // The service the machine was built for (the simulator's link; the control plane keeps its own).
    t.bigInteger('service_id').unique().references('services.id').onDelete('SET NULL');
    t.text('name').notNullable(); // VM name / container hostname
    t.text('os_hostname'); // what the guest OS uses; qemu picks up a rename at next boot
    t.text('state').notNullable(); // running | stopped | paused
    t.timestamp('started_at', { useTz: true });
    t.timestamp('agent_ready_at', { useTz: true });
    t.integer('cores').notNullable();
    t.integer('memory_mb').notNullable();
    t.integer('disk_gb').notNullable();
    t.bigInteger('disk_used_bytes').notNullable().defaultTo(0);
    t.text('template');
    t.text('os_type');
    // What is on the disk (template install or restored backup), to prove overwrites in tests.
    t.text('disk_content');
    t.text('root_password_hash');
    t.text('ipv4').notNullable();
    t.text('ipv6').notNullable();
    // Fault injection: the next task of this machine (of this kind, when set) fails with this message.
    t.text('fail_next_task');
    t.text('fail_next_task_kind');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('sim_hv_tasks', (t) => {
    t.text('upid').primary();
    t.integer('vmid').notNullable().references('sim_hv_machines.vmid').onDelete('CASCADE');
    // Caller's key: the same key returns the same task (activities retry).
    t.text('request_key').unique();
    t.text('kind').notNullable(); // start | stop | reinstall | backup | restore
    t.jsonb('params').notNullable().defaultTo('{}');
    t.text('status').notNullable(); // running | ok | error
    t.text('will_fail');
    t.text('error');
    t.timestamp('starts_at', { useTz: true }).notNullable();
    t.timestamp('ends_at', { useTz: true }).notNullable();
    t.timestamp('finished_at', { useTz: true });
    t.index(['vmid', 'status']);
  });

  await knex.schema.createTable('sim_hv_backups', (t) => {
    t.text('volid').primary(); // <storage>:backup/<archive>
    t.integer('vmid').notNullable(); // a backup outlives its machine
    t.text('node').notNullable();
    t.text('storage').notNullable();
    t.text('archive').notNullable();
    t.text('type').notNullable();
    t.text('mode').notNullable();
    t.bigInteger('size_bytes').notNullable();
    t.text('disk_content');
    t.text('template');
    t.text('os_type');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['vmid']);
  });

  await knex.schema.createTable('sim_hv_console_tickets', (t) => {
    t.bigIncrements('id');
    t.integer('vmid').notNullable().references('sim_hv_machines.vmid').onDelete('CASCADE');
    t.text('ticket_hash').notNullable().unique();
    t.text('type').notNullable();
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('used_at', { useTz: true });
  });

  await knex.schema.createTable('vps_servers', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.integer('vmid').notNullable().unique();
    t.text('node');
    t.text('type').notNullable();
    t.text('hostname');
    t.text('reinstall_operation_id').references('operations.id').onDelete('SET NULL');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('vps_reinstall_secrets', (t) => {
    t.text('operation_id').primary().references('operations.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.text('sealed_root_password').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['vps_reinstall_secrets', 'vps_servers', 'sim_hv_console_tickets', 'sim_hv_backups', 'sim_hv_tasks', 'sim_hv_machines']) {
    await knex.schema.dropTableIfExists(table);
  }
  await knex.raw('drop sequence if exists sim_hv_vmid_seq');
}
