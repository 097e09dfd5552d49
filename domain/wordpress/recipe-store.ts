import type { Knex } from 'knex';
import type { Keyring } from '../../common/crypto';
import { parseUlidId } from '../../common/ids';
import { conflict, DomainError, notFound, quotaExceeded } from '../errors';
import { compareVersionParts, RECIPE_LIMITS, recipeVersionParts, type RecipeManifest } from './recipes';

/**
 * The recipe registry and the claimable secrets of applies: the only SQL on `wordpress_recipes`,
 * `wordpress_recipe_versions` and `wordpress_recipe_secrets` (db/migrations/20261126000500_wordpress.ts).
 * Recipes belong to an account and are named by their manifest's `name`; a version, once
 * published, is never changed. Registrations of one account are serialised on the account's row
 * (so the quota holds under concurrent requests), a recipe's publications on the recipe's row; the
 * unique (account, name) and (recipe, version) keys back both up.
 */

export interface RecipeRow {
  id: number;
  account_id: number;
  name: string;
  created_at: Date;
}

export interface RecipeVersionRow {
  recipe_id: number;
  version: string;
  version_parts: number[];
  manifest: RecipeManifest;
  created_at: Date;
}

/** A recipe with its versions, newest (greatest) first. */
export interface RecipeWithVersions {
  recipe: RecipeRow;
  versions: RecipeVersionRow[];
}

type Db = Knex | Knex.Transaction;

const UNIQUE_VIOLATION = '23505';
const isUniqueViolation = (err: unknown) => (err as { code?: string }).code === UNIQUE_VIOLATION;

export const recipeAlreadyExists = (name: string) =>
  new DomainError(
    409,
    'invalid_request_error',
    'already_exists',
    `A recipe named "${name}" exists; publish a greater version with PUT /v1/wordpress/recipes/${name}.`,
    'name',
  );

const numRecipe = (row: RecipeRow): RecipeRow => ({ ...row, id: Number(row.id), account_id: Number(row.account_id) });
const numVersion = (row: RecipeVersionRow): RecipeVersionRow => ({ ...row, recipe_id: Number(row.recipe_id) });

async function insertVersion(trx: Knex.Transaction, recipeId: number, manifest: RecipeManifest): Promise<RecipeVersionRow> {
  const [row] = await trx('wordpress_recipe_versions')
    .insert({
      recipe_id: recipeId,
      version: manifest.version,
      version_parts: recipeVersionParts(manifest.version),
      // As text: node-postgres would send a JS array inside it as a PostgreSQL array.
      manifest: JSON.stringify(manifest),
    })
    .returning('*');
  return numVersion(row);
}

/**
 * Registers a new recipe with its first version (`POST /v1/wordpress/recipes`): `409 already_exists`
 * (param `name`) when the account has one of that name, `429 quota_exceeded` beyond
 * RECIPE_LIMITS.recipesPerAccount.
 */
