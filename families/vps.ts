import { createVpsActivities } from '../activities/vps/activities';
import { vpsDevRoutes } from '../api/routes/vps/dev.routes';
import { vpsRoutes } from '../api/routes/vps/routes';
import { seedVps } from '../db/seeds/vps.seed';
import { VpsProvisioner } from '../domain/vps/provisioner';
import { hypervisorBackend } from '../providers/hypervisor.backend';
import { defineFamily } from './manifest';

/** Virtual servers (SPEC "VPS") on the hypervisor cluster: the complete example (docs/adding-a-family.md). */
export const vpsFamily = defineFamily({
  name: 'vps',
  routes: vpsRoutes,
  devRoutes: vpsDevRoutes,
  backend: hypervisorBackend,
  provisioner: ({ db, providers }) => new VpsProvisioner(db, providers.hypervisor),
  activities: (deps) => createVpsActivities(deps),
  workflows: 'workflows/vps',
  seed: ({ db, providers }) => seedVps(db, providers),
});
