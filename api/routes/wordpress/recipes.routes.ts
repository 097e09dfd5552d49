import { z } from 'zod';
import { iso } from '../../../common/time';
import {
  claimRecipeSecrets,
  findRecipe,
  findRecipeVersion,
  publishRecipeVersion,
  registerRecipe,
  withVersions,
  type RecipeRow,
  type RecipeVersionRow,
  type RecipeWithVersions,
} from '../../../domain/wordpress/recipe-store';
import { parseManifest, RECIPE_LIMITS, RecipeManifestShape, recipeInvalid } from '../../../domain/wordpress/recipes';
import type { AppDeps } from '../../deps';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';
import { findTarget } from '../../../domain/services';
import { findVisibleSite } from '../../../domain/wordpress/store';
import { siteParams, TAG } from './shared';

/**
 * The recipe registry (SPEC "Recipes", DECISIONS "Hosted WordPress" and "Paths the spec does not
 * give"): an account's recipes, each a series of immutable `recipe/v1` manifests, and the one claim
 * of the secrets an apply generated. The apply itself is `POST /v1/wordpress/{id}/recipes/apply`
 * (the site routes). These paths must come before the site routes in the family's table: Express
 * would take `/v1/wordpress/recipes/...` for a site `{id}` otherwise. docs/wordpress.md "Recipes".
 */
const ManifestSchema = RecipeManifestShape.meta({
  id: 'WordpressRecipeManifest',
  description: 'A `recipe/v1` manifest (SPEC "Recipe manifest"). No string may contain a single quote, a semicolon or a backslash.',
});

/**
 * The request body: a manifest, validated by the handler (parseManifest) so that every fault is
 * `400 recipe_invalid` with its `param`, not the pipeline's `validation_failed`. The union lets
 * anything through to the handler while the document and the clients see the manifest's shape.
 */
const ManifestBody = z.union([RecipeManifestShape, z.unknown()]).meta({
  description:
    'A `recipe/v1` manifest. It is validated completely: any fault answers `400 recipe_invalid` with `param` naming the field (`plugins.2.sha256`, `constants.DB_HOST`).',
});

const RecipeVersionSchema = z
  .object({
    object: z.literal('wordpress_recipe_version'),
    name: z.string(),
    version: z.string(),
    manifest: ManifestSchema,
    created_at: z.string(),
  })
  .meta({ id: 'WordpressRecipeVersion' });

const RecipeSchema = z
  .object({
    object: z.literal('wordpress_recipe'),
    name: z.string(),
    latest_version: z.string(),
    versions: z.array(z.string()).meta({ description: 'Every published version, greatest first' }),
    manifest: ManifestSchema.meta({ description: 'The manifest of `latest_version`' }),
    created_at: z.string().meta({ description: 'When the recipe was registered (its first version)' }),
  })
  .meta({ id: 'WordpressRecipe' });

const RecipeSecretsSchema = z
  .object({
    object: z.literal('recipe_secrets'),
    operation: z.string(),
    recipe: z.string(),
    version: z.string(),
    secrets: z.record(z.string(), z.string()).meta({ description: 'Constant name to generated value (64 hex digits)' }),
  })
  .meta({ id: 'WordpressRecipeSecrets' });

const nameParam = z.string().min(1).max(200).meta({ description: 'The recipe name', example: 'shop-basics' });
const nameParams = z.object({ name: nameParam });
const versionParams = z.object({ name: nameParam, version: z.string().min(1).max(200).meta({ example: '1.0.0' }) });
const ClaimBody = z.object({
  operation: z
    .string()
    .min(1)
    .max(200)
    .meta({ description: 'The id of the succeeded `wordpress.recipe_apply` operation', example: 'op_01JD6Z3S8X5W4QK2N7R9T0V1A2' }),
});

const EXAMPLE_MANIFEST = {
  apiVersion: 'recipe/v1',
  name: 'shop-basics',
  version: '1.0.0',
  requires: { php: '>=8.1 <9', wp: '>=6.0', memory_mb: 128 },
  plugins: [{ slug: 'akismet', version: '5.0.2', activate: true }],
  constants: { WP_POST_REVISIONS: 5 },
  options: { blogdescription: 'Just another shop' },
  roles: [{ name: 'shop_manager', display: 'Shop manager', caps: ['read', 'edit_posts'] }],
  secrets: ['SHOP_API_SECRET'],
  verify: [{ wp: 'plugin is-active akismet' }, { http: { path: '/', method: 'GET', expect: 200 } }],
};

function presentVersion(recipe: Pick<RecipeRow, 'name'>, row: RecipeVersionRow): z.input<typeof RecipeVersionSchema> {
  return { object: 'wordpress_recipe_version', name: recipe.name, version: row.version, manifest: row.manifest, created_at: iso(row.created_at)! };
}

function presentRecipe({ recipe, versions }: RecipeWithVersions): z.input<typeof RecipeSchema> {
  const [latest] = versions;
  return {
    object: 'wordpress_recipe',
    name: recipe.name,
    latest_version: latest.version,
    versions: versions.map((v) => v.version),
    manifest: latest.manifest,
    created_at: iso(recipe.created_at)!,
  };
}

const parse = (deps: AppDeps, body: unknown) => parseManifest(body, { allowInsecureUrls: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS });
const versionLocation = (name: string, version: string) => `/v1/wordpress/recipes/${name}/versions/${version}`;

