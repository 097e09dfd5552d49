import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { resolveTarget, TargetRejected, type LookupFn, type ResolvedAddress, type TargetPolicy } from '../../infra/webhook-targets';

/**
 * Fetching a source image from its origin, with the webhook targets' SSRF rules (DECISIONS "Data
 * planes and outbound fetches"): the host is resolved once and every address checked (public only;
 * loopback, and `*.localhost` as 127.0.0.1 without DNS, only with ALLOW_INSECURE_TARGETS), then the
 * connection goes to a checked address whatever a second lookup would say (no rebinding). No
 * redirects are followed, the body is capped, and the whole fetch has a deadline.
 */
export class OriginRefused extends Error {}
/** The origin did not give the image: a non-2xx answer, a redirect, a timeout, a connection error. */
export class OriginFailed extends Error {}
/** The body is over the size limit (the delivery plane's 422). */
export class SourceTooLarge extends Error {}

export interface FetchLimits {
  maxBytes: number;
  timeoutMs: number;
}

/** `*.localhost` and `localhost` are loopback by definition (RFC 6761): no DNS is asked. */
const localhostLookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];

export async function fetchSource(raw: string, policy: TargetPolicy, limits: FetchLimits, lookup?: LookupFn): Promise<Buffer> {
  const url = new URL(raw);
  const host = url.hostname.replace(/\.$/, '').toLowerCase();
  const isLocalhost = host === 'localhost' || host.endsWith('.localhost');
  if (url.protocol !== 'https:' && !(policy.allowInsecure && url.protocol === 'http:')) throw new OriginRefused('the source must be an https URL');
  let addresses: ResolvedAddress[];
  try {
    addresses = await resolveTarget(url, policy, isLocalhost ? localhostLookup : lookup);
  } catch (err) {
    if (err instanceof TargetRejected) {
      // A name that does not resolve is the origin's failure; an address the rules refuse is not allowed.
      if (/does not resolve/.test(err.message)) throw new OriginFailed(err.message);
      throw new OriginRefused(err.message.replace('webhook targets', 'image origins'));
    }
    throw err;
  }
  const pinned = addresses[0];
  const pin: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all) (callback as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [pinned]);
    else callback(null, pinned.address, pinned.family);
  };
  const client = url.protocol === 'https:' ? https : http;
  return new Promise<Buffer>((resolve, reject) => {
    // One deadline for the whole fetch (a slow drip of bytes counts too).
    const deadline = setTimeout(() => req.destroy(new OriginFailed(`the origin did not answer within ${limits.timeoutMs} ms`)), limits.timeoutMs);
    const done =
      <T>(settle: (v: T) => void) =>
      (v: T) => {
        clearTimeout(deadline);
        settle(v);
      };
    resolve = done(resolve);
    reject = done(reject);
    const req = client.get(url, { lookup: pin, headers: { accept: 'image/*', 'user-agent': 'cloud-image-delivery/1' }, agent: false }, (res) => {
      const status = res.statusCode ?? 0;
      if (status < 200 || status >= 300) {
        res.resume();
        reject(
          new OriginFailed(
            status >= 300 && status < 400 ? `the origin answered a redirect (${status}); redirects are not followed` : `the origin answered ${status}`,
          ),
        );
        return;
      }
      const declared = Number(res.headers['content-length']);
      if (Number.isFinite(declared) && declared > limits.maxBytes) {
        res.destroy();
        reject(new SourceTooLarge(`the source is larger than ${limits.maxBytes} bytes`));
        return;
      }
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limits.maxBytes) {
          res.destroy();
          reject(new SourceTooLarge(`the source is larger than ${limits.maxBytes} bytes`));
          return;
        }
        chunks.push(chunk);
      });
      res.on('end', () => resolve(Buffer.concat(chunks)));
      res.on('error', (err) => reject(new OriginFailed(`the origin's answer broke off (${err.message})`)));
    });
    req.on('error', (err) => reject(err instanceof OriginFailed ? err : new OriginFailed(`the origin could not be reached (${err.message})`)));
  });
}
