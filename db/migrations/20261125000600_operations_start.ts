import type { Knex } from 'knex';

/**
 * `operations.workflow_start`: what starting the operation's workflow takes (the workflow's name and
 * its input beyond `operationId`), written with the row. The committed row is the intent: whoever
 * finds it without its workflow (the orphan sweeper, after a process died between commit and start)
 * starts that workflow from it, under the operation's id, so the action runs once. The input never
 * holds a secret in clear (sealed values stay sealed, docs/architecture.md). Null for rows written
 * before, and for the synchronous ones (`recordCompleted`).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('operations', (t) => {
    t.jsonb('workflow_start');
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('operations', (t) => {
    t.dropColumn('workflow_start');
  });
}
