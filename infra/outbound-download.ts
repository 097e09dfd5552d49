import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  bareHost,
  isAllowedAddress,
  MAX_URL_LENGTH,
  resolveTarget,
  TargetRejected,
  type LookupFn,
  type ResolvedAddress,
  type TargetPolicy,
} from './webhook-targets';

/**
 * Downloads the platform makes for a customer from a URL the customer gave (DECISIONS "Data planes
 * and outbound fetches"): CaaS source archives, WordPress plugin and recipe zips. The URL follows
 * the webhook targets' rules (infra/webhook-targets.ts): https and public addresses only, no
 * userinfo; with ALLOW_INSECURE_TARGETS also plain http and loopback (never the control plane's own
 * ports or its /_dev stand-ins). `localhost` and `*.localhost` are 127.0.0.1 without DNS (RFC 6761).
 * A download resolves the host itself, checks every address and connects to the one it checked (no
 * rebinding), follows no redirect, stops at a size cap and at a deadline, and hashes while it streams.
 *
 * Failures caused by the URL or what it serves are a DownloadError whose message is written for
 * the customer: it names the URL's host, never the URL's path or query (a signed URL's token), nor
 * this machine's paths. A failure writing the destination file is this machine's and goes up as is.
 */

/** How messages name what is fetched, so that each use reads in its own words. */
export interface DownloadWords {
  /** The URL, as the subject of a sentence: `the source URL`, `the zip URL`. */
  url: string;
  /** What it serves: `the source archive`, `the plugin zip`. */
  file: string;
  /** Whom the address rules are for, plural: `source archives`, `plugin zips`. */
  refusedFor: string;
  /** A URL of the right form, for the message about a URL that is not one. */
  example: string;
}

export const GENERIC_WORDS: DownloadWords = {
  url: 'the URL',
  file: 'the file',
  refusedFor: 'downloads',
  example: 'https://example.com/file.zip',
};

/**
 * `refused`: the URL breaks the rules (form, scheme, address); `redirect`, `status`: the server did
 * not answer with the file; `too_large`: over the cap (declared or counted); `timeout`: the deadline
 * passed; `network`: the connection failed or closed early.
 */
export type DownloadFailure = 'refused' | 'redirect' | 'status' | 'too_large' | 'timeout' | 'network';

export class DownloadError extends Error {
  constructor(
    readonly reason: DownloadFailure,
    message: string,
  ) {
    super(message);
    this.name = 'DownloadError';
  }
}

export interface DownloadOptions {
  policy: TargetPolicy;
  /** Size cap of the bytes served. */
  maxBytes: number;
  /** Deadline of the whole download, DNS included, to the last byte (ms). */
  timeoutMs: number;
  /** Host resolution (tests); default the webhook targets' resolver. */
  lookup?: LookupFn;
  words?: DownloadWords;
  /** The request's `Accept` header. */
  accept?: string;
  userAgent?: string;
}

/** `localhost` and `*.localhost` are loopback by definition (RFC 6761): no DNS is asked. */
const localhostLookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];

