import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { conflict } from '../../../domain/errors';
import { assertRequires } from '../../../domain/wordpress/recipes';
import { findRecipeVersion } from '../../../domain/wordpress/recipe-store';
import { defineRoute } from '../../route';
import { OperationSchema } from '../../schemas';
import { startOperation } from '../../start-operation';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

const ApplyBody = z
  .object({
    name: z.string().max(63).meta({ description: 'A registered recipe of the account' }),
    version: z.string().max(32).optional().meta({ description: 'The version to apply (default: the latest)' }),
    skip_backup: z.boolean().optional().meta({ description: 'Skip step 2, the manual backup (default false)' }),
  })
  .strict();

/** `POST /v1/wordpress/{id}/recipes/apply`: the `wordpress.recipe_apply` operation (workflows/wordpress/). */
export const applyRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/recipes/apply',
    operationId: 'applyWordpressRecipe',
    summary: 'Apply a recipe to a site',
    description:
      "Checks the recipe's `requires` against the site as it runs first: an unmet one is `412 recipe_requirements_unmet` (param `requires.<key>`) and no operation exists. Then `202` with the `wordpress.recipe_apply` operation, which runs `checksums`, `backup` (a manual backup, counted against the daily allowance; `skip_backup` skips it), `plugins`, `constants`, `options`, `roles`, `secrets`, `verify` and `register`, in this order, each idempotent, with progress per step. A failed step ends it `failed` with `error.code` (`recipe_checksum_mismatch`, `recipe_backup_failed`, `recipe_step_failed`, `recipe_verify_failed`, or `interrupted` after 15 minutes without progress) and `error.step`; there is no rollback (the backup is the way back). `result`: `recipe`, `version`, `steps`, `plugins`, `verify`, `secrets` (`names` and the `claim` path), `applied_at`, `backup_id`. One apply at a time per site (`409 conflict`).",
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'A', 'I'],
    params: siteParams,
    body: ApplyBody,
    exampleBody: { name: 'shop-basics' },
    responses: [
      { status: 202, description: 'The `wordpress.recipe_apply` operation', schema: OperationSchema },
      { status: 412, description: "The site does not meet the recipe's `requires` (`recipe_requirements_unmet`); nothing ran" },
      NOT_READY,
    ],
    async handler({ params, body, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'recipes', 'applying a recipe');
      const { recipe, version } = await findRecipeVersion(deps.db, principal.accountId, body.name, body.version);
      const manifest = version.manifest as { requires?: Parameters<typeof assertRequires>[0] };
      if (manifest.requires) {
        const [php, wpVersion] = await Promise.all([deps.providers.wordpress.php(service.id), deps.providers.wordpress.coreVersion(service.id)]);
        assertRequires(manifest.requires, { phpVersion: php.version, wpVersion, memoryLimit: php.settings.memory_limit });
      }
      return startOperation(deps, principal, {
        type: 'wordpress.recipe_apply',
        input: {
          serviceId: service.id,
          accountId: principal.accountId,
          recipe: recipe.name,
          version: version.version,
          skipBackup: body.skip_backup ?? false,
          progressTimeoutMs: deps.config.RECIPE_PROGRESS_TIMEOUT,
        },
        resource: { object: 'wordpress', id: formatId('svc', service.id) },
        serviceId: service.id,
        inTransaction: async (trx, operationId) => {
          // One apply at a time per site: concurrent requests queue here and the second sees the first.
          await trx.raw('select pg_advisory_xact_lock(hashtext(?))', [`wordpress-apply:${service.id}`]);
          const running = await trx('operations')
            .where({ service_id: service.id, type: 'wordpress.recipe_apply' })
            .whereIn('status', ['pending', 'running'])
            .whereNot({ id: operationId })
            .first('id');
          if (running) throw conflict(`A recipe is being applied to this site (${running.id}); wait for it to end.`);
        },
      });
    },
  }),
];
