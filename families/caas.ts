import { createCaasActivities } from '../activities/caas/activities';
import { caasRoutes } from '../api/routes/caas/routes';
import { CAAS_SAMPLE_PATH, seedCaas } from '../db/seeds/caas.seed';
import { CaasKeeper } from '../domain/caas/keeper';
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
  // The routers and the serving containers of every live service, again after a restart.
  keepers: ({ db, keyring, providers, logger, config }) => [
    new CaasKeeper({ db, keyring, providers, logger, intervalMs: config.CAAS_KEEPER_INTERVAL, startTimeoutMs: config.CAAS_START_TIMEOUT }),
  ],
  // The seeded service's app `hello`; its source is served by the first demo web server of `npm start`.
  seed: ({ db, providers, keyring, config, demoBackends }) =>
    seedCaas(db, providers, keyring, config, demoBackends?.[0] ? `http://${demoBackends[0].ip}:${demoBackends[0].port}${CAAS_SAMPLE_PATH}` : null),
  config: ['CAAS_BACKEND', 'CAAS_DATA_DIR', 'CAAS_BIND_ADDRESS', 'CAAS_SUBNET_POOL', 'CAAS_APPS_DOMAIN', 'CAAS_START_TIMEOUT', 'CAAS_KEEPER_INTERVAL'],
});
