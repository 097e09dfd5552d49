import type { Knex } from 'knex';
import { attachVpsMachine } from '../../domain/vps/store';
import type { Providers } from '../../providers';

/** Container products get an lxc machine; every other VPS product a qemu one. */
const LXC_PRODUCTS = new Set(['vps-container']);

/**
 * A machine on the hypervisor for every VPS service that has none yet (the seeded ones of
 * `core.seed.ts`, and any VPS ordered locally before this ran). Idempotent: a service keeps its machine.
 */
export async function seedVps(db: Knex, providers: Providers): Promise<void> {
  const services = await db('services')
    .leftJoin('vps_servers', 'vps_servers.service_id', 'services.id')
    .where('services.family', 'vps')
    .whereIn('services.status', ['active', 'suspended'])
    .whereNull('vps_servers.service_id')
    .orderBy('services.id')
    .select('services.id', 'services.label', 'services.primary_ip', 'services.product');
  for (const service of services) {
    const type = LXC_PRODUCTS.has(service.product) ? 'lxc' : 'qemu';
    await attachVpsMachine(db, providers.hypervisor, service, { type, ...(type === 'lxc' ? { cores: 1, memoryMb: 1024, diskGb: 10 } : {}) });
  }
}
