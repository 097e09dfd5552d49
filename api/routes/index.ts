import { families as allFamilies, type FamilyManifest } from '../../families';
import type { AnyRoute } from '../route';
import { accountRoutes } from './account.routes';
import { apiKeyRoutes } from './api-keys.routes';
import { devRoutes } from './dev.routes';
import { metaRoutes } from './meta.routes';
import { operationRoutes } from './operations.routes';
import { serviceRoutes } from './services.routes';
import { sessionRoutes } from './sessions.routes';

/**
 * The route table: every route of the API, one entry each. The router, the OpenAPI document, the
 * capabilities, the scope-matrix test, the CLI and the MCP tools all read this list. The platform's
 * routes come first, then each family's (its manifest's `routes`, families/index.ts); with
 * `devEndpoints` the local stand-ins under /_dev follow (the platform's, then each family's
 * `devRoutes`). `families` is every family unless a test mounts others (the skeleton family).
 */
export function buildRouteTable(options: { devEndpoints: boolean; families?: readonly FamilyManifest[] }): AnyRoute[] {
  const families = options.families ?? allFamilies;
  const table: AnyRoute[] = [];
  table.push(...metaRoutes(() => table), ...sessionRoutes, ...apiKeyRoutes, ...accountRoutes, ...serviceRoutes, ...operationRoutes);
  for (const family of families) table.push(...family.routes);
  if (options.devEndpoints) {
    table.push(...devRoutes);
    for (const family of families) table.push(...(family.devRoutes ?? []));
  }
  return table;
}
