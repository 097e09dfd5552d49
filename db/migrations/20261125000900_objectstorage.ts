import type { Knex } from 'knex';

/**
 * Object storage (docs/objectstorage.md):
 * - `objectstorage_services`: an account's object storage (its live `objectstorage` service), where
 *   its buckets are reached and the prefix its keys may create buckets under over S3.
 * - `objectstorage_buckets`: every bucket of an account, those created directly over S3 too
 *   (`created_at` null). Names are unique across accounts: one S3 namespace per platform.
 * - `objectstorage_keys`: S3 keys, the secret sealed (it signs presigned URLs); `deleted_at` once deleted.
 * - `objectstorage_bucket_days`: one point per bucket and UTC day (bytes stored, bytes sent, requests),
 *   and `objectstorage_counter_readings` the server's counters at the last snapshot (the days get the
 *   difference).
 * - `objectstorage_empty_pages`: the keys an `objectstorage.empty` page deletes, written before it
 *   deletes them, so a retried page deletes the same keys and counts them once.
 * - `sim_objectstorage_*`: the simulator's server.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('objectstorage_services', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable().index();
    t.text('s3_endpoint').notNullable();
    t.text('region').notNullable();
    t.text('bucket_prefix').notNullable();
    // The host whose server holds its buckets (null: on no host, the simulator). Kept after termination,
    // when the placement is released, so that host's keeper deletes the buckets after the retention.
    t.text('host');
    // Set when billing terminated the service: its keys are gone, its buckets go after the retention.
    t.timestamp('terminated_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('objectstorage_buckets', (t) => {
    t.text('name').primary();
    t.bigInteger('service_id').notNullable().references('objectstorage_services.service_id').onDelete('CASCADE');
    t.text('access').notNullable().defaultTo('private');
    t.text('public_url');
    t.timestamp('created_at', { useTz: true });
    t.timestamp('recorded_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['service_id', 'name']);
  });
  await knex.schema.createTable('objectstorage_keys', (t) => {
    t.bigIncrements('id').primary();
    t.bigInteger('service_id').notNullable().references('objectstorage_services.service_id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('access_key_id');
    t.text('secret_sealed');
    t.text('scope');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('deleted_at', { useTz: true });
    t.index(['service_id', 'id']);
  });
  await knex.raw('CREATE UNIQUE INDEX objectstorage_keys_access_key_id ON objectstorage_keys (access_key_id) WHERE access_key_id IS NOT NULL');
  await knex.schema.createTable('objectstorage_bucket_days', (t) => {
    t.bigInteger('service_id').notNullable().references('objectstorage_services.service_id').onDelete('CASCADE');
    t.text('bucket').notNullable();
    t.date('day').notNullable();
    t.bigInteger('storage_bytes').notNullable().defaultTo(0);
    t.bigInteger('object_count').notNullable().defaultTo(0);
    t.bigInteger('egress_bytes').notNullable().defaultTo(0);
    t.bigInteger('requests').notNullable().defaultTo(0);
    t.timestamp('taken_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'bucket', 'day']);
  });
  await knex.schema.createTable('objectstorage_counter_readings', (t) => {
    t.bigInteger('service_id').notNullable().references('objectstorage_services.service_id').onDelete('CASCADE');
    t.text('bucket').notNullable();
    t.text('epoch').notNullable();
    t.bigInteger('bytes_sent').notNullable();
    t.bigInteger('requests').notNullable();
    t.primary(['service_id', 'bucket']);
  });
  await knex.schema.createTable('objectstorage_snapshots', (t) => {
    t.bigInteger('service_id').notNullable().references('objectstorage_services.service_id').onDelete('CASCADE');
    t.date('day').notNullable();
    t.bigInteger('storage_bytes').notNullable();
    t.bigInteger('object_count').notNullable();
    t.timestamp('taken_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['service_id', 'day']);
  });
  await knex.schema.createTable('objectstorage_empty_pages', (t) => {
    t.text('operation_id').notNullable();
    t.integer('page').notNullable();
    t.jsonb('keys').notNullable();
    t.primary(['operation_id', 'page']);
  });
  await knex.schema.createTable('sim_objectstorage_buckets', (t) => {
    t.text('name').primary();
    t.boolean('public').notNullable().defaultTo(false);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.schema.createTable('sim_objectstorage_objects', (t) => {
    t.text('bucket').notNullable().references('sim_objectstorage_buckets.name').onDelete('CASCADE');
    t.text('key').notNullable();
    t.bigInteger('size_bytes').notNullable();
    t.text('etag').notNullable();
    t.timestamp('last_modified', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.primary(['bucket', 'key']);
  });
  await knex.schema.createTable('sim_objectstorage_keys', (t) => {
    t.text('name').primary();
    t.text('access_key_id').notNullable();
    t.jsonb('access');
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'sim_objectstorage_keys',
    'sim_objectstorage_objects',
    'sim_objectstorage_buckets',
    'objectstorage_empty_pages',
    'objectstorage_snapshots',
    'objectstorage_counter_readings',
    'objectstorage_bucket_days',
    'objectstorage_keys',
    'objectstorage_buckets',
    'objectstorage_services',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
}
