import { ActivityFailure, ApplicationFailure, CancellationScope, isCancellation, log, proxyActivities, sleep } from '@temporalio/workflow';
import type { RecipeApplyActivities } from '../../activities/wordpress/recipe-apply.activities';
import type { ApplyStep, ApplyTarget, PluginResult, StepResult, VerifyResult } from '../../domain/wordpress/recipe-apply';
import type { OperationInput } from '../kit/operation';
import { runOperation, StepFailed } from '../kit/steps';
import { bookkeeping as backups, long } from './steps';

export interface RecipeApplyInput extends OperationInput {
  serviceId: number;
  accountId: number;
  recipe: string;
  version: string;
  skipBackup: boolean;
  /** RECIPE_PROGRESS_TIMEOUT (15 min): a step without progress for that long fails the apply `interrupted`. */
  progressTimeoutMs: number;
}

/** The operation's `result` (SPEC "Recipes"). */
export interface RecipeApplyResult {
  recipe: string;
  version: string;
  steps: StepResult[];
  plugins: PluginResult[];
  verify: VerifyResult[];
  secrets: { names: string[]; claim: string | null };
  applied_at: string | null;
  backup_id: string | null;
}

/** Named in failure messages ("The WordPress site did not complete this step: ..."). */
export const WORDPRESS_SITE = 'WordPress site';

/**
 * Failures whose message is written for customers: a step's refusal (domain/wordpress/recipe-apply.ts
 * ApplyStepRefused) and the backend's refusals (providers/errors.ts), as activities report them.
 * Anything else (a command's output with the host's paths, a database error, a timeout) is reduced
 * to "The site did not complete the <step> step." and its text goes to the worker's log only, as
 * workflows/kit/steps.ts upstreamError does for every operation.
 */
const CUSTOMER_MESSAGES = new Set(['ApplyStepRefused', 'BackendRefusedError', 'BackendGoneError']);

/** The message a failed step shows (`error.message` and its `steps[].detail`). */
function stepFailureMessage(cause: unknown, step: ApplyStep): string {
  if (cause instanceof ApplicationFailure && CUSTOMER_MESSAGES.has(cause.type ?? '')) return cause.message;
  return `The site did not complete the ${step} step.`;
}

const STEP_ORDER: ApplyStep[] = ['checksums', 'backup', 'plugins', 'constants', 'options', 'roles', 'secrets', 'verify', 'register'];

/** The contract code of a failed step (SPEC "Errors": codes inside a failed operation). */
const FAILURE_CODE: Record<ApplyStep, string> = {
  checksums: 'recipe_checksum_mismatch',
  backup: 'recipe_backup_failed',
  plugins: 'recipe_step_failed',
  constants: 'recipe_step_failed',
  options: 'recipe_step_failed',
  roles: 'recipe_step_failed',
  secrets: 'recipe_step_failed',
  verify: 'recipe_verify_failed',
  register: 'recipe_step_failed',
};

/**
 * Each step heartbeats (20 s) and is retried on another worker when one is lost; the history keeps
 * every finished step, so a worker that takes over resumes at the step that was running. A step
 * that keeps failing (an error, a lost worker, a site that does not answer) ends after
 * STEP_ATTEMPTS attempts (about a quarter of a minute of backoff) with the step's code; one that
 * hangs is cut by the progress deadline (RECIPE_PROGRESS_TIMEOUT).
 */
const STEP_ATTEMPTS = 5;
const steps = proxyActivities<RecipeApplyActivities>({
  startToCloseTimeout: '15 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: STEP_ATTEMPTS },
});
const bookkeeping = proxyActivities<RecipeApplyActivities>({
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds' },
});

/**
 * `wordpress.recipe_apply` (SPEC "Recipes"): checksums, backup, plugins, constants, options, roles,
 * secrets, verify, register, in this order, each idempotent, progress recorded at each step with the
 * result so far (`steps` with each one's status). A step that fails ends the apply `failed` with
 * its contract code and `error.step`, with a message for customers (stepFailureMessage); the steps
 * after it are `not_run`. There is no rollback: the
 * backup of step 2 is the way back. A step that makes no progress for RECIPE_PROGRESS_TIMEOUT (its
 * activity neither finishes nor is taken over) fails the apply `interrupted`. Secret values never
 * pass through here: the register step seals them for the claim endpoint.
 */
