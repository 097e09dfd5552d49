import { createHostActivities } from '../activities/hosts/activities';
import { hostsDevRoutes } from '../api/routes/hosts/dev.routes';
import { defineFamily } from './manifest';

/**
 * Hosts (docs/hosts.md): a platform part, not a product. The registry and placement live in
 * domain/hosts; this names their activities (the calls a host makes on its own servers, what workflows
 * ask before routing work to a host), their workflows and the operator's stand-ins under `/_dev/hosts`.
 */
export const hostsFamily = defineFamily({
  name: 'hosts',
  routes: [],
  devRoutes: hostsDevRoutes,
  activities: (deps) => createHostActivities(deps),
  workflows: 'workflows/hosts',
  config: ['HOST_NAME', 'HOST_DATA_DIR', 'HOST_FAMILIES', 'HOST_CAPACITY', 'HOST_HEARTBEAT_INTERVAL', 'HOST_CALL_TIMEOUT'],
});
