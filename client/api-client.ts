import { randomUUID } from 'node:crypto';

/**
 * The HTTP client of the `cloud` CLI and the MCP server: a client of the public API like any other,
 * except that it names its channel (`Cloud-Channel`, recorded as `via` in the audit log).
 */
export type Channel = 'cli' | 'mcp';

export interface ApiClientOptions {
  baseUrl: string;
  token?: string | null;
  channel: Channel;
  userAgent?: string;
  /** Attempts after a network error or a short 429 (default 2). */
  retries?: number;
  /** Per attempt (default 60 s). */
  timeoutMs?: number;
  /** Sent with every request (a request's own headers win). */
  headers?: Record<string, string>;
}

export interface ApiRequest {
  method: string;
  /** Path plus query string, e.g. `/v1/services?family=vps`. */
  url: string;
  body?: unknown;
  /**
   * Whether the request may be sent again after the connection broke mid-way (default yes: a GET
   * changes nothing, and a mutation carries its Idempotency-Key, so the API replays instead of
   * redoing). Pass false for secret-returning calls, which the API never replays.
   */
  replaySafe?: boolean;
  idempotencyKey?: string;
  headers?: Record<string, string>;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  /** The body exactly as received. */
  text: string;
  /** The parsed body when it is JSON. */
  json: unknown;
  requestId: string | null;
  ok: boolean;
}

export interface ErrorEnvelope {
  error: { type: string; code: string; message: string; param?: string | null; request_id?: string | null; [key: string]: unknown };
}

export function errorOf(response: ApiResponse): ErrorEnvelope['error'] | null {
  const body = response.json as Partial<ErrorEnvelope> | undefined;
  return body && typeof body === 'object' && body.error && typeof body.error === 'object' ? body.error : null;
}

/** The server could not be reached (or stopped answering) after the retries. */
export class NetworkError extends Error {
  constructor(
    readonly url: string,
    readonly causeCode: string,
  ) {
    super(`cannot reach the API at ${url} (${causeCode})`);
  }
}

const isMutation = (method: string) => !['GET', 'HEAD'].includes(method.toUpperCase());
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Seconds from a `Retry-After` header (delta-seconds or an HTTP date), or null. */
export function retryAfterSeconds(headers: Headers): number | null {
  const value = headers.get('retry-after');
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

function errorCode(err: unknown): string {
  const cause = (err as { cause?: { code?: string } })?.cause;
  if (cause?.code) return cause.code;
  if ((err as Error)?.name === 'TimeoutError' || (err as Error)?.name === 'AbortError') return 'timeout';
  return (err as Error)?.message ?? 'network error';
}

export class ApiClient {
  readonly baseUrl: string;

  constructor(private readonly options: ApiClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
  }

  get hasToken(): boolean {
    return Boolean(this.options.token);
  }

  async request(req: ApiRequest): Promise<ApiResponse> {
    const method = req.method.toUpperCase();
    const headers: Record<string, string> = {
      accept: 'application/json',
      'cloud-channel': this.options.channel,
      'user-agent': this.options.userAgent ?? `cloud-${this.options.channel}`,
      ...(this.options.headers ?? {}),
      ...(req.headers ?? {}),
    };
    if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
    // One key per logical call, kept across the retries below so the API can replay instead of redo.
    if (isMutation(method)) headers['idempotency-key'] = req.idempotencyKey ?? randomUUID();
    let payload: string | undefined;
    if (req.body !== undefined) {
      payload = JSON.stringify(req.body);
      headers['content-type'] = 'application/json';
    }
    const replaySafe = req.replaySafe ?? true;
    const retries = this.options.retries ?? 2;
    const url = `${this.baseUrl}${req.url}`;

    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await fetch(url, { method, headers, body: payload, signal: AbortSignal.timeout(this.options.timeoutMs ?? 60_000) });
      } catch (err) {
        const code = errorCode(err);
        // A refused connection never reached the server: always safe to send again.
        const retryable = code === 'ECONNREFUSED' || replaySafe;
        if (retryable && attempt < retries) {
          await sleep(250 * 4 ** attempt);
          continue;
        }
        throw new NetworkError(this.baseUrl, code);
      }
      const text = await res.text();
      if (res.status === 429 && attempt < retries) {
        // Refused before anything ran, so sending it again is safe; only short waits are worth it.
        const wait = retryAfterSeconds(res.headers);
        if (wait !== null && wait <= 20) {
          await sleep(wait * 1000);
          continue;
        }
      }
      let json: unknown = undefined;
      if (text && (res.headers.get('content-type') ?? '').includes('json')) {
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
      }
      return { status: res.status, headers: res.headers, text, json, requestId: res.headers.get('x-request-id'), ok: res.ok };
    }
  }
}
