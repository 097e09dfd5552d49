import type { Knex } from 'knex';

/**
 * Rate-limit counters shared by every API process (infra/rate-limit.ts): one row per bucket and
 * fixed window, counting the requests handed out to the processes, which lease them in chunks.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('rate_limit_counters', (t) => {
    t.text('bucket').notNullable();
    // Start of the fixed window, in epoch milliseconds (the same for every process).
    t.bigInteger('window_start').notNullable();
    t.integer('used').notNullable();
    t.primary(['bucket', 'window_start']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('rate_limit_counters');
}
