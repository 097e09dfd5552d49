import type { Knex } from 'knex';

/**
 * Hardening (docs/security.md):
 * - `events.service_id`: the service an event concerns, so that credentials narrowed to some
 *   services do not read other services' events in webhook delivery records;
 * - an order's operation takes the service the order created (`operations.service_id`), so its
 *   visibility follows that service's like every other operation's;
 * - `login_throttle`: sign-in attempts per email and per client IP in a fixed window, shared by
 *   every API process;
 * - idempotency keys: the attempt that holds a record (`owner_token`, `locked_at`), for safe
 *   takeovers, and the operation its request created (`operation_id`), so a retry returns it;
 * - `operations.workflow_seen_at`: when the operation's workflow was first seen (a transition, or the
 *   orphan sweeper finding it); unfinished rows without it are what the orphan sweeper checks.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.alterTable('events', (t) => {
    t.bigInteger('service_id');
  });
  await knex.raw(`
    update operations o set service_id = sb.service_id
      from orders ord join service_billing sb on sb.order_id = ord.id
     where o.id = ord.operation_id and o.service_id is null`);
  await knex.raw(`
    update events e set service_id = substring(e.data->>'id' from '^svc_([0-9]+)$')::bigint
     where e.type like 'service.%' and e.data->>'id' ~ '^svc_[0-9]+$'`);
  await knex.raw(`
    update events e set service_id = o.service_id
      from operations o
     where e.type = 'operation.completed' and o.id = e.data->>'id' and o.service_id is not null`);

  await knex.schema.createTable('login_throttle', (t) => {
    t.text('bucket').primary(); // email:<sha256 of the lower-case address> | ip:<address>
    t.integer('attempts').notNullable();
    t.timestamp('window_started_at', { useTz: true }).notNullable();
    t.index(['window_started_at']);
  });

  await knex.schema.alterTable('idempotency_keys', (t) => {
    t.text('owner_token').notNullable().defaultTo(knex.raw('gen_random_uuid()::text'));
    t.timestamp('locked_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.text('operation_id').references('operations.id').onDelete('SET NULL');
  });
  await knex.raw('update idempotency_keys set locked_at = created_at');

  await knex.schema.alterTable('operations', (t) => {
    t.timestamp('workflow_seen_at', { useTz: true });
  });
  await knex.raw(`update operations set workflow_seen_at = updated_at where status in ('succeeded', 'failed') or progress is not null`);
  await knex.raw(`create index operations_unconfirmed on operations (created_at) where workflow_seen_at is null and status in ('pending', 'running')`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw('drop index if exists operations_unconfirmed');
  await knex.schema.alterTable('operations', (t) => {
    t.dropColumn('workflow_seen_at');
  });
  await knex.schema.alterTable('idempotency_keys', (t) => {
    t.dropColumn('operation_id');
    t.dropColumn('locked_at');
    t.dropColumn('owner_token');
  });
  await knex.schema.dropTableIfExists('login_throttle');
  await knex.schema.alterTable('events', (t) => {
    t.dropColumn('service_id');
  });
}
