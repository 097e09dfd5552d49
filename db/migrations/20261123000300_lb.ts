import type { Knex } from 'knex';

/**
 * Load balancers (docs/lb.md).
 *
 * Control plane:
 * - `lb_balancers`: the balancer of an lb service, the address its listeners bind and its listener
 *   set as one document (DECISIONS' listener shape, IPv6 in short form). The set is only ever
 *   replaced whole, after the backend has applied it, so the row always describes what runs.
 *
 * Simulator (providers/simulator/lb.simulator.ts), standing in for HAProxy with LB_BACKEND=simulator:
 * - `sim_lb_balancers`: the simulated balancer, its applied set, whether it runs, and backends
 *   marked down by hand (it moves no traffic, so nothing else could make them fail).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('lb_balancers', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('address').notNullable();
    t.jsonb('listeners').notNullable().defaultTo('[]');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('sim_lb_balancers', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('address').notNullable();
    t.text('state').notNullable(); // running | stopped
    t.jsonb('listeners').notNullable().defaultTo('[]');
    // `listener|ip|port` -> 'down' for backends the simulator was told are not answering.
    t.jsonb('backend_health').notNullable().defaultTo('{}');
    t.timestamp('started_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['address']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('sim_lb_balancers');
  await knex.schema.dropTableIfExists('lb_balancers');
}
