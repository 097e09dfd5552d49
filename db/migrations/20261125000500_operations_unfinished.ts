import type { Knex } from 'knex';

/**
 * The unfinished operations whose workflow has been seen, by id: the orphan sweeper walks them in
 * batches to find those whose workflow was closed without recording an outcome (terminated,
 * cancelled or timed out from outside), without scanning the finished ones.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`create index operations_seen_unfinished on operations (id) where workflow_seen_at is not null and status in ('pending', 'running')`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists operations_seen_unfinished');
}
