import { ApplicationFailure, Context } from '@temporalio/activity';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';

/**
 * What every family's activities share: backend errors mapped once to Temporal's retry semantics,
 * and the heartbeating poll that waits for a backend to reach a state.
 */

/**
 * A backend's refusal or a vanished resource will not change on retry: the activity fails for good
 * (the workflow records `upstream_error` with the backend's message). An unreachable backend is
 * retried by the activity's retry policy. Anything else is left to that policy too.
 */
export function toActivityFailure(err: unknown): unknown {
  if (err instanceof BackendRefusedError || err instanceof BackendGoneError) {
    // The message is written for customers (providers/errors.ts) and reaches the operation's error with the stable code.
    const code = err instanceof BackendRefusedError ? err.code : 'gone';
    return ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: true, details: [{ backend: err.backend, code }] });
  }
  if (err instanceof BackendUnavailableError) {
    return ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: false, details: [{ backend: err.backend }] });
  }
  return err;
}

/** Applies toActivityFailure to every activity of a factory's result; registered once in activities/index.ts. */
export function withBackendErrors<T extends Record<string, unknown>>(activities: T): T {
  const wrapped: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(activities)) {
    if (typeof fn !== 'function') {
      wrapped[name] = fn;
      continue;
    }
    // A named function keeps the activity's name in stack traces.
    wrapped[name] = {
      async [name](...args: unknown[]) {
        try {
          return await (fn as (...a: unknown[]) => Promise<unknown>)(...args);
        } catch (err) {
          throw toActivityFailure(err);
        }
      },
    }[name];
  }
  return wrapped as T;
}

/**
 * Polls `read` until `done`, heartbeating, so that a dead worker's wait is picked up by another
 * worker. An unreachable backend is waited out here (bounded by the activity's timeout); any other
 * error ends the wait.
 */
export async function pollUntil<T>(read: () => Promise<T>, done: (value: T) => boolean, intervalMs: number): Promise<T> {
  const ctx = Context.current();
  for (;;) {
    try {
      const value = await read();
      if (done(value)) return value;
    } catch (err) {
      if (!(err instanceof BackendUnavailableError)) throw err;
    }
    ctx.heartbeat();
    await ctx.sleep(intervalMs);
  }
}

/**
 * Heartbeats every few seconds while `work` runs (a fetch, a build, a backup), so that a lost worker
 * is noticed within the activity's heartbeat timeout and the step runs again elsewhere. Outside an
 * activity (a test calling the function directly) it only runs `work`.
 */
export async function heartbeating<T>(work: () => Promise<T>, everyMs = 3_000): Promise<T> {
  let context: Context | null = null;
  try {
    context = Context.current();
  } catch {
    // called outside an activity (tests)
  }
  const timer = context ? setInterval(() => context!.heartbeat(), everyMs) : null;
  try {
    return await work();
  } finally {
    if (timer) clearInterval(timer);
  }
}
