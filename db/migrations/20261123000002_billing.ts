import type { Knex } from 'knex';

/**
 * Billing keeps its own records and the control plane its own: account credit moves to billing's
 * `billing_accounts`; a service created by an order names its order and product family itself
 * (before, only billing's `service_billing` knew); billing marks the cancellations it carried out.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.schema.createTable('billing_accounts', (t) => {
    t.bigInteger('account_id').primary().references('accounts.id').onDelete('CASCADE');
    t.decimal('credit', 12, 2).notNullable().defaultTo(0);
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(knex.fn.now());
  });
  await knex.raw('insert into billing_accounts (account_id, credit) select id, coalesce(credit, 0) from accounts');
  await knex.schema.alterTable('accounts', (t) => t.dropColumn('credit'));

  await knex.schema.alterTable('services', (t) => {
    t.bigInteger('order_id').references('orders.id').onDelete('SET NULL');
    t.text('product_family');
    t.index(['order_id']);
  });
  await knex.raw('update services s set order_id = sb.order_id, product_family = sb.product_family from service_billing sb where sb.service_id = s.id');

  await knex.schema.alterTable('service_billing', (t) => t.timestamp('cancellation_executed_at', { useTz: true }));
}

export async function down(knex: Knex): Promise<void> {
  await knex.schema.alterTable('service_billing', (t) => t.dropColumn('cancellation_executed_at'));
  await knex.schema.alterTable('services', (t) => {
    t.dropIndex(['order_id']);
    t.dropColumn('order_id');
    t.dropColumn('product_family');
  });
  await knex.schema.alterTable('accounts', (t) => t.decimal('credit', 12, 2));
  await knex.raw('update accounts a set credit = b.credit from billing_accounts b where b.account_id = a.id');
  await knex.schema.dropTable('billing_accounts');
}