function isLocalhostName(url: URL): boolean {
  const host = url.hostname.replace(/\.$/, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost');
}

/** `1000 bytes`, `20 MiB`, `1.5 MiB`. */
export function sizeWords(bytes: number): string {
  const mib = bytes / (1 << 20);
  if (mib < 1) return `${bytes} bytes`;
  return Number.isInteger(mib) ? `${mib} MiB` : `${mib.toFixed(1)} MiB`;
}

/** The URL's form (no DNS), as parseTargetUrl checks a webhook's. Throws TargetRejected with a customer-facing reason. */
export function parseDownloadUrl(raw: string, policy: TargetPolicy, words: DownloadWords = GENERIC_WORDS): URL {
  if (raw.length > MAX_URL_LENGTH) throw new TargetRejected(`must be at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TargetRejected(`must be an absolute URL such as ${words.example}`);
  }
  if (url.protocol !== 'https:' && !(policy.allowInsecure && url.protocol === 'http:')) {
    throw new TargetRejected(policy.allowInsecure ? 'must use https (or http on this development instance)' : 'must use https');
  }
  if (url.username || url.password) throw new TargetRejected('must not carry credentials (user:password@); use a URL that needs none, such as a signed URL');
  if (!url.hostname) throw new TargetRejected('must name a host');
  return url;
}

/** The address a host is without DNS (an IP literal, or a localhost name), else null. */
function addressWithoutDns(url: URL): string | null {
  const host = bareHost(url);
  if (isIP(host)) return host;
  return isLocalhostName(url) ? '127.0.0.1' : null;
}

/** What is wrong with the URL's form and, when its host is an address already, its class; null when fine. No DNS. */
export function downloadUrlProblem(raw: string, policy: TargetPolicy, words: DownloadWords = GENERIC_WORDS): string | null {
  let url: URL;
  try {
    url = parseDownloadUrl(raw, policy, words);
  } catch (err) {
    if (err instanceof TargetRejected) return err.message;
    throw err;
  }
  const address = addressWithoutDns(url);
  const verdict = address ? isAllowedAddress(address, policy) : { ok: true as const };
  if (verdict.ok) return null;
  const shown = isIP(bareHost(url)) ? `address ${address}` : `host "${url.hostname}" is ${address}, which`;
  return `${shown} is ${/^[aeiou]/.test(verdict.class) ? 'an' : 'a'} ${verdict.class} address; ${words.refusedFor} must be publicly reachable`;
}

/** Resolves the URL's host and checks every address (resolveTarget); TargetRejected in `words`. */
export async function resolveDownload(url: URL, policy: TargetPolicy, lookup?: LookupFn, words: DownloadWords = GENERIC_WORDS): Promise<ResolvedAddress[]> {
  try {
    return await resolveTarget(url, policy, isLocalhostName(url) ? localhostLookup : lookup);
  } catch (err) {
    if (err instanceof TargetRejected) throw new TargetRejected(err.message.replaceAll('webhook targets', words.refusedFor));
    throw err;
  }
}

/** The check a URL gets when it is registered: its form, then its host resolved and every address checked. Null when fine. */
export async function checkDownloadUrl(raw: string, policy: TargetPolicy, opts: { lookup?: LookupFn; words?: DownloadWords } = {}): Promise<string | null> {
  const words = opts.words ?? GENERIC_WORDS;
  const problem = downloadUrlProblem(raw, policy, words);
  if (problem) return problem;
  try {
    await resolveDownload(parseDownloadUrl(raw, policy, words), policy, opts.lookup, words);
  } catch (err) {
    if (err instanceof TargetRejected) return err.message;
    throw err;
  }
  return null;
}

/** A GET to the checked address whatever a second lookup would say (no rebinding), without pooling. */
function get(url: URL, pinned: ResolvedAddress, signal: AbortSignal, headers: Record<string, string>): Promise<http.IncomingMessage> {
  const pin: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [pinned]);
    else callback(null, pinned.address, pinned.family);
  };
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = client.get(url, { lookup: pin, agent: false, signal, headers }, resolve);
    req.on('error', reject);
  });
}

/** ... or a DownloadError for an answer that is not the file (redirects are not followed). */
function refuseAnswer(res: http.IncomingMessage, maxBytes: number, words: DownloadWords): DownloadError | null {
  const status = res.statusCode ?? 0;
  if (status >= 300 && status < 400)
    return new DownloadError('redirect', `${words.url} answered a redirect (${status}); redirects are not followed, give the final URL`);
  if (status < 200 || status >= 300) return new DownloadError('status', `${words.url} answered HTTP ${status}`);
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) return new DownloadError('too_large', `${words.file} is larger than ${sizeWords(maxBytes)}`);
  return null;
}

/** A network failure in words (its code where it has one; the host is the customer's own). */
function networkWords(err: Error, words: DownloadWords): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ERR_STREAM_PREMATURE_CLOSE' || code === 'ECONNRESET')
    return `the connection closed before the whole ${words.file.replace(/^the /, '')} arrived`;
  return `${words.url} could not be fetched (${code ?? err.message})`;
}

/**
 * Downloads `url` into `file` (a new file of this machine: it must not exist; made 0600), hashing
 * and counting as it streams. Returns the lower-case hex SHA-256 of the bytes served and their
 * count. DownloadError for whatever the URL or its server did; on one, `file` may hold part of the
 * answer (the caller removes it, as it removes the file after use).
 */
export async function downloadToFile(url: string, file: string, opts: DownloadOptions): Promise<{ sha256: string; bytes: number }> {
  const words = opts.words ?? GENERIC_WORDS;
  const { policy, maxBytes, timeoutMs } = opts;
  const signal = AbortSignal.timeout(timeoutMs);
  const tooLarge = () => new DownloadError('too_large', `${words.file} is larger than ${sizeWords(maxBytes)}`);
  let target: URL;
  let addresses: ResolvedAddress[];
  try {
    target = parseDownloadUrl(url, policy, words);
    addresses = await resolveDownload(target, policy, opts.lookup, words);
  } catch (err) {
    if (err instanceof TargetRejected) throw new DownloadError('refused', `${words.url} is refused: ${err.message}`);
    throw err;
  }
  const sink = createWriteStream(file, { flags: 'wx', mode: 0o600 });
  // The sink's own failures (this machine's disk) carry its path; ones passed on to it by the pipeline do not.
  let sinkFailed = false;
  sink.on('error', (err: NodeJS.ErrnoException) => (sinkFailed ||= err.path === file));
  const hash = createHash('sha256');
  let bytes = 0;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length;
      if (bytes > maxBytes) return done(tooLarge());
      hash.update(chunk);
      done(null, chunk);
    },
  });
  const headers = {
    accept: opts.accept ?? 'application/octet-stream, */*;q=0.8',
    'user-agent': opts.userAgent ?? 'cloud-platform-fetch/1',
  };
  try {
    const res = await get(target, addresses[0], signal, headers);
    const refusal = refuseAnswer(res, maxBytes, words);
    if (refusal) {
      res.destroy();
      throw refusal;
    }
    await pipeline(res, meter, sink, { signal });
    return { sha256: hash.digest('hex'), bytes };
  } catch (err) {
    if (err instanceof DownloadError) throw err;
    if (sinkFailed) throw err;
    if (signal.aborted) throw new DownloadError('timeout', `${words.file} did not arrive within ${timeoutMs / 1000} s`);
    throw new DownloadError('network', networkWords(err as Error, words));
  } finally {
    sink.destroy();
  }
}
