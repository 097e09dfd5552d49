import type { Knex } from 'knex';

/**
 * Hosts and placement (docs/hosts.md).
 *
 * - `hosts`: every host agent that registered: the families whose servers it runs, its capacity
 *   (how many resources, its address ranges), its heartbeat and the interval it promised, and
 *   whether an operator drained it (no new placements). A host is `down` three intervals after its
 *   last heartbeat; rows are never deleted by the system (a host that comes back finds its row).
 * - `placements`: the host the server of a service lives on, one row per placed service, written
 *   when the service is provisioned (or adopted by the host that has its server), moved by the
 *   move workflow, deleted when the service is torn down.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('hosts', (t) => {
    t.text('name').primary();
    t.specificType('families', 'text[]').notNullable();
    t.jsonb('capacity').notNullable();
    t.boolean('draining').notNullable().defaultTo(false);
    t.integer('heartbeat_interval_ms').notNullable();
    t.timestamp('registered_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('heartbeat_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('placements', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('family').notNullable();
    t.text('host').notNullable().references('hosts.name');
    t.timestamp('placed_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['host']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('placements');
  await knex.schema.dropTable('hosts');
}
