import { createCaasActivities } from '../activities/caas/activities';
import { caasRoutes } from '../api/routes/caas/routes';
import { CaasProvisioner } from '../domain/caas/provisioner';
import { caasBackend } from '../providers/caas.backend';
import { defineFamily } from './manifest';

/**
 * Container apps (SPEC "CaaS"): apps built from source archives into images and run as containers
 * (rootful podman, hardened, one network per service), served by Host through each service's
 * HAProxy; databases on DBaaS instances of the service. docs/caas.md.
 */
export const caasFamily = defineFamily({
  name: 'caas',
  routes: caasRoutes,
  backend: caasBackend,
  provisioner: ({ db, providers }) => new CaasProvisioner(db, providers),
  activities: (deps) => createCaasActivities(deps),
  workflows: 'workflows/caas',
  config: ['CAAS_BACKEND', 'CAAS_DATA_DIR', 'CAAS_BIND_ADDRESS', 'CAAS_APPS_DOMAIN', 'CAAS_START_TIMEOUT'],
});
