/**
 * The errors every provider (simulator or real adapter) throws, and the only ones the rest of the
 * code looks at. They are mapped once for HTTP (api/app.ts: 503 / 409) and once for activities
 * (activities/backend-errors.ts: retryable / non-retryable), so no family wraps its calls itself.
 */

/** The backend did not answer (down, timed out, switched off). Transient: retry later. */
export class BackendUnavailableError extends Error {
  constructor(
    /** The outage switch / backend name (`vps`, `dns`, `billing`...). */
    readonly backend: string,
    /** For the logs (may name commands and codes); never shown to customers. */
    readonly detail?: string,
    /**
     * What did not answer, in the customer's words, when it is one of theirs (`database instance
     * svc-12-ab34cd`): the API's message names it rather than the whole backend.
     */
    readonly subject?: string,
  ) {
    super(`the ${backend} backend is not answering${detail ? ` (${detail})` : ''}`);
    this.name = 'BackendUnavailableError';
  }

  /** Kept for older call sites: the backend's name. */
  get family(): string {
    return this.backend;
  }
}

/**
 * The backend answered and said no (wrong state, unknown template, invalid configuration...).
 * Retrying the same call will not help. `message` is written for customers: it reaches the API
 * response or the operation's error as is, so never put internal detail (SQL, stack) in it.
 */
export class BackendRefusedError extends Error {
  constructor(
    readonly backend: string,
    message: string,
    /** A stable code for the refusal, when the caller may want to branch on it. */
    readonly code: string = 'refused',
    /** The request field the refusal is about (`listeners.0.port`), when there is one. */
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = 'BackendRefusedError';
  }
}

/** The thing the call is about no longer exists on the backend (a machine, a zone, an instance). */
export class BackendGoneError extends Error {
  constructor(
    readonly backend: string,
    /** What is gone: `machine 101`, `zone example.org`. */
    readonly what: string,
    /** Written for customers; by default names what is gone. */
    message = `The ${what} is not on the ${backend} backend any more.`,
  ) {
    super(message);
    this.name = 'BackendGoneError';
  }
}

export type BackendError = BackendUnavailableError | BackendRefusedError | BackendGoneError;

export function isBackendError(err: unknown): err is BackendError {
  return err instanceof BackendUnavailableError || err instanceof BackendRefusedError || err instanceof BackendGoneError;
}

/**
 * A live read for a single-resource GET: the backend's answer, or null when it fails or does not
 * answer within the bound (SPEC convention 7: live fields come back null, the call does not fail).
 */
export async function liveRead<T>(timeoutMs: number, read: () => Promise<T>): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  try {
    return await Promise.race([read().catch(() => null), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
