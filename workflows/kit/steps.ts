import { ActivityFailure, ApplicationFailure, log, TimeoutFailure } from '@temporalio/workflow';
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
  if (err instanceof StepFailed) return { code: 'upstream_error', message: err.message, step: err.step };
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

export interface OperationRun<R> {
  readonly tracker: OperationTracker;
  /** The result so far; recorded with every progress report and with the outcome. */
  result: R;
  /** The step a failure is attributed to. */
  step: string;
  /** Enters a step; with `progress`, records it (and the result) at once. */
  enter(step: string, progress?: number): Promise<void>;
  progress(progress: number): Promise<void>;
}

export interface RunOptions<R> {
  /** Named in failure messages: `hypervisor`, `DNS server`, `database instance`. */
  backend: string;
  /** The first step. */
  step: string;
  /** The result recorded with `running`. */
  result: R;
  /** Progress recorded with `running` (default 0). */
  progress?: number;
  /** The error's result when it differs from the result so far (e.g. the stage reached). */
  failedResult?: (run: OperationRun<R>) => unknown;
  /** Runs after the steps and before the outcome is recorded, whatever it is (release a lock, drop a secret). */
  cleanup?: () => Promise<void>;
}

/**
 * Runs an operation's steps. `body` returns the final result (or nothing to keep `run.result`);
 * anything it throws fails the operation at the current step.
 */
export async function runOperation<R>(input: OperationInput, opts: RunOptions<R>, body: (run: OperationRun<R>) => Promise<R | void>): Promise<void> {
  const tracker = new OperationTracker(input.operationId);
  const run: OperationRun<R> = {
    tracker,
    result: opts.result,
    step: opts.step,
    async enter(step, progress) {
      run.step = step;
      if (progress !== undefined) await tracker.update({ status: 'running', progress, result: run.result });
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
    outcome = { ok: false, error: upstreamError(err, run.step, opts.backend) };
  }
  if (opts.cleanup) await opts.cleanup();
  if (outcome.ok) await tracker.succeed(run.result);
  else await tracker.fail(outcome.error, opts.failedResult ? opts.failedResult(run) : run.result);
}
