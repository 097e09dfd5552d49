import { defineBackend } from './backend';
import type { CaasProvider } from './caas.provider';
import { CaasPodmanProvider } from './caas/caas.podman';
import { CaasSimulator } from './simulator/caas.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** Container apps: podman and the services' HAProxy routers on this host (CAAS_BACKEND=podman), or the simulator. */
    caas: CaasProvider;
  }
}

/** The CaaS family's backend. */
export const caasBackend = defineBackend<'caas', CaasPodmanProvider>({
  family: 'caas',
  key: 'caas',
  simulator: ({ db, config }) => new CaasSimulator(db, config.SIM_DELAY_SCALE),
  real: {
    selected: (config) => config.CAAS_BACKEND !== 'simulator',
    create: ({ config }) =>
      new CaasPodmanProvider({
        dataDir: config.CAAS_DATA_DIR,
        bindAddress: config.CAAS_BIND_ADDRESS,
        subnetPool: config.CAAS_SUBNET_POOL,
        // Containers never reach the platform's own servers' ranges.
        blockedRanges: [config.LB_BIND_ADDRESS, ...(config.DBAAS_ADDRESS_RANGE ? [config.DBAAS_ADDRESS_RANGE] : [])],
      }),
  },
});
