import { defineBackend } from './backend';
import type { CaasProvider } from './caas.provider';
import { CaasSimulator } from './simulator/caas.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** Container apps: podman and the services' HAProxy routers on this host (CAAS_BACKEND=podman), or the simulator. */
    caas: CaasProvider;
  }
}

/** The CaaS family's backend. */
export const caasBackend = defineBackend<'caas', CaasProvider>({
  family: 'caas',
  key: 'caas',
  simulator: ({ db, config }) => new CaasSimulator(db, config.SIM_DELAY_SCALE),
});
