import { ActivityFailure, ApplicationFailure, CancellationScope, isCancellation, log, patched, TimeoutFailure } from '@temporalio/workflow';
import { OperationTracker, type OperationError, type OperationInput } from './operation';

/**
 * The shape every operation workflow shares: record `running`, walk through named steps reporting
 * progress, and end with `succeeded` and the result, or `failed` with an `upstream_error` that
 * names the backend and the step that did not complete. A family's workflow is then only its steps.
 */

/** A step that ended in failure on the backend's side, with a message written for customers. */
export class StepFailed extends Error {
  constructor(
    readonly step: string,
    message: string,
    /** The operation's `error.code` when the family's contract names one (`build_failed`); default `upstream_error`. */
    readonly code: string = 'upstream_error',
  ) {
    super(message);
    this.name = 'StepFailed';
  }
}

/** Failures whose message the backend wrote for customers (providers/errors.ts), as activities report them. */
const CUSTOMER_MESSAGES = new Set(['BackendRefusedError', 'BackendGoneError']);

/**
 * The operation's public `error` for a failed step: `upstream_error`, the step, a message written for
 * customers and, when the backend gave one, its stable `backend_code` (`refused`, `gone`, a
 * refusal's own code, `unavailable`, `timeout`). Only a backend's refusal or a vanished resource
 * carries the backend's own words, which providers write for customers; anything else (a database
 * error, a bug, a stack) is reduced to a plain sentence here and its text goes to the worker's log.
 */
export function upstreamError(err: unknown, step: string, backend: string): OperationError {
  if (err instanceof StepFailed) return { code: err.code, message: err.message, step: err.step };
  const cause = err instanceof ActivityFailure ? err.cause : err;
  if (cause instanceof ApplicationFailure && CUSTOMER_MESSAGES.has(cause.type ?? '')) {
    const detail = (cause.details?.[0] ?? {}) as { code?: string };
    const backendCode = detail.code ?? (cause.type === 'BackendGoneError' ? 'gone' : 'refused');
    return { code: 'upstream_error', message: `The ${backend} did not complete this step: ${cause.message}`, step, backend_code: backendCode };
  }
  log.warn('operation step failed', {
    step,
    backend,
    error: err instanceof Error ? `${err.message}${cause instanceof Error && cause !== err ? `: ${cause.message}` : ''}` : String(err),
  });
  if (cause instanceof ApplicationFailure && cause.type === 'BackendUnavailableError') {
    return { code: 'upstream_error', message: `The ${backend} did not answer; this step was not completed.`, step, backend_code: 'unavailable' };
  }
  if (cause instanceof TimeoutFailure) {
    return { code: 'upstream_error', message: `The ${backend} did not complete this step in time.`, step, backend_code: 'timeout' };
  }
  return { code: 'upstream_error', message: `The ${backend} did not complete this step.`, step };
}

export interface StepOptions<T, R> {
  /** The result recorded with the step's progress (e.g. the stage it enters); it becomes `run.result`. */
  result?: R;
  /**
   * Undoes what the step did, given its value: runs if a later step fails or the workflow is
   * cancelled (in reverse order of the steps, each in a scope that cancellation does not cut short).
   */
  compensate?: (value: T) => Promise<unknown>;
}

export interface OperationRun<R> {
  readonly tracker: OperationTracker;
  /** The result so far; recorded with every progress report and with the outcome. */
  result: R;
  /** The step a failure is attributed to (the last `step` entered). */
  currentStep: string;
  /**
   * One named step: from here on a failure is attributed to `name`; `progress` (unless null, for a
   * step whose progress was recorded already) is recorded with the result so far; then `fn` runs,
   * and its value is the step's. With `compensate`, what the step did is undone if a later step
   * fails or the workflow is cancelled.
   */
  step<T>(name: string, progress: number | null, fn: () => Promise<T>, opts?: StepOptions<T, R>): Promise<T>;
  /**
   * Registers an undo at this point of the run (without a step of its own), for a compensation that
   * must be in place before the action it undoes is issued (a create that may succeed even if its
   * answer is lost). Compensations run last registered, first run.
   */
  compensate(undo: () => Promise<unknown>): void;
  /** Records progress within the current step, with the result so far. */
  progress(progress: number): Promise<void>;
}

