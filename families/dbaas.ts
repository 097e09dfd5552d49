import { createDbaasActivities } from '../activities/dbaas/activities';
import { createDbaasMoveActivities } from '../activities/dbaas/move.activities';
import { dbaasDevRoutes } from '../api/routes/dbaas/dev.routes';
import { dbaasRoutes } from '../api/routes/dbaas/routes';
import { seedDbaas } from '../db/seeds/dbaas.seed';
import { InstanceKeeper } from '../domain/dbaas/keeper';
import { DbaasProvisioner } from '../domain/dbaas/provisioner';
import { dbaasBackend } from '../providers/dbaas.backend';
import { defineFamily } from './manifest';

/** Managed databases (SPEC "DBaaS"): a PostgreSQL or MariaDB server per instance. */
export const dbaasFamily = defineFamily({
  name: 'dbaas',
  routes: dbaasRoutes,
  devRoutes: dbaasDevRoutes,
  backend: dbaasBackend,
  provisioner: ({ db, providers, keyring }) => new DbaasProvisioner(db, providers.dbaas, keyring, providers.hosts),
  activities: (deps) => ({ ...createDbaasActivities(deps), ...createDbaasMoveActivities(deps) }),
  workflows: 'workflows/dbaas',
  // Every instance of this host's data directory that should run runs.
  keepers: ({ providers, logger, config }) => [new InstanceKeeper({ dbaas: providers.dbaas, logger, intervalMs: config.DBAAS_KEEPER_INTERVAL })],
  seed: ({ db, providers, keyring }) => seedDbaas(db, providers, keyring),
  config: ['DBAAS_BACKEND', 'DBAAS_DATA_DIR', 'DBAAS_ADDRESS_RANGE', 'DBAAS_KEEPER_INTERVAL'],
});