export async function registerRecipe(db: Knex, accountId: number, manifest: RecipeManifest): Promise<{ recipe: RecipeRow; version: RecipeVersionRow }> {
  try {
    return await db.transaction(async (trx) => {
      await trx('accounts').where({ id: accountId }).forUpdate().first('id');
      const rows = (await trx('wordpress_recipes').where({ account_id: accountId }).select('name')) as Array<{ name: string }>;
      if (rows.some((r) => r.name === manifest.name)) throw recipeAlreadyExists(manifest.name);
      if (rows.length >= RECIPE_LIMITS.recipesPerAccount) {
        throw quotaExceeded(`An account can have at most ${RECIPE_LIMITS.recipesPerAccount} recipes; delete one before registering another.`);
      }
      const [recipe] = await trx('wordpress_recipes').insert({ account_id: accountId, name: manifest.name }).returning('*');
      const version = await insertVersion(trx, Number(recipe.id), manifest);
      return { recipe: numRecipe(recipe), version };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw recipeAlreadyExists(manifest.name);
    throw err;
  }
}

/**
 * Publishes a greater version of an account's recipe (`PUT /v1/wordpress/recipes/{name}`): 404 for
 * an unknown recipe, `409 conflict` for a version not above the latest, `429 quota_exceeded` beyond
 * RECIPE_LIMITS.versionsPerRecipe. The caller has checked that the manifest's name is the recipe's.
 */
export async function publishRecipeVersion(db: Knex, accountId: number, manifest: RecipeManifest): Promise<{ recipe: RecipeRow; version: RecipeVersionRow }> {
  try {
    return await db.transaction(async (trx) => {
      const recipe = (await trx('wordpress_recipes').where({ account_id: accountId, name: manifest.name }).forUpdate().first()) as RecipeRow | undefined;
      if (!recipe) throw notFound('recipe');
      const versions = (await trx('wordpress_recipe_versions')
        .where({ recipe_id: recipe.id })
        .orderBy('version_parts', 'desc')
        .select('version', 'version_parts')) as Array<Pick<RecipeVersionRow, 'version' | 'version_parts'>>;
      const latest = versions[0];
      if (latest && compareVersionParts(recipeVersionParts(manifest.version), latest.version_parts) <= 0) {
        throw conflict(
          `Version ${manifest.version} is not above the latest version ${latest.version} of recipe "${manifest.name}"; published versions are immutable, publish a greater one.`,
        );
      }
      if (versions.length >= RECIPE_LIMITS.versionsPerRecipe) {
        throw quotaExceeded(`A recipe can have at most ${RECIPE_LIMITS.versionsPerRecipe} versions; register the next one under a new name.`);
      }
      const version = await insertVersion(trx, Number(recipe.id), manifest);
      return { recipe: numRecipe(recipe), version };
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw conflict(`Version ${manifest.version} of recipe "${manifest.name}" is already published.`);
    throw err;
  }
}

async function versionsOf(db: Db, recipeIds: number[]): Promise<Map<number, RecipeVersionRow[]>> {
  const byRecipe = new Map<number, RecipeVersionRow[]>(recipeIds.map((id) => [id, []]));
  if (recipeIds.length === 0) return byRecipe;
  const rows = (await db('wordpress_recipe_versions').whereIn('recipe_id', recipeIds).orderBy('version_parts', 'desc')) as RecipeVersionRow[];
  for (const row of rows) byRecipe.get(Number(row.recipe_id))?.push(numVersion(row));
  return byRecipe;
}

/** An account's recipe with every version, newest first; 404 when the account has none of that name. */
export async function findRecipe(db: Db, accountId: number, name: string): Promise<RecipeWithVersions> {
  const recipe = (await db('wordpress_recipes').where({ account_id: accountId, name }).first()) as RecipeRow | undefined;
  if (!recipe) throw notFound('recipe');
  const versions = (await versionsOf(db, [Number(recipe.id)])).get(Number(recipe.id))!;
  return { recipe: numRecipe(recipe), versions };
}

/**
 * One version of an account's recipe, the latest when `version` is not given (what an apply runs);
 * 404 for an unknown recipe or version.
 */
export async function findRecipeVersion(db: Db, accountId: number, name: string, version?: string): Promise<{ recipe: RecipeRow; version: RecipeVersionRow }> {
  const qb = db('wordpress_recipe_versions as v')
    .join('wordpress_recipes as r', 'r.id', 'v.recipe_id')
    .where({ 'r.account_id': accountId, 'r.name': name })
    .select('v.*', 'r.account_id', 'r.name', 'r.created_at as recipe_created_at');
  if (version !== undefined) qb.where('v.version', version);
  else qb.orderBy('v.version_parts', 'desc');
  const row = await qb.first();
  if (!row) throw notFound(version === undefined ? 'recipe' : 'recipe version');
  const { account_id, name: recipeName, recipe_created_at, ...versionRow } = row;
  return {
    recipe: { id: Number(row.recipe_id), account_id: Number(account_id), name: recipeName, created_at: recipe_created_at },
    version: numVersion(versionRow as RecipeVersionRow),
  };
}

/** The versions of the given recipes (a page of an account's recipes), each newest first. */
export async function withVersions(db: Db, recipes: RecipeRow[]): Promise<RecipeWithVersions[]> {
  const versions = await versionsOf(
    db,
    recipes.map((r) => Number(r.id)),
  );
  return recipes.map((r) => ({ recipe: numRecipe(r), versions: versions.get(Number(r.id)) ?? [] }));
}

/** Drops every account's recipe of that name with its versions (the dev clean-up route); how many recipes went. */
export async function deleteRecipesNamed(db: Db, name: string): Promise<number> {
  return db('wordpress_recipes').where({ name }).delete();
}

/** The purpose of the keyring key that seals claimable secrets. */
export const RECIPE_SECRETS_PURPOSE = 'wordpress-recipe-secrets';
/** How long generated secrets stay claimable after a succeeded apply (SPEC Limits: 24 h). */
export const RECIPE_SECRETS_TTL_MS = 24 * 3_600_000;

/** What a claim answers (SPEC "Claiming secrets"). */
export interface RecipeSecretsClaim {
  operation: string;
  recipe: string;
  version: string;
  secrets: Record<string, string>;
}

/** The sealed text binds the values to their operation and site, so a sealed value copied to another row does not open. */
interface SealedSecrets {
  operation: string;
  service: number;
  secrets: Record<string, string>;
}

/**
 * Keeps the secret values an apply generated, sealed, claimable once until `ttlMs` from now (the
 * apply workflow, after success). Idempotent for an activity's retry: the operation's row is
 * replaced.
 */
export async function storeRecipeSecrets(
  db: Db,
  keyring: Keyring,
  input: { operationId: string; serviceId: number; recipe: string; version: string; secrets: Record<string, string>; ttlMs?: number },
): Promise<void> {
  const sealed: SealedSecrets = { operation: input.operationId, service: input.serviceId, secrets: input.secrets };
  await db('wordpress_recipe_secrets')
    .insert({
      operation_id: input.operationId,
      service_id: input.serviceId,
      recipe: input.recipe,
      version: input.version,
      secrets_sealed: keyring.encrypt(RECIPE_SECRETS_PURPOSE, JSON.stringify(sealed)),
      expires_at: new Date(Date.now() + (input.ttlMs ?? RECIPE_SECRETS_TTL_MS)),
    })
    .onConflict('operation_id')
    .merge(['service_id', 'recipe', 'version', 'secrets_sealed', 'expires_at']);
}

/**
 * Claims the secrets of an apply of the site (`POST /v1/wordpress/{id}/recipes/secrets`): the row is
 * read under a lock, opened and deleted in one transaction, so of two claims one gets the values and
 * the other 404. An expired row is deleted and answers 404 as well.
 */
export async function claimRecipeSecrets(db: Knex, keyring: Keyring, serviceId: number, rawOperationId: string): Promise<RecipeSecretsClaim> {
  const operationId = parseUlidId('op', rawOperationId);
  const claim =
    operationId === null
      ? null
      : await db.transaction(async (trx) => {
          const row = await trx('wordpress_recipe_secrets').where({ operation_id: operationId, service_id: serviceId }).forUpdate().first();
          if (!row) return null;
          await trx('wordpress_recipe_secrets').where({ operation_id: operationId }).delete();
          if (new Date(row.expires_at).getTime() <= Date.now()) return null;
          const sealed = JSON.parse(keyring.decrypt(RECIPE_SECRETS_PURPOSE, row.secrets_sealed)) as SealedSecrets;
          if (sealed.operation !== operationId || Number(sealed.service) !== serviceId) throw new Error('sealed recipe secrets of another row');
          return { operation: operationId, recipe: row.recipe as string, version: row.version as string, secrets: sealed.secrets };
        });
  if (!claim) throw notFound('claimable secrets for this operation on this site');
  return claim;
}

/** Deletes the secrets whose claim window has passed (a keeper's sweep); how many went. */
export async function purgeExpiredRecipeSecrets(db: Db): Promise<number> {
  return db('wordpress_recipe_secrets').where('expires_at', '<=', db.fn.now()).delete();
}
