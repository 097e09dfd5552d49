import type { Knex } from 'knex';

/** Accounts, people, credentials, services, operations, idempotency, audit log, event outbox. */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('instance_settings', (t) => {
    t.text('key').primary();
    t.text('value').notNullable();
  });

  await knex.schema.createTable('accounts', (t) => {
    t.bigIncrements('id');
    t.text('name');
    t.text('company');
    t.text('email');
    t.text('country');
    t.text('status').notNullable().defaultTo('active');
    t.text('currency').notNullable().defaultTo('EUR');
    t.decimal('credit', 12, 2).notNullable().defaultTo(0);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('users', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('email').notNullable();
    t.text('password_hash').notNullable();
    t.boolean('is_owner').notNullable().defaultTo(false);
    // Owners hold every scope; for everyone else this is the user's permission set.
    t.specificType('scopes', 'text[]').notNullable().defaultTo('{}');
    // false: the user sees only the services listed in user_service_permissions.
    t.boolean('all_services').notNullable().defaultTo(true);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.raw('create unique index users_email_unique on users (lower(email))');

  await knex.schema.createTable('services', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('family').notNullable();
    t.text('product');
    t.text('status').notNullable();
    t.text('name');
    t.text('label');
    t.text('primary_ip');
    t.text('billing_cycle');
    t.date('next_due_date');
    t.jsonb('capabilities').notNullable().defaultTo('{}');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['account_id', 'id']);
  });

  await knex.schema.createTable('user_service_permissions', (t) => {
    t.bigInteger('user_id').notNullable().references('users.id').onDelete('CASCADE');
    t.bigInteger('service_id').notNullable().references('services.id').onDelete('CASCADE');
    t.primary(['user_id', 'service_id']);
  });

  await knex.schema.createTable('sessions', (t) => {
    t.bigIncrements('id');
    t.text('token_hash').notNullable().unique();
    t.bigInteger('user_id').notNullable().references('users.id').onDelete('CASCADE');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.timestamp('ended_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });

  await knex.schema.createTable('api_keys', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.bigInteger('user_id').notNullable().references('users.id').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('token_hash').notNullable().unique();
    t.text('token_prefix').notNullable();
    t.text('token_last4').notNullable();
    t.specificType('scopes', 'text[]').notNullable();
    // Empty: the whole account.
    t.specificType('service_allowlist', 'bigint[]').notNullable().defaultTo('{}');
    t.text('rate_limit_tier');
    t.timestamp('last_used_at', { useTz: true });
    t.timestamp('expires_at', { useTz: true });
    t.timestamp('revoked_at', { useTz: true });
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['account_id', 'id']);
  });

  await knex.schema.createTable('operations', (t) => {
    t.text('id').primary(); // op_<ulid>, also the Temporal workflow id
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('type').notNullable();
    t.text('status').notNullable();
    t.integer('progress');
    t.text('resource_object');
    t.text('resource_id');
    t.bigInteger('service_id'); // visibility: the service the operation acts on, if any
    t.jsonb('result');
    t.jsonb('error');
    t.text('credential_id');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('completed_at', { useTz: true });
    t.index(['account_id', 'id']);
    t.index(['account_id', 'resource_id']);
  });

  await knex.schema.createTable('idempotency_keys', (t) => {
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('key').notNullable();
    t.text('method').notNullable();
    t.text('path').notNullable();
    t.text('request_hash').notNullable();
    t.text('state').notNullable(); // running | done
    t.integer('response_status');
    t.jsonb('response_headers');
    t.jsonb('response_body');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('expires_at', { useTz: true }).notNullable();
    t.primary(['account_id', 'key']);
    t.index(['expires_at']);
  });

  await knex.schema.createTable('audit_logs', (t) => {
    t.bigIncrements('id');
    t.text('request_id').notNullable();
    t.bigInteger('account_id'); // null when the request could not be authenticated
    t.text('method').notNullable();
    t.text('path').notNullable();
    t.text('route');
    t.integer('status').notNullable();
    t.text('error_code');
    t.text('scope_required');
    t.text('credential_id');
    t.text('ip');
    t.text('via');
    t.integer('duration_ms');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['account_id', 'id']);
  });

  // Outbox: events are written in the transaction that causes them and fanned out later.
  await knex.schema.createTable('events', (t) => {
    t.text('id').primary(); // evt_<ulid>
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('type').notNullable();
    t.jsonb('data').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('dispatched_at', { useTz: true });
  });
  await knex.raw('create index events_undispatched on events (created_at) where dispatched_at is null');

  // Simulator switchboard: which backend families are down (see /_dev/backends/{family}/outage).
  await knex.schema.createTable('sim_backends', (t) => {
    t.text('family').primary();
    t.boolean('down').notNullable().defaultTo(false);
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of [
    'sim_backends',
    'events',
    'audit_logs',
    'idempotency_keys',
    'operations',
    'api_keys',
    'sessions',
    'user_service_permissions',
    'services',
    'users',
    'accounts',
    'instance_settings',
  ]) {
    await knex.schema.dropTableIfExists(table);
  }
}