export interface RunOptions<R> {
  /** Named in failure messages: `hypervisor`, `DNS server`, `database instance`. */
  backend: string;
  /** The step a failure is attributed to until the first `run.step` (usually the first step's name). */
  step: string;
  /** The result recorded with `running`. */
  result: R;
  /** Progress recorded with `running` (default 0). */
  progress?: number;
  /** The error's result when it differs from the result so far (e.g. the stage reached). */
  failedResult?: (run: OperationRun<R>) => unknown;
  /**
   * Runs after the steps (and after the compensations of a failed or cancelled run) and before the
   * outcome is recorded, whatever it is (release a lock, drop a secret).
   */
  cleanup?: () => Promise<unknown>;
}

/**
 * Runs started since this patch, when cancelled (from the Temporal UI, say), run their compensations
 * and `cleanup` and record `failed` (`interrupted`) themselves, out of reach of the cancellation.
 * Before it, a cancelled run stopped at once and the orphan sweeper closed its operation; replaying
 * such a run's history keeps that path.
 */
export const CANCEL_COMPENSATES = 'operation-run-compensates-on-cancel';

/** The public error of a run cancelled from outside: `interrupted`, as the orphan sweeper records for one that ended without an outcome. */
const CANCELLED: OperationError = {
  code: 'interrupted',
  message: 'The operation was cancelled from outside (its workflow was cancelled) before it completed. Check the resource before trying again.',
};

/** An undo, and the step it belongs to (for the log when it fails). */
interface Compensation {
  step: string;
  undo: () => Promise<unknown>;
}

/**
 * Runs an operation's steps. `body` returns the final result (or nothing to keep `run.result`);
 * anything it throws fails the operation at the current step, after the compensations registered
 * so far have run (last first). A compensation that fails is logged and the others still run: the
 * operation's error stays the step's, which is what the customer can act on.
 */
export async function runOperation<R>(input: OperationInput, opts: RunOptions<R>, body: (run: OperationRun<R>) => Promise<R | void>): Promise<void> {
  const tracker = new OperationTracker(input.operationId);
  const compensations: Compensation[] = [];
  const run: OperationRun<R> = {
    tracker,
    result: opts.result,
    currentStep: opts.step,
    async step(name, progress, fn, stepOpts) {
      run.currentStep = name;
      if (stepOpts?.result !== undefined) run.result = stepOpts.result;
      if (progress !== null) await tracker.progress(progress, run.result);
      const value = await fn();
      const compensate = stepOpts?.compensate;
      if (compensate) compensations.push({ step: name, undo: () => compensate(value) });
      return value;
    },
    compensate(undo) {
      compensations.push({ step: run.currentStep, undo });
    },
    progress(progress) {
      return tracker.progress(progress, run.result);
    },
  };
  let outcome: { ok: true } | { ok: false; error: OperationError };
  try {
    await tracker.update({ status: 'running', progress: opts.progress ?? 0, result: run.result });
    const final = await body(run);
    if (final !== undefined) run.result = final;
    outcome = { ok: true };
  } catch (err) {
    if (isCancellation(err)) {
      // Old runs stop here (the cleanup below fails at once in the cancelled scope).
      if (!patched(CANCEL_COMPENSATES)) throw err;
      await CancellationScope.nonCancellable(async () => {
        await undo(compensations);
        if (opts.cleanup) await opts.cleanup();
        await tracker.fail(CANCELLED, opts.failedResult ? opts.failedResult(run) : run.result);
      });
      throw err;
    }
    outcome = { ok: false, error: upstreamError(err, run.currentStep, opts.backend) };
    if (compensations.length) await CancellationScope.nonCancellable(() => undo(compensations));
  }
  if (opts.cleanup) await opts.cleanup();
  if (outcome.ok) await tracker.succeed(run.result);
  else await tracker.fail(outcome.error, opts.failedResult ? opts.failedResult(run) : run.result);
}

/** Runs the compensations, last registered first; one that fails is logged and the next still runs. */
async function undo(compensations: Compensation[]): Promise<void> {
  for (const compensation of [...compensations].reverse()) {
    try {
      await compensation.undo();
    } catch (err) {
      log.warn('a compensation failed; the ones before it still run', { step: compensation.step, error: err instanceof Error ? err.message : String(err) });
    }
  }
}
