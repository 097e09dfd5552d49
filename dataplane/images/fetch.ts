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
  /** Where a body of declared length goes; give the result back with `release` once it is used. */
  buffers?: SourceBuffers;
}

/**
 * Buffers for source bodies, used again from one miss to the next. Every fresh buffer of a few
 * hundred KiB counts as external memory to V8, and each 64 MiB of it starts a full mark-compact
 * of the heap: a plane allocating every source anew spent more CPU in the collector than in
 * everything else around sharp. A body with a declared length up to `size` is read into an idle
 * buffer here (larger ones, or bodies of unknown length, are allocated as usual); the caller gives
 * it back once sharp is done with it (sharp's cache is off, so libvips keeps no reference).
 * At most `keep` idle buffers are kept.
 */
export class SourceBuffers {
  private readonly idle: Buffer[] = [];
  private readonly own = new WeakSet<ArrayBufferLike>();

  constructor(
    readonly size = 4 << 20,
    readonly keep = 4,
  ) {}

  /** A buffer of exactly `length` bytes (old contents; every byte is overwritten by the fetch), or null if `length` is over `size`. */
  take(length: number): Buffer | null {
    if (length > this.size) return null;
    let whole = this.idle.pop();
    if (!whole) {
      whole = Buffer.allocUnsafeSlow(this.size);
      this.own.add(whole.buffer);
    }
    return whole.subarray(0, length);
  }

  /** Gives back a buffer from `take` (anything else, or a second release, is ignored). */
  release(buffer: Buffer): void {
    if (!this.own.has(buffer.buffer) || this.idle.length >= this.keep) return;
    if (this.idle.some((b) => b.buffer === buffer.buffer)) return;
    this.idle.push(Buffer.from(buffer.buffer, 0, this.size));
  }

  get idleCount(): number {
    return this.idle.length;
  }
}

/**
 * Kept-alive connections to origins, one agent per checked address, port and host name: a miss
 * after another from the same origin skips the TCP (and TLS) handshake. A connection is only ever
 * reused for the address it was opened to, so the pinning above holds; idle ones close after
 * ORIGIN_IDLE_MS, and the least recently used agent goes when there are more than ORIGIN_AGENTS_MAX.
 */
const ORIGIN_IDLE_MS = 4_000;
const ORIGIN_AGENTS_MAX = 256;
const agents = new Map<string, http.Agent>();
function agentFor(url: URL, address: ResolvedAddress): http.Agent {
  const key = `${url.protocol}//${url.hostname}:${url.port}@${address.address}`;
  let agent = agents.get(key);
  if (agent) {
    agents.delete(key);
  } else {
    const options = { keepAlive: true, maxSockets: 16, maxFreeSockets: 4, timeout: ORIGIN_IDLE_MS };
    agent = url.protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
    for (const [oldest, old] of agents) {
      if (agents.size < ORIGIN_AGENTS_MAX) break;
      agents.delete(oldest);
      old.destroy();
    }
  }
  agents.set(key, agent);
  return agent;
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
    // A pooled body given back if the fetch fails; once settled, no late chunk is written anywhere.
    let body: Buffer | null = null;
    let settled = false;
    // One deadline for the whole fetch (a slow drip of bytes counts too).
    const deadline = setTimeout(() => req.destroy(new OriginFailed(`the origin did not answer within ${limits.timeoutMs} ms`)), limits.timeoutMs);
    const succeed = (value: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      resolve(value);
    };
    const fail = (err: Error) => {
      if (settled) return;
      settled = true;
      clearTimeout(deadline);
      if (body) limits.buffers?.release(body);
      reject(err);
    };
    const req = client.get(
      url,
      { lookup: pin, headers: { accept: 'image/*', 'user-agent': 'cloud-image-delivery/1' }, agent: agentFor(url, pinned) },
      (res) => {
        const status = res.statusCode ?? 0;
        if (status < 200 || status >= 300) {
          res.resume();
          fail(
            new OriginFailed(
              status >= 300 && status < 400 ? `the origin answered a redirect (${status}); redirects are not followed` : `the origin answered ${status}`,
            ),
          );
          return;
        }
        const declared = Number(res.headers['content-length']);
        if (Number.isFinite(declared) && declared > limits.maxBytes) {
          res.destroy();
          fail(new SourceTooLarge(`the source is larger than ${limits.maxBytes} bytes`));
          return;
        }
        // With a declared length the body goes straight into one buffer of that size (pooled when it
        // fits; no chunk list, no second copy); without one, the chunks are joined at the end.
        const known = Number.isInteger(declared) && declared > 0;
        body = known ? (limits.buffers?.take(declared) ?? Buffer.allocUnsafe(declared)) : null;
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          if (settled) return;
          if (size + chunk.length > limits.maxBytes) {
            res.destroy();
            fail(new SourceTooLarge(`the source is larger than ${limits.maxBytes} bytes`));
            return;
          }
          if (body && size + chunk.length > body.length) {
            res.destroy();
            fail(new OriginFailed(`the origin sent more than the ${body.length} bytes it declared`));
            return;
          }
          if (body) chunk.copy(body, size);
          else chunks.push(chunk);
          size += chunk.length;
        });
        res.on('end', () => {
          if (!body) succeed(Buffer.concat(chunks, size));
          else if (size === body.length) succeed(body);
          else fail(new OriginFailed(`the origin's answer broke off (${size} of ${body.length} bytes)`));
        });
        res.on('error', (err) => fail(new OriginFailed(`the origin's answer broke off (${err.message})`)));
        // An answer cut short without an error still settles (a pooled body is given back).
        res.on('close', () => {
          if (!settled) fail(new OriginFailed(`the origin's answer broke off (${size} bytes)`));
        });
      },
    );
    req.on('error', (err) => fail(err instanceof OriginFailed ? err : new OriginFailed(`the origin could not be reached (${err.message})`)));
  });
}
