import type { Knex } from 'knex';
import type { Config } from '../common/config';
import { BackendSwitchboard } from './switchboard';
import type { BillingProvider } from './billing.provider';
import { BillingSimulator } from './simulator/billing.simulator';
import { ProvisionerRegistry } from './provisioning';
import { SimulatedProvisioner } from './simulator/provisioning.simulator';
import type { HypervisorProvider } from './hypervisor.provider';
import { HypervisorSimulator } from './simulator/hypervisor.simulator';
import { VpsProvisioner } from './vps.provisioner';

/**
 * Every backend the control plane talks to, behind its provider interface. The embedded default is
 * the simulator (state in PostgreSQL, work that takes SIM_DELAY_SCALE-scaled time, outages on demand).
 * Families register their provider here.
 */
export interface Providers {
  switchboard: BackendSwitchboard;
  billing: BillingProvider;
  /** Provisioner per service family (orders); the generic simulated one for families without their own. */
  provisioners: ProvisionerRegistry;
  /** VPS machines (qemu and lxc) on the hypervisor cluster. */
  hypervisor: HypervisorProvider;
}

export function createProviders({ db, config }: { db: Knex; config: Config }): Providers {
  const switchboard = new BackendSwitchboard(db);
  const billing = new BillingSimulator(db, switchboard, config.SIM_DELAY_SCALE);
  const provisioners = new ProvisionerRegistry(new SimulatedProvisioner(db, switchboard, config.SIM_DELAY_SCALE));
  const hypervisor = new HypervisorSimulator(db, switchboard, config.SIM_DELAY_SCALE);
  provisioners.register('vps', new VpsProvisioner(db, hypervisor));
  return { switchboard, billing, provisioners, hypervisor };
}