export const recipeRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/recipes',
    operationId: 'createWordpressRecipe',
    summary: 'Register a recipe',
    description:
      'Registers a `recipe/v1` manifest as the first version of a new recipe of the account. The whole manifest is validated: ' +
      'a fault answers `400 recipe_invalid` with `param` naming the field. A recipe of that name already: `409 already_exists` (param `name`; ' +
      `publish a greater version with PUT). At most ${RECIPE_LIMITS.recipesPerAccount} recipes per account (\`429 quota_exceeded\`). ` +
      'Published versions are immutable.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    body: ManifestBody,
    exampleBody: EXAMPLE_MANIFEST,
    responses: [
      { status: 201, description: 'The registered version', schema: RecipeVersionSchema },
      { status: 409, description: 'A recipe of that name exists (`already_exists`)' },
    ],
    async handler({ body, principal, deps }) {
      const manifest = parse(deps, body);
      const { recipe, version } = await registerRecipe(deps.db, principal.accountId, manifest);
      return { status: 201, headers: { Location: versionLocation(recipe.name, version.version) }, body: presentVersion(recipe, version) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/recipes',
    operationId: 'listWordpressRecipes',
    summary: 'List recipes',
    description: "The account's recipes, newest registration first, each with its versions and the manifest of its latest version.",
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of recipes', schema: listOf(RecipeSchema, 'WordpressRecipeList') }],
    async handler({ query, principal, deps }) {
      const page = await keysetPage<RecipeRow>(deps.db('wordpress_recipes').where({ account_id: principal.accountId }), {
        cursors: deps.cursors,
        list: listFingerprint('wordpress/recipes', {}),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      const recipes = await withVersions(deps.db, page.rows);
      // A recipe always has a version; one without (never left by registerRecipe) would be skipped, not answered broken.
      return { body: listEnvelope(recipes.filter((r) => r.versions.length > 0).map(presentRecipe), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/recipes/{name}',
    operationId: 'getWordpressRecipe',
    summary: 'Get a recipe',
    description: "The recipe with every published version (greatest first) and the manifest of the latest. Another account's recipe is `404`.",
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: nameParams,
    responses: [{ status: 200, description: 'The recipe', schema: RecipeSchema }],
    async handler({ params, principal, deps }) {
      return { body: presentRecipe(await findRecipe(deps.db, principal.accountId, params.name)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/recipes/{name}/versions/{version}',
    operationId: 'getWordpressRecipeVersion',
    summary: 'Get a version of a recipe',
    description: 'One published version with its manifest, as it was registered. An unknown recipe or version is `404`.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: versionParams,
    responses: [{ status: 200, description: 'The version', schema: RecipeVersionSchema }],
    async handler({ params, principal, deps }) {
      const { recipe, version } = await findRecipeVersion(deps.db, principal.accountId, params.name, params.version);
      return { body: presentVersion(recipe, version) };
    },
  }),
  defineRoute({
    method: 'put',
    path: '/v1/wordpress/recipes/{name}',
    operationId: 'publishWordpressRecipeVersion',
    summary: 'Publish a new version of a recipe',
    description:
      "Publishes the manifest as a new version of the account's recipe `{name}`. The manifest's `name` must be `{name}` " +
      '(`400 recipe_invalid`, param `name`) and its `version` above the latest (`409 conflict`: published versions are immutable). ' +
      `An unknown recipe is \`404\` (register it with POST). At most ${RECIPE_LIMITS.versionsPerRecipe} versions per recipe (\`429 quota_exceeded\`).`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: nameParams,
    body: ManifestBody,
    exampleBody: { ...EXAMPLE_MANIFEST, version: '1.1.0' },
    responses: [
      { status: 201, description: 'The published version', schema: RecipeVersionSchema },
      { status: 409, description: 'The version is not above the latest (`conflict`)' },
    ],
    async handler({ params, body, principal, deps }) {
      const manifest = parse(deps, body);
      if (manifest.name !== params.name) {
        throw recipeInvalid('name', `must be the recipe of the path, "${params.name}"`);
      }
      const { recipe, version } = await publishRecipeVersion(deps.db, principal.accountId, manifest);
      return { status: 201, headers: { Location: versionLocation(recipe.name, version.version) }, body: presentVersion(recipe, version) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/recipes/secrets',
    operationId: 'claimWordpressRecipeSecrets',
    summary: 'Claim the secrets of a recipe apply',
    description:
      'Returns, once, the values the platform generated for the `secrets` of a succeeded `wordpress.recipe_apply` operation of this site, ' +
      'and deletes them: a second claim, an operation of another site, or a claim more than 24 hours after the apply is `404 not_found`. ' +
      'Never replayed by Idempotency-Key, never cached.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: [],
    returnsSecret: true,
    params: siteParams,
    body: ClaimBody,
    exampleBody: { operation: 'op_01JD6Z3S8X5W4QK2N7R9T0V1A2' },
    responses: [{ status: 200, description: 'The secrets, shown once', schema: RecipeSecretsSchema }],
    async handler({ params, body, principal, deps }) {
      // The caller's site (404 otherwise), taking actions (409 while suspended, terminated...).
      const { service } = await findTarget(() => findVisibleSite(deps.db, principal, params.id), { action: 'claiming recipe secrets' });
      const claim = await claimRecipeSecrets(deps.db, deps.keyring, Number(service.id), body.operation);
      return { body: { object: 'recipe_secrets' as const, ...claim } };
    },
  }),
];
