import type { Knex } from 'knex';
import { attachVpsMachine } from '../../domain/vps';
import { HypervisorSimulator } from '../../providers/simulator/hypervisor.simulator';
import { BackendSwitchboard } from '../../providers/switchboard';

/** Container products get an lxc machine; every other VPS product a qemu one. */
const LXC_PRODUCTS = new Set(['vps-container']);

/**
 * A machine on the simulated hypervisor for every VPS service that has none yet (the seeded ones
 * of `core.seed.ts`, and any VPS ordered locally before this ran). Idempotent: a service keeps its
 * machine. Seeding writes the simulator's state directly, without its delays.
 */
export async function seedVps(db: Knex): Promise<void> {
  const hypervisor = new HypervisorSimulator(db, new BackendSwitchboard(db), 0);
  const services = await db('services')
    .leftJoin('vps_servers', 'vps_servers.service_id', 'services.id')
    .where('services.family', 'vps')
    .whereIn('services.status', ['active', 'suspended'])
    .whereNull('vps_servers.service_id')
    .orderBy('services.id')
    .select('services.id', 'services.label', 'services.primary_ip', 'services.product');
  for (const service of services) {
    const type = LXC_PRODUCTS.has(service.product) ? 'lxc' : 'qemu';
    await attachVpsMachine(db, hypervisor, service, { type, ...(type === 'lxc' ? { cores: 1, memoryMb: 1024, diskGb: 10 } : {}) });
  }
}
