import knexFactory, { type Knex } from 'knex';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOrderActivities } from '../activities/orders/activities';
import { loadConfig } from '../common/config';
import { createLogger } from '../common/logger';
import { seedOrders } from '../db/seeds/orders.seed';
import { createProvisioners } from '../domain/provisioning';
import { loadKeyring } from '../infra/master-key';
import { createProviders, families } from '../families';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { createAccount } from './helpers/fixtures';
import { SHORT_DURATIONS } from './helpers/stack';

/**
 * The order's activities never hold a pooled connection while they wait for another one. A worker
 * runs many activities at once over a small pool (DATABASE_POOL_MAX): if each held a transaction and
 * then asked the pool for a second connection (a provider called with its own `db` inside
 * `db.transaction`), a burst of orders would take every connection and wait on each other until
 * knex's acquire timeout, and their workflows would stall (test/faults.api.test.ts saw it under load).
 * On a pool of ONE connection any such nesting cannot finish, whatever the timing: each activity is
 * run here on one, with a short acquire timeout so that a nesting fails in seconds, by name.
 */
let database: TestDatabase;
let oneConnection: Knex;

beforeAll(async () => {
  database = await createTestDatabase();
  await seedOrders(database.db);
  oneConnection = knexFactory({ client: 'pg', connection: database.url, pool: { min: 0, max: 1 }, acquireConnectionTimeout: 3_000 });
});
afterAll(async () => {
  await oneConnection?.destroy();
  await database?.drop();
});

/** An order paid for and active (its invoice settled), as placeOrder leaves a free one. */
async function activeOrder(db: Knex, accountId: number, zone: string): Promise<number> {
  const product = await db('products').where({ slug: 'dns-zone' }).first();
  const [order] = await db('orders')
    .insert({
      account_id: accountId,
      operation_id: `op_pool_${zone.replace(/\W/g, '_')}`,
      product_id: product.id,
      product: 'dns-zone',
      billing_cycle: 'monthly',
      options: JSON.stringify({ zone }),
      payment_method: 'card',
      currency: 'EUR',
      price: 0,
      status: 'pending',
    })
    .returning('id');
  return Number(order.id);
}

describe('order activities on a pool of one connection', () => {
  it('place the order, create its service, provision and activate it without waiting on a second connection', async () => {
    const db = oneConnection;
    const config = loadConfig({
      ...process.env,
      ...SHORT_DURATIONS,
      DATABASE_URL: database.url,
      DNS_BACKEND: 'simulator',
      LB_BACKEND: 'simulator',
      DBAAS_BACKEND: 'simulator',
      OBJECTSTORAGE_BACKEND: 'simulator',
    });
    const providers = createProviders({ db, config });
    const keyring = await loadKeyring(db, config.CLOUD_MASTER_KEY);
    const activities = createOrderActivities({
      db,
      providers,
      provisioners: createProvisioners({ db, providers, keyring, config }, families),
      operations: {
        attachService: async (operationId, serviceId) => void (await db('operations').where({ id: operationId }).update({ service_id: serviceId })),
      },
      logger: createLogger('silent'),
    });
    const { accountId } = await createAccount(database.db);
    const orderIds = [await activeOrder(database.db, accountId, 'pool-a.example'), await activeOrder(database.db, accountId, 'pool-b.example')];

    // Two orders at once, as a worker runs them: on one connection they take turns.
    const serviceIds = await Promise.all(
      orderIds.map(async (orderId) => {
        const placed = await activities.placeOrder(orderId);
        expect(placed.order.status).toBe('active');
        const [serviceId] = await activities.createOrderServices(orderId);
        expect(await activities.startProvisioning(serviceId)).toBe(true);
        for (let i = 0; !(await activities.checkServiceActive(serviceId)); i++) {
          if (i > 100) throw new Error(`service ${serviceId} never became active`);
          await new Promise((r) => setTimeout(r, 20));
        }
        return (await activities.activateService(serviceId)).id;
      }),
    );
    expect(serviceIds).toHaveLength(2);
    const services = await database.db('services').whereIn('order_id', orderIds);
    expect(services.map((s) => s.status)).toEqual(['active', 'active']);
  });
});
