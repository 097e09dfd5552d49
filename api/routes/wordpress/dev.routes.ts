import { z } from 'zod';
import { deleteRecipesNamed } from '../../../domain/wordpress/recipe-store';
import { defineDevRoute } from '../../route';

/**
 * Local stand-ins for hosted WordPress (CLOUD_DEV_ENDPOINTS=1, loopback only, no credential). A dev
 * route names no account, so the clean-up of a recipe drops the recipe of that name in every account,
 * with its versions (DECISIONS "Hosted WordPress": test clean-up). It answers how many went (0 when
 * none had it: a clean-up may run twice).
 */
export const wordpressDevRoutes = [
  defineDevRoute({
    method: 'delete',
    path: '/_dev/wordpress/recipes/{name}',
    operationId: 'devWordpressDeleteRecipe',
    summary: "Drop every account's recipe of this name with its versions (test clean-up)",
    params: z.object({ name: z.string().min(1).max(200) }),
    responses: [{ status: 200, description: 'How many recipes were dropped' }],
    async handler({ params, deps }) {
      const deleted = await deleteRecipesNamed(deps.db, params.name);
      return { body: { object: 'dev_wordpress_recipes_deleted', name: params.name, deleted } };
    },
  }),
];
