import http from 'node:http';
import https from 'node:https';
import { rootCertificates } from 'node:tls';
import type { LookupFunction } from 'node:net';
import { bareHost, parseTargetUrl, resolveTarget, TargetRejected, type ResolvedAddress, type TargetPolicy } from './targets';

export interface WebhookPost {
  url: string;
  body: string;
  headers: Record<string, string>;
  timeoutMs: number;
  policy: TargetPolicy;
  /** Extra trusted CA certificates (PEM), added to the system roots (WEBHOOK_EXTRA_CA_FILE). */
  extraCa?: string | null;
}

export interface WebhookPostResult {
  delivered: boolean;
  /** HTTP status of the answer; null when there was none (refused target, connection error, timeout). */
  status: number | null;
  /** Why the attempt did not count as delivered; null when it did. */
  error: string | null;
  /** The checked address the request went to. */
  address: string | null;
}

const MAX_RESPONSE_BYTES = 64 * 1024;

/**
 * One delivery attempt: check the URL's form, resolve its host once, check every address, then
 * connect to that checked address (custom `lookup`), with the original Host header and TLS server
 * name, so DNS cannot be re-bound between check and connect. Redirects are not followed (a 3xx is
 * a failed attempt). The whole exchange must end with a 2xx status line within `timeoutMs`.
 */
export async function postWebhook(req: WebhookPost): Promise<WebhookPostResult> {
  let url: URL;
  let addresses: ResolvedAddress[];
  try {
    url = parseTargetUrl(req.url, req.policy);
    addresses = await resolveTarget(url, req.policy);
  } catch (err) {
    if (err instanceof TargetRejected) return { delivered: false, status: null, error: `target refused: ${err.message}`, address: null };
    throw err;
  }
  // Every address was checked; try them in order while connections are refused, within one deadline.
  const deadline = Date.now() + req.timeoutMs;
  let result: WebhookPostResult & { connectFailed?: boolean } = { delivered: false, status: null, error: 'no address', address: null };
  for (const address of addresses) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) break;
    result = await postOnce(req, url, address, remaining);
    if (!result.connectFailed) break;
  }
  delete result.connectFailed;
  return result;
}

const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'EAFNOSUPPORT']);

function postOnce(req: WebhookPost, url: URL, address: ResolvedAddress, timeoutMs: number): Promise<WebhookPostResult & { connectFailed?: boolean }> {
  const host = bareHost(url);
  const pinned: LookupFunction = (_hostname, options, callback) => {
    // Node asks for every address when it races families (autoSelectFamily); give only the checked one.
    if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [address]);
    else callback(null, address.address, address.family);
  };
  const isHttps = url.protocol === 'https:';
  const options: https.RequestOptions = {
    method: 'POST',
    hostname: host,
    port: url.port ? Number(url.port) : isHttps ? 443 : 80,
    path: `${url.pathname}${url.search}`,
    headers: { ...req.headers, 'Content-Length': String(Buffer.byteLength(req.body)) },
    lookup: pinned,
    // A fresh connection per attempt: no pooled socket can outlive the address check.
    agent: false,
    ...(isHttps && req.extraCa ? { ca: [...rootCertificates, req.extraCa] } : {}),
  };
  return new Promise((resolve) => {
    let settled = false;
    const finish = (result: Omit<WebhookPostResult, 'address'> & { connectFailed?: boolean }) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({ ...result, address: address.address });
    };
    const request = (isHttps ? https : http).request(options, (res) => {
      const status = res.statusCode ?? 0;
      let received = 0;
      res.on('data', (chunk: Buffer) => {
        received += chunk.length;
        if (received > MAX_RESPONSE_BYTES) res.destroy();
      });
      res.on('error', () => undefined);
      res.on('close', () => request.destroy());
      if (status >= 200 && status < 300) finish({ delivered: true, status, error: null });
      else if (status >= 300 && status < 400) {
        const location = typeof res.headers.location === 'string' ? ` to ${res.headers.location.slice(0, 200)}` : '';
        finish({ delivered: false, status, error: `HTTP ${status}: redirect${location} not followed` });
      } else finish({ delivered: false, status, error: `HTTP ${status}${res.statusMessage ? ` ${res.statusMessage}` : ''}` });
      res.resume();
    });
    const timer = setTimeout(() => {
      finish({ delivered: false, status: null, error: `timed out after ${req.timeoutMs} ms without a response` });
      request.destroy();
    }, timeoutMs);
    request.on('error', (err: NodeJS.ErrnoException) => {
      finish({
        delivered: false,
        status: null,
        error: `connection error: ${err.message}`.slice(0, 500),
        connectFailed: err.code !== undefined && CONNECT_ERRORS.has(err.code),
      });
    });
    request.end(req.body);
  });
}
