import { retryAfterSeconds, type ApiClient, type ApiResponse } from './api-client';

/** What `GET /v1/operations/{id}` answers (SPEC "Operation"). */
export interface Operation {
  object: 'operation';
  id: string;
  type: string;
  status: 'pending' | 'running' | 'succeeded' | 'failed';
  progress: number | null;
  error?: { code?: string; message?: string; [key: string]: unknown } | null;
  stale?: boolean;
  [key: string]: unknown;
}

export const isTerminal = (op: Operation) => op.status === 'succeeded' || op.status === 'failed';

export type WaitOutcome =
  | { kind: 'done'; operation: Operation; response: ApiResponse }
  | { kind: 'timeout'; operation: Operation | null; response: ApiResponse | null }
  | { kind: 'error'; response: ApiResponse };

export interface WaitOptions {
  timeoutMs: number;
  /** Between polls when the API gives no `Retry-After` (default 1 s). */
  intervalMs?: number;
  /** Called with every state read, so a caller can draw progress. */
  onState?: (op: Operation) => void;
  signal?: AbortSignal;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });

/**
 * Polls an operation until it ends or the time is up. A `Retry-After` from the API (on a 429, or on
 * an answer that carries one) sets the next wait; a stale answer (Temporal not answering) is polled
 * again like a running one. Any other error answer ends the wait with that answer.
 */
export async function waitForOperation(api: ApiClient, id: string, options: WaitOptions): Promise<WaitOutcome> {
  const deadline = Date.now() + options.timeoutMs;
  const interval = options.intervalMs ?? 1000;
  let last: { operation: Operation; response: ApiResponse } | null = null;
  for (;;) {
    const response = await api.request({ method: 'GET', url: `/v1/operations/${encodeURIComponent(id)}` });
    const hint = retryAfterSeconds(response.headers);
    if (response.status === 429) {
      // Rate limited: not an outcome, just a longer pause.
    } else if (!response.ok) {
      return { kind: 'error', response };
    } else {
      const operation = response.json as Operation;
      last = { operation, response };
      options.onState?.(operation);
      if (isTerminal(operation)) return { kind: 'done', operation, response };
    }
    const wait = hint !== null ? hint * 1000 : interval;
    const left = deadline - Date.now();
    if (left <= 0 || options.signal?.aborted) return { kind: 'timeout', operation: last?.operation ?? null, response: last?.response ?? null };
    await sleep(Math.min(wait, left), options.signal);
  }
}
