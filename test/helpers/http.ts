import { checkResponse } from './response-contract';

export interface HttpResponse<T = any> {
  status: number;
  headers: Headers;
  body: T;
  text: string;
}

export interface RequestOptions {
  token?: string;
  body?: unknown;
  /** Sent as is (for malformed-JSON and content-type tests). */
  rawBody?: string;
  headers?: Record<string, string>;
  /** Off only for tests that send what the API must refuse and read a raw answer (default: checked). */
  checkContract?: boolean;
}

/** A small fetch wrapper: JSON in, JSON out, every header visible. */
export function httpClient(baseUrl: string) {
  async function request<T = any>(method: string, path: string, opts: RequestOptions = {}): Promise<HttpResponse<T>> {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    let body: string | undefined;
    if (opts.rawBody !== undefined) body = opts.rawBody;
    else if (opts.body !== undefined) {
      body = JSON.stringify(opts.body);
      headers['content-type'] ??= 'application/json';
    }
    const res = await fetch(`${baseUrl}${path}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    if (opts.checkContract !== false) checkResponse(method, `${baseUrl}${path}`, res.status, res.headers.get('content-type'), parsed);
    return { status: res.status, headers: res.headers, body: parsed as T, text };
  }
  return {
    request,
    get: <T = any>(path: string, opts?: RequestOptions) => request<T>('GET', path, opts),
    post: <T = any>(path: string, opts?: RequestOptions) => request<T>('POST', path, opts),
    put: <T = any>(path: string, opts?: RequestOptions) => request<T>('PUT', path, opts),
    patch: <T = any>(path: string, opts?: RequestOptions) => request<T>('PATCH', path, opts),
    delete: <T = any>(path: string, opts?: RequestOptions) => request<T>('DELETE', path, opts),
  };
}

export type HttpClient = ReturnType<typeof httpClient>;