export async function wordpressRecipeApplyWorkflow(input: RecipeApplyInput): Promise<void> {
  const target: ApplyTarget = {
    operationId: input.operationId,
    serviceId: input.serviceId,
    accountId: input.accountId,
    recipe: input.recipe,
    version: input.version,
  };
  const result: RecipeApplyResult = {
    recipe: input.recipe,
    version: input.version,
    steps: STEP_ORDER.map((name) => ({ name, status: 'not_run', detail: null })),
    plugins: [],
    verify: [],
    secrets: { names: [], claim: null },
    applied_at: null,
    backup_id: null,
  };
  const record = (step: StepResult) => {
    result.steps = result.steps.map((s) => (s.name === step.name ? step : s));
  };

  /** One step within the progress deadline; its failure is the step's (with the contract code). */
  async function within<T>(name: ApplyStep, work: () => Promise<T>): Promise<T> {
    let timedOut = false;
    const scope = new CancellationScope();
    const timer = new CancellationScope();
    void timer
      .run(() => sleep(input.progressTimeoutMs))
      .then(
        () => {
          timedOut = true;
          scope.cancel();
        },
        () => undefined,
      );
    try {
      return await scope.run(work);
    } catch (err) {
      if (timedOut) {
        record({ name, status: 'failed', detail: 'no progress' });
        throw new StepFailed(
          name,
          `The ${name} step made no progress for ${Math.round(input.progressTimeoutMs / 60_000)} minutes; the apply was stopped.`,
          'interrupted',
        );
      }
      if (isCancellation(err)) throw err;
      if (err instanceof StepFailed) {
        record({ name, status: 'failed', detail: err.message });
        throw err;
      }
      const cause = err instanceof ActivityFailure ? err.cause : err;
      const message = stepFailureMessage(cause, name);
      if (!(cause instanceof ApplicationFailure && CUSTOMER_MESSAGES.has(cause.type ?? ''))) {
        log.warn('recipe apply step failed', {
          step: name,
          error: err instanceof Error ? `${err.message}${cause instanceof Error && cause !== err ? `: ${cause.message}` : ''}` : String(err),
        });
      }
      const code =
        cause instanceof ApplicationFailure && cause.type === 'ApplyStepRefused'
          ? ((cause.details?.[0] as { code?: string })?.code ?? FAILURE_CODE[name])
          : FAILURE_CODE[name];
      record({ name, status: 'failed', detail: message });
      throw new StepFailed(name, message, code);
    } finally {
      timer.cancel();
    }
  }

  await runOperation(
    input,
    {
      backend: WORDPRESS_SITE,
      step: 'checksums',
      result,
      cleanup: async () => {
        // Nothing is claimable unless the apply succeeded.
        if (result.applied_at === null) await bookkeeping.wpApplyDropSecrets({ operationId: input.operationId });
      },
    },
    async (run) => {
      const progressOf = (name: ApplyStep) => Math.round((STEP_ORDER.indexOf(name) / STEP_ORDER.length) * 100);
      const plain = async (name: ApplyStep, call: () => Promise<StepResult>) => {
        const step = await run.step(name, progressOf(name), () => within(name, call));
        record(step);
        run.result = result;
      };

      await plain('checksums', () => steps.wpApplyChecksums(target));
      if (input.skipBackup) record({ name: 'backup', status: 'skipped', detail: 'skip_backup was set' });
      else {
        // A manual backup like the endpoint's (one at a time, the daily allowance, the quota), made by the backups' own activities.
        const backupId = await run.step('backup', progressOf('backup'), () =>
          within('backup', async () => {
            const claimed = await backups.wordpressClaimBackup({ serviceId: input.serviceId, operationId: input.operationId, kind: 'manual' });
            if (!claimed.ok) throw new StepFailed('backup', `The site could not be backed up first: ${claimed.message}`, 'recipe_backup_failed');
            result.backup_id = `bkp_${claimed.backupId}`;
            try {
              const done = await long.wordpressRunBackup({ serviceId: input.serviceId, backupId: claimed.backupId });
              if (done.status !== 'completed') throw new StepFailed('backup', `The backup ${done.backup_id} did not complete.`, 'recipe_backup_failed');
            } finally {
              await CancellationScope.nonCancellable(() => backups.wordpressSettleBackup({ backupId: claimed.backupId }));
            }
            return claimed.backupId;
          }),
        );
        record({ name: 'backup', status: 'succeeded', detail: `backup bkp_${backupId}` });
      }
      const plugins = await run.step('plugins', progressOf('plugins'), () => within('plugins', () => steps.wpApplyPlugins(target)));
      result.plugins = plugins.plugins;
      record(plugins.step);
      await plain('constants', () => steps.wpApplyConstants(target));
      await plain('options', () => steps.wpApplyOptions(target));
      await plain('roles', () => steps.wpApplyRoles(target));
      await plain('secrets', () => steps.wpApplySecrets(target));
      const verify = await run.step('verify', progressOf('verify'), () => within('verify', () => steps.wpApplyVerify(target)));
      result.verify = verify.verify;
      record(verify.step);
      if (verify.step.status === 'failed') {
        run.result = result;
        throw new StepFailed('verify', `The recipe's checks did not pass: ${verify.step.detail}.`, 'recipe_verify_failed');
      }
      const appliedAt = new Date().toISOString();
      const registered = await run.step('register', progressOf('register'), () => within('register', () => steps.wpApplyRegister({ ...target, appliedAt })));
      record(registered.step);
      result.applied_at = appliedAt;
      result.secrets = {
        names: registered.secrets,
        claim: registered.secrets.length > 0 ? `/v1/wordpress/svc_${input.serviceId}/recipes/secrets` : null,
      };
      return result;
    },
  );
}
