import { applyRoutes } from './apply.routes';
import { backupRoutes } from './backups.routes';
import { domainRoutes } from './domains.routes';
import { observeRoutes } from './observe.routes';
import { pluginRoutes } from './plugins.routes';
import { recipeRoutes } from './recipes.routes';
import { runtimeRoutes } from './runtime.routes';
import { siteRoutes } from './sites.routes';

/**
 * Hosted WordPress sites (SPEC "Hosted sites (`wordpress`)", DECISIONS "Hosted WordPress"). `{id}`
 * is the site's service (`svc_<n>`). Each group of endpoints lives in its own file; this is the
 * family's route table. docs/wordpress.md.
 */
export const wordpressRoutes = [
  // First: Express would take `/v1/wordpress/recipes...` for a site `{id}` of the routes below.
  ...recipeRoutes,
  ...siteRoutes,
  ...backupRoutes,
  ...runtimeRoutes,
  ...domainRoutes,
  ...observeRoutes,
  ...pluginRoutes,
  ...applyRoutes,
];
