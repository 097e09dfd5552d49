import { createOrderActivities } from '../activities/orders/activities';
import { orderDevRoutes } from '../api/routes/orders/dev.routes';
import { orderRoutes } from '../api/routes/orders/routes';
import { seedOrders } from '../db/seeds/orders.seed';
import { defineFamily } from './manifest';

/** Ordering (SPEC "Orders"): the catalog, orders and their `orders.create` workflow, which provisions through every family's provisioner. */
export const ordersFamily = defineFamily({
  name: 'orders',
  routes: orderRoutes,
  devRoutes: orderDevRoutes,
  activities: (deps) => createOrderActivities(deps),
  workflows: 'workflows/orders',
  seed: ({ db }) => seedOrders(db),
  config: ['ORDER_ACTIVATION_TIMEOUT', 'RECIPE_PROGRESS_TIMEOUT', 'SIM_BILLING_INTERVAL'],
});
