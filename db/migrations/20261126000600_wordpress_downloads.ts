import type { Knex } from 'knex';

/**
 * Hosted WordPress backups' download URLs (POST /v1/wordpress/{id}/backups/{backup_id}/download):
 * the URL is a credential, so only the SHA-256 of its random token is stored, with the backup it
 * opens and its expiry. `GET /downloads/wordpress-backups/{token}` looks it up; the rows go with
 * their backup (deleted, pruned) and are purged a day after they expire (the backup scheduler's pass).
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('wordpress_backup_downloads', (t) => {
    t.text('token_sha256').primary();
    t.bigInteger('backup_id').notNullable().references('wordpress_backups.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['backup_id']);
    t.index(['expires_at']);
  });
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.dropTableIfExists('wordpress_backup_downloads');
}
