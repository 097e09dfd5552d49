import type { Knex } from 'knex';

/**
 * Orders and billing (the billing simulator's state): product catalog with prices per currency and
 * billing cycle, payment methods, promo codes, orders (`ord_<n>`), invoices (`inv_<n>`), the billing
 * side of the services an order created, and the generic provisioning simulator's jobs.
 * Account credit is the existing `accounts.credit` column.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('products', (t) => {
    t.bigIncrements('id');
    t.text('slug').notNullable().unique();
    t.text('name').notNullable();
    t.text('description');
    // Family of the Service resource it creates (vps ... mailgateway, other).
    t.text('family').notNullable();
    // The real product family (wordpress, images, serverless are `other` as services).
    t.text('product_family').notNullable();
    // Option definitions: [{name, type, required, default, values, min, max, pattern, description}].
    t.jsonb('options_schema').notNullable().defaultTo('[]');
    // Capabilities of the service it creates.
    t.jsonb('capabilities').notNullable().defaultTo('{}');
    // Hosted sites need a `site_name` (their hostname).
    t.boolean('requires_site_name').notNullable().defaultTo(false);
    t.boolean('hidden').notNullable().defaultTo(false);
    t.boolean('retired').notNullable().defaultTo(false);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.index(['family']);
  });

  // Only cycles actually sold have a row.
  await knex.schema.createTable('product_prices', (t) => {
    t.bigInteger('product_id').notNullable().references('products.id').onDelete('CASCADE');
    t.text('currency').notNullable();
    t.text('billing_cycle').notNullable();
    t.decimal('amount', 12, 2).notNullable();
    t.primary(['product_id', 'currency', 'billing_cycle']);
  });

  await knex.schema.createTable('payment_methods', (t) => {
    t.text('id').primary(); // the value accepted as `payment_method`
    t.text('name').notNullable();
    t.boolean('is_default').notNullable().defaultTo(false);
    t.boolean('active').notNullable().defaultTo(true);
    t.integer('position').notNullable().defaultTo(0);
  });
  await knex.raw('create unique index payment_methods_one_default on payment_methods (is_default) where is_default');

  await knex.schema.createTable('promo_codes', (t) => {
    t.text('code').primary(); // stored upper case; matched case-insensitively
    t.decimal('percent_off', 5, 2).notNullable();
    // null: every product / every cycle.
    t.specificType('product_slugs', 'text[]');
    t.specificType('billing_cycles', 'text[]');
    t.integer('max_uses');
    t.integer('uses').notNullable().defaultTo(0);
    t.boolean('active').notNullable().defaultTo(true);
    t.timestamp('expires_at', { useTz: true });
  });

  await knex.schema.createTable('orders', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.text('operation_id').notNullable().unique();
    t.bigInteger('product_id').notNullable().references('products.id');
    t.text('product').notNullable();
    t.text('billing_cycle').notNullable();
    t.jsonb('options').notNullable().defaultTo('{}');
    t.text('promo_code');
    t.text('site_name');
    t.text('payment_method').notNullable();
    t.text('currency').notNullable();
    // Price of the first cycle and the promo discount, fixed when the order is placed.
    t.decimal('price', 12, 2).notNullable();
    t.decimal('percent_off', 5, 2).notNullable().defaultTo(0);
    // pending (invoice unpaid) | active (invoice settled) | cancelled (voided before payment)
    t.text('status').notNullable();
    // Cancellation requested on an active order: immediate | end_of_cycle.
    t.text('cancellation_type');
    t.text('cancellation_reason');
    t.timestamp('cancellation_requested_at', { useTz: true });
    t.text('credential_id');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('paid_at', { useTz: true });
    t.timestamp('cancelled_at', { useTz: true });
    t.index(['account_id', 'id']);
    t.index(['site_name']);
  });

  await knex.schema.createTable('invoices', (t) => {
    t.bigIncrements('id');
    t.bigInteger('account_id').notNullable().references('accounts.id').onDelete('CASCADE');
    t.bigInteger('order_id').notNullable().unique().references('orders.id').onDelete('CASCADE');
    t.text('status').notNullable(); // unpaid | paid | cancelled
    t.text('currency').notNullable();
    t.decimal('subtotal', 12, 2).notNullable();
    t.decimal('discount', 12, 2).notNullable().defaultTo(0);
    t.decimal('total', 12, 2).notNullable();
    t.decimal('credit_applied', 12, 2).notNullable().defaultTo(0);
    // How it was settled: free | promo | credit | payment_method (null while unpaid).
    t.text('settled_by');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('paid_at', { useTz: true });
    t.timestamp('cancelled_at', { useTz: true });
    t.index(['account_id', 'id']);
  });

  // The billing side of a service created by an order (the contract status stays in services.status).
  await knex.schema.createTable('service_billing', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.bigInteger('order_id').notNullable().references('orders.id').onDelete('CASCADE');
    t.text('product_family').notNullable();
    t.decimal('recurring_amount', 12, 2).notNullable();
    t.text('currency').notNullable();
    t.text('cancellation_type'); // immediate | end_of_cycle
    t.text('cancellation_reason');
    t.timestamp('cancellation_requested_at', { useTz: true });
    t.date('cancellation_effective_date');
    t.index(['order_id']);
  });

  // Generic provisioning simulator: one job per service.
  await knex.schema.createTable('sim_provisioning', (t) => {
    t.bigInteger('service_id').primary().references('services.id').onDelete('CASCADE');
    t.text('backend').notNullable();
    t.timestamp('started_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
    t.timestamp('ready_at', { useTz: true }).notNullable();
    t.text('primary_ip');
  });
}

export async function down(knex: Knex): Promise<void> {
  for (const table of ['sim_provisioning', 'service_billing', 'invoices', 'orders', 'promo_codes', 'payment_methods', 'product_prices', 'products']) {
    await knex.schema.dropTableIfExists(table);
  }
}
