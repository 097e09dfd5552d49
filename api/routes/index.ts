import type { AnyRoute } from '../route';
import { accountRoutes } from './account.routes';
import { apiKeyRoutes } from './api-keys.routes';
import { devRoutes } from './dev.routes';
import { metaRoutes } from './meta.routes';
import { operationRoutes } from './operations.routes';
import { orderDevRoutes } from './orders.dev.routes';
import { orderRoutes } from './orders.routes';
import { serviceRoutes } from './services.routes';
import { sessionRoutes } from './sessions.routes';
import { webhookRoutes } from './webhooks.routes';
import { vpsDevRoutes } from './vps/dev.routes';
import { vpsRoutes } from './vps/routes';

/**
 * The route table: every public route of the API, one entry each. Product families add their
 * routes here; the router, the OpenAPI document, the capabilities and the scope-matrix test all
 * read this list.
 */
export function buildRouteTable(options: { devEndpoints: boolean }): AnyRoute[] {
  const table: AnyRoute[] = [];
  table.push(
    ...metaRoutes(() => table),
    ...sessionRoutes,
    ...apiKeyRoutes,
    ...accountRoutes,
    ...serviceRoutes,
    ...operationRoutes,
    ...orderRoutes,
    ...webhookRoutes,
    ...vpsRoutes,
  );
  if (options.devEndpoints) table.push(...devRoutes);
  if (options.devEndpoints) table.push(...orderDevRoutes);
  if (options.devEndpoints) table.push(...vpsDevRoutes);
  return table;
}
