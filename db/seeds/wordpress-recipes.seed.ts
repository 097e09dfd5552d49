import type { Knex } from 'knex';
import { DomainError } from '../../domain/errors';
import { registerRecipe } from '../../domain/wordpress/recipe-store';
import { parseManifest, type RecipeManifest } from '../../domain/wordpress/recipes';
import sample from './wordpress-sample-recipe.json';

/** The demo account of core.seed.ts. */
const DEMO_ACCOUNT_ID = 1;

/**
 * The sample recipe (db/seeds/wordpress-sample-recipe.json, `starter-blog` 1.0.0), validated as the
 * API validates a registration. A fresh copy each time: the JSON module is shared.
 */
export function sampleRecipe(): RecipeManifest {
  return parseManifest(structuredClone(sample));
}

/**
 * Registers the sample recipe for the demo account, so that `POST /v1/wordpress/{id}/recipes/apply
 * {"name": "starter-blog"}` works on the seeded site after `npm start`. Idempotent: a recipe of
 * that name the account already has (this one, or one the user registered or published versions
 * of since) is left as it is. Returns whether it was registered now.
 */
export async function seedSampleRecipe(db: Knex): Promise<boolean> {
  const demo = await db('accounts').where({ id: DEMO_ACCOUNT_ID }).first('id');
  if (!demo) return false;
  try {
    await registerRecipe(db, DEMO_ACCOUNT_ID, sampleRecipe());
    return true;
  } catch (err) {
    if (err instanceof DomainError && err.code === 'already_exists') return false;
    throw err;
  }
}
