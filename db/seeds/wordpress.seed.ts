import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { DEFAULT_CAPABILITIES } from '../../domain/capabilities';
import { LIVE_STATUSES } from '../../domain/per-account';
import { provisionTargetOf } from '../../domain/provisioning';
import { WordpressProvisioner } from '../../domain/wordpress/provisioner';
import type { Providers } from '../../providers';
import { seedSampleRecipe } from './wordpress-recipes.seed';

/**
 * Every live hosted site gets its site as an order would build it: the seeded `blog.example.test`
 * of the demo account answers HTTP after `npm start`. Idempotent: a built site is repaired where
 * needed (its PHP started again, its server block rewritten), never installed twice.
 */
export async function seedWordpress(db: Knex, providers: Providers, keyring: Keyring): Promise<void> {
  const provisioner = new WordpressProvisioner(db, providers, keyring);
  // Demo services seeded before the family existed: their product family and capabilities.
  await db('services').where({ product: 'wordpress-starter' }).whereNull('product_family').update({ product_family: 'wordpress' });
  await db('services')
    .where({ product_family: 'wordpress' })
    .whereRaw("capabilities = '{}'::jsonb")
    .update({ capabilities: JSON.stringify(DEFAULT_CAPABILITIES.wordpress) });
  const services: Array<{ id: number }> = await db('services')
    .where({ product_family: 'wordpress' })
    .whereNotNull('label')
    .whereIn('status', [...LIVE_STATUSES])
    .orderBy('id')
    .select('id');
  for (const s of services) {
    const target = await provisionTargetOf(db, Number(s.id));
    if (target) await provisioner.provision(target);
  }
  // The sample recipe (db/seeds/wordpress-sample-recipe.json) for the demo account, to apply to its site.
  await seedSampleRecipe(db);
}
