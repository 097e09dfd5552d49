import type { Knex } from 'knex';

/**
 * Moves between hosts (docs/hosts.md "Moving"):
 * - `host_transfers`: what one host hands another through the database they share, in order, while
 *   a server moves between them (a database instance's files, in 1 MiB chunks). Deleted once the move
 *   is over, whatever its outcome.
 * - `placements.moving_to`: the host a service's server is moving to, while it moves: one move at a
 *   time, and calls about it answer `503` meanwhile (nothing reaches a server being copied).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('placements', (t) => {
    t.text('moving_to');
  });
  await knex.schema.createTable('host_transfers', (t) => {
    t.text('transfer_id').notNullable();
    t.integer('seq').notNullable();
    t.binary('data').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['transfer_id', 'seq']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTable('host_transfers');
  await knex.schema.alterTable('placements', (t) => {
    t.dropColumn('moving_to');
  });
}
