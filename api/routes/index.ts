import type { AnyRoute } from '../route';
import { accountRoutes } from './account.routes';
import { dbaasDevRoutes } from './dbaas/dev.routes';
import { dbaasRoutes } from './dbaas/routes';
import { apiKeyRoutes } from './api-keys.routes';
import { devRoutes } from './dev.routes';
import { dnsDevRoutes } from './dns/dev.routes';
import { dnsRoutes } from './dns/routes';
import { metaRoutes } from './meta.routes';
import { operationRoutes } from './operations.routes';
import { orderDevRoutes } from './orders/dev.routes';
import { orderRoutes } from './orders/routes';
import { serviceRoutes } from './services.routes';
import { sessionRoutes } from './sessions.routes';
import { vpsDevRoutes } from './vps/dev.routes';
import { vpsRoutes } from './vps/routes';
import { webhookRoutes } from './webhooks/routes';
import { lbRoutes } from './lb/routes';

/** A folder of routes: its public routes, and its local stand-ins under /_dev (CLOUD_DEV_ENDPOINTS=1). */
interface RouteFolder {
  routes: readonly AnyRoute[];
  dev?: readonly AnyRoute[];
}

/** Ordering, webhooks and the product families (`api/routes/<family>/`). A family adds one line here. */
const FAMILY_ROUTES: RouteFolder[] = [
  { routes: orderRoutes, dev: orderDevRoutes },
  { routes: webhookRoutes },
  { routes: vpsRoutes, dev: vpsDevRoutes },
  { routes: lbRoutes },
  { routes: dbaasRoutes, dev: dbaasDevRoutes },
  { routes: dnsRoutes, dev: dnsDevRoutes },
];

/**
 * The route table: every route of the API, one entry each. The router, the OpenAPI document, the
 * capabilities, the scope-matrix test, the CLI and the MCP tools all read this list.
 */
export function buildRouteTable(options: { devEndpoints: boolean }): AnyRoute[] {
  const table: AnyRoute[] = [];
  table.push(...metaRoutes(() => table), ...sessionRoutes, ...apiKeyRoutes, ...accountRoutes, ...serviceRoutes, ...operationRoutes);
  for (const folder of FAMILY_ROUTES) table.push(...folder.routes);
  if (options.devEndpoints) {
    table.push(...devRoutes);
    for (const folder of FAMILY_ROUTES) table.push(...(folder.dev ?? []));
  }
  return table;
}
