import { defineBackend } from './backend';
import type { HypervisorProvider } from './hypervisor.provider';
import { HypervisorSimulator } from './simulator/hypervisor.simulator';

declare module './backend' {
  interface FamilyProviders {
    /** VPS machines (qemu and lxc) on the hypervisor cluster. */
    hypervisor: HypervisorProvider;
  }
}

/** The VPS family's backend: the hypervisor cluster, simulated (no real adapter yet). */
export const hypervisorBackend = defineBackend({
  family: 'vps',
  key: 'hypervisor',
  simulator: ({ db, tasks }) => new HypervisorSimulator(db, tasks),
});
