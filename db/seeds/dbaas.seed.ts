import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { attachDbaasInstance } from '../../domain/dbaas/store';
import type { Providers } from '../../providers';

/**
 * An instance for every dbaas service that has none ready yet (the seeded PostgreSQL and MySQL
 * services of `core.seed.ts`, and any ordered locally before this ran): with the default
 * DBAAS_BACKEND these are real servers under `.data/dbaas/`. Idempotent: an instance that exists is
 * found again (and started if it was stopped).
 */
export async function seedDbaas(db: Knex, providers: Providers, keyring: Keyring): Promise<void> {
  const services = await db('services')
    .leftJoin('dbaas_instances', 'dbaas_instances.service_id', 'services.id')
    .where('services.family', 'dbaas')
    .whereIn('services.status', ['active', 'suspended'])
    .orderBy('services.id')
    .select('services.id', 'services.product', 'dbaas_instances.ready_at');
  for (const service of services) {
    await attachDbaasInstance(db, providers, keyring, { id: Number(service.id), product: service.product });
  }
}
