import type { Knex } from 'knex';

/**
 * `host_transfers`: what one host hands another through the database they share, in order, while a
 * server moves between them (docs/hosts.md "Moving": a database instance's dump, in 1 MiB chunks).
 * Deleted once the move is over, whatever its outcome.
 */
export async function up(knex: Knex): Promise<void> {
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
}
