import { ApplicationFailure } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import type { Providers } from '../../providers';
import {
  applyChecksums,
  applyConstants,
  applyOptions,
  applyPlugins,
  applyRegister,
  applyRoles,
  applySecrets,
  applyVerify,
  ApplyStepRefused,
  dropApplySecrets,
  type ApplyTarget,
} from '../../domain/wordpress/recipe-apply';
import { heartbeating } from '../backend-errors';

/**
 * The activities of `wordpress.recipe_apply` (workflows/wordpress/wordpress-recipe-apply.workflow.ts):
 * one per step of SPEC's order, each idempotent (domain/wordpress/recipe-apply.ts), each heartbeating
 * while it works so that a lost worker is noticed in seconds and the step runs again elsewhere.
 */
/** A step that cannot succeed fails for good, with its contract code (the workflow makes it the operation's `error.code`). */
async function step<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await heartbeating(work);
  } catch (err) {
    if (err instanceof ApplyStepRefused) {
      throw ApplicationFailure.create({ message: err.message, type: 'ApplyStepRefused', nonRetryable: true, details: [{ code: err.code }] });
    }
    throw err;
  }
}

export function createRecipeApplyActivities(deps: { db: Knex; providers: Providers; keyring: Keyring; config: Config }) {
  const d = { db: deps.db, providers: deps.providers, keyring: deps.keyring, config: deps.config };
  return {
    wpApplyChecksums: (t: ApplyTarget) => step(() => applyChecksums(d, t)),
    wpApplyPlugins: (t: ApplyTarget) => step(() => applyPlugins(d, t)),
    wpApplyConstants: (t: ApplyTarget) => step(() => applyConstants(d, t)),
    wpApplyOptions: (t: ApplyTarget) => step(() => applyOptions(d, t)),
    wpApplyRoles: (t: ApplyTarget) => step(() => applyRoles(d, t)),
    wpApplySecrets: (t: ApplyTarget) => step(() => applySecrets(d, t)),
    wpApplyVerify: (t: ApplyTarget) => step(() => applyVerify(d, t)),
    wpApplyRegister: (input: ApplyTarget & { appliedAt: string }) => step(() => applyRegister(d, input, input.appliedAt)),
    wpApplyDropSecrets: (input: { operationId: string }) => dropApplySecrets(deps.db, input.operationId),
  };
}

export type RecipeApplyActivities = ReturnType<typeof createRecipeApplyActivities>;
