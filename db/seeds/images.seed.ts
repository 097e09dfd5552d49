import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { imagesEndpointOf, ImagesProvisioner } from '../../domain/images/provisioner';
import { LIVE_STATUSES } from '../../domain/images/store';
import type { Config } from '../../common/config';

/** The seeded origin: the demo web servers `npm start` runs answer on loopback. */
export const DEMO_ORIGIN = 'localhost';

/**
 * Every live image service gets its tenant (as an order would build it), pointed at this run's
 * delivery plane (a second checkout's run may have moved its port), and the seeded account's gets
 * the origin `localhost`. Idempotent.
 */
export async function seedImages(db: Knex, keyring: Keyring, config: Config): Promise<void> {
  const endpoint = imagesEndpointOf(config);
  const provisioner = new ImagesProvisioner(db, keyring, endpoint);
  const services: Array<{ id: number; account_id: number; product: string }> = await db('services')
    .where({ product_family: 'images' })
    .whereIn('status', [...LIVE_STATUSES])
    .orderBy('id');
  for (const s of services) {
    await provisioner.provision({
      id: Number(s.id),
      accountId: Number(s.account_id),
      family: 'other',
      productFamily: 'images',
      product: s.product,
      label: null,
      options: {},
      billingCycle: null,
    });
    await db('images_tenants').where({ service_id: s.id }).update({ api_endpoint: endpoint });
    if (Number(s.account_id) === 1)
      await db('images_origins').insert({ service_id: s.id, pattern: DEMO_ORIGIN }).onConflict(['service_id', 'pattern']).ignore();
  }
}
