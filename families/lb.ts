import { createLbActivities } from '../activities/lb/activities';
import { lbRoutes } from '../api/routes/lb/routes';
import { seedLb } from '../db/seeds/lb.seed';
import { BalancerKeeper } from '../domain/lb/keeper';
import { LbProvisioner } from '../domain/lb/provisioner';
import { lbBackend } from '../providers/lb.backend';
import { defineFamily } from './manifest';

/** Load balancers (SPEC "Load balancers"): an HAProxy each; configuration changes are synchronous; the one workflow is an operator's move to another host. */
export const lbFamily = defineFamily({
  name: 'lb',
  routes: lbRoutes,
  backend: lbBackend,
  provisioner: ({ db, providers }) => new LbProvisioner(db, providers.lb, providers.hosts),
  activities: (deps) => createLbActivities(deps),
  workflows: 'workflows/lb',
  // Every balancer of a live service placed on this host runs.
  keepers: ({ db, providers, logger, config }) => [
    new BalancerKeeper({
      db,
      lb: providers.lb,
      logger,
      intervalMs: config.LB_KEEPER_INTERVAL,
      targets: providers.lbTargets,
      ...(providers.hosts.places('lb') && providers.hosts.self ? { host: providers.hosts.self } : {}),
    }),
  ],
  seed: ({ db, providers, apiPort, demoBackends }) => seedLb(db, providers, { apiPort, demoBackends }),
  config: ['LB_BACKEND', 'LB_BIND_ADDRESS', 'LB_DATA_DIR', 'LB_KEEPER_INTERVAL'],
});
