import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
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
} from '../../infra/webhook-targets';
import type { FieldError } from '../errors';
import { ArchiveRefused, extractArchive, sizeWords } from './source-archive';

/**
 * A CaaS app's source (DECISIONS "CaaS"): `{type: "archive", url}`, a `.tar.gz` that deploys fetch
 * and unpack, a lone top directory stripped. The URL follows the webhook targets' rules (DECISIONS
 * "Data planes and outbound fetches"): https and public addresses, no userinfo; with
 * ALLOW_INSECURE_TARGETS also plain http and loopback (`localhost` and `*.localhost` are 127.0.0.1
 * without DNS, RFC 6761, as for image origins). At create time the URL's form is checked
 * (`sourceProblems`, no DNS) and then, as webhooks do, its host resolved (`checkSourceProblems`);
 * every fetch checks again after its own resolution and connects to the address it checked.
 */
export class SourceError extends Error {
  /**
   * `source_unavailable`: the archive could not be fetched (refused URL, network, non-2xx, redirect,
   * too big, too slow). `source_invalid`: it arrived but is not a gzip'd tar this platform unpacks.
   * Messages are for the customer: they name the URL's host and the archive's entries, never this
   * machine's paths.
   */
  constructor(
    readonly code: 'source_unavailable' | 'source_invalid',
    message: string,
  ) {
    super(message);
    this.name = 'SourceError';
  }
}

export const SOURCE_DEFAULTS = {
  maxBytes: 100 << 20,
  timeoutMs: 60_000,
  maxEntries: 20_000,
  maxUnpackedBytes: 500 << 20,
};

export interface FetchSourceOptions {
  policy: TargetPolicy;
  /** Download size cap (bytes, compressed); default 100 MiB. */
  maxBytes?: number;
  /** Deadline of the whole download, DNS included, to the last byte (ms); default 60 s. Unpacking is bounded by the caps instead. */
  timeoutMs?: number;
  /** Cap on tar entries and on files plus directories written (implied parents included); default 20 000. */
  maxEntries?: number;
  /** Cap on the files' total size once unpacked; default 500 MiB. */
  maxUnpackedBytes?: number;
  /** Host resolution (tests); default the webhook targets' resolver. */
  lookup?: LookupFn;
}

const REFUSED_FOR = 'source archives';

/** `localhost` and `*.localhost` are loopback by definition (RFC 6761): no DNS is asked. */
const localhostLookup: LookupFn = async () => [{ address: '127.0.0.1', family: 4 }];

function isLocalhostName(url: URL): boolean {
  const host = url.hostname.replace(/\.$/, '').toLowerCase();
  return host === 'localhost' || host.endsWith('.localhost');
}

/** The URL's form (no DNS), as parseTargetUrl checks a webhook's, in words for a source. Throws TargetRejected. */
function parseSourceUrl(raw: string, policy: TargetPolicy): URL {
  if (raw.length > MAX_URL_LENGTH) throw new TargetRejected(`must be at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TargetRejected('must be an absolute URL such as https://example.com/app.tar.gz');
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

/** The form and, when the host is an address already, its class; null when fine. */
function urlProblem(raw: string, policy: TargetPolicy): string | null {
  let url: URL;
  try {
    url = parseSourceUrl(raw, policy);
  } catch (err) {
    if (err instanceof TargetRejected) return err.message;
    throw err;
  }
  const address = addressWithoutDns(url);
  const verdict = address ? isAllowedAddress(address, policy) : { ok: true as const };
  if (verdict.ok) return null;
  const shown = isIP(bareHost(url)) ? `address ${address}` : `host "${url.hostname}" is ${address}, which`;
  return `${shown} is ${/^[aeiou]/.test(verdict.class) ? 'an' : 'a'} ${verdict.class} address; ${REFUSED_FOR} must be publicly reachable`;
}

/**
 * The problems of an app's `source` at create time, `[]` when fine: an object `{type: "archive",
 * url}` (other keys refused, so that later ones cannot be mistaken for ignored ones), the URL's
 * form, and an IP literal's or localhost's class. No DNS: `checkSourceProblems` adds the resolution.
 */
export function sourceProblems(source: unknown, policy: TargetPolicy): FieldError[] {
  if (typeof source !== 'object' || source === null || Array.isArray(source))
    return [{ param: 'source', message: 'must be an object: {"type": "archive", "url": "https://.../app.tar.gz"}' }];
  const { type, url, ...rest } = source as Record<string, unknown>;
  const problems: FieldError[] = [];
  if (type === undefined) problems.push({ param: 'source.type', message: 'is required: "archive"' });
  else if (type !== 'archive') problems.push({ param: 'source.type', message: 'must be "archive" (a .tar.gz archive fetched by URL)' });
  if (typeof url !== 'string' || url.length === 0) problems.push({ param: 'source.url', message: 'is required: the https URL of a .tar.gz archive' });
  else {
    const problem = urlProblem(url, policy);
    if (problem) problems.push({ param: 'source.url', message: problem });
  }
  for (const key of Object.keys(rest)) problems.push({ param: `source.${key}`, message: 'is not a field of a source; give "type" and "url"' });
  return problems;
}

/** Resolves the URL's host and checks every address (resolveTarget); TargetRejected in a source's words. */
async function resolveSource(url: URL, policy: TargetPolicy, lookup?: LookupFn): Promise<ResolvedAddress[]> {
  try {
    return await resolveTarget(url, policy, isLocalhostName(url) ? localhostLookup : lookup);
  } catch (err) {
    if (err instanceof TargetRejected) throw new TargetRejected(err.message.replaceAll('webhook targets', REFUSED_FOR));
    throw err;
  }
}

/**
 * The create-time check as webhooks and cron destinations make it (checkTarget): `sourceProblems`,
 * then the host resolved and every address checked (a name that does not resolve, or resolves to a
 * private address, is `source.url`'s problem). `[]` when fine.
 */
export async function checkSourceProblems(source: unknown, policy: TargetPolicy, lookup?: LookupFn): Promise<FieldError[]> {
  const problems = sourceProblems(source, policy);
  if (problems.length > 0) return problems;
  try {
    await resolveSource(parseSourceUrl((source as { url: string }).url, policy), policy, lookup);
  } catch (err) {
    if (err instanceof TargetRejected) return [{ param: 'source.url', message: err.message }];
    throw err;
  }
  return [];
}

const unavailable = (message: string) => new SourceError('source_unavailable', message);

/** A GET to the checked address whatever a second lookup would say (no rebinding), without pooling. */
function get(url: URL, pinned: ResolvedAddress, signal: AbortSignal): Promise<http.IncomingMessage> {
  const pin: LookupFunction = (_host, options, callback) => {
    if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [pinned]);
    else callback(null, pinned.address, pinned.family);
  };
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const headers = { accept: 'application/gzip, application/x-gzip, application/octet-stream;q=0.9, */*;q=0.8', 'user-agent': 'cloud-caas-deploy/1' };
    const req = client.get(url, { lookup: pin, agent: false, signal, headers }, resolve);
    req.on('error', reject);
  });
}

/** ... or a SourceError for an answer that is not the archive (redirects are not followed). */
function refuseAnswer(res: http.IncomingMessage, maxBytes: number): SourceError | null {
  const status = res.statusCode ?? 0;
  if (status >= 300 && status < 400) return unavailable(`the source URL answered a redirect (${status}); redirects are not followed, give the final URL`);
  if (status < 200 || status >= 300) return unavailable(`the source URL answered HTTP ${status}`);
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > maxBytes) return unavailable(`the source archive is larger than ${sizeWords(maxBytes)}`);
  return null;
}

/** A network failure in words (its code where it has one; the host is the customer's own). */
function networkWords(err: Error): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ERR_STREAM_PREMATURE_CLOSE' || code === 'ECONNRESET') return 'the connection closed before the whole archive arrived';
  return `the source URL could not be fetched (${code ?? err.message})`;
}

/**
 * Downloads the archive into `file` (a new file of this machine), hashing and counting as it
 * streams. SourceError('source_unavailable') for whatever the source did; an error writing `file`
 * is this machine's and goes up as it is.
 */
async function download(raw: string, file: string, limits: typeof SOURCE_DEFAULTS, policy: TargetPolicy, lookup?: LookupFn) {
  const signal = AbortSignal.timeout(limits.timeoutMs);
  let addresses: ResolvedAddress[];
  let url: URL;
  try {
    url = parseSourceUrl(raw, policy);
    addresses = await resolveSource(url, policy, lookup);
  } catch (err) {
    if (err instanceof TargetRejected) throw unavailable(`the source URL is refused: ${err.message}`);
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
      if (bytes > limits.maxBytes) return done(unavailable(`the source archive is larger than ${sizeWords(limits.maxBytes)}`));
      hash.update(chunk);
      done(null, chunk);
    },
  });
  try {
    const res = await get(url, addresses[0], signal);
    const refusal = refuseAnswer(res, limits.maxBytes);
    if (refusal) {
      res.destroy();
      throw refusal;
    }
    await pipeline(res, meter, sink, { signal });
    return { sha256: hash.digest('hex'), bytes };
  } catch (err) {
    if (err instanceof SourceError) throw err;
    if (sinkFailed) throw err;
    if (signal.aborted) throw unavailable(`the source archive did not arrive within ${limits.timeoutMs / 1000} s`);
    throw unavailable(networkWords(err as Error));
  } finally {
    sink.destroy();
  }
}

/** Makes `dir` if it is missing; it must be empty (a caller's mistake otherwise, not the customer's). */
async function prepareDir(dir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    await mkdir(dir, { recursive: true, mode: 0o755 });
    return;
  }
  if (names.length > 0) throw new Error(`fetchSource unpacks into an empty directory; ${dir} is not empty`);
}

/**
 * Fetches an app's source archive and unpacks it into `dir` (made if missing, else it must be
 * empty). The download goes to a temporary file (hashed while it streams: `sha256` is the
 * lower-case hex SHA-256 of the bytes served) that is read twice (source-archive.ts: checked whole,
 * then written) and removed. SourceError as documented on it; after one, `dir` is empty.
 */
export async function fetchSource(url: string, dir: string, opts: FetchSourceOptions): Promise<{ sha256: string; bytes: number; files: number }> {
  const limits = {
    maxBytes: opts.maxBytes ?? SOURCE_DEFAULTS.maxBytes,
    timeoutMs: opts.timeoutMs ?? SOURCE_DEFAULTS.timeoutMs,
    maxEntries: opts.maxEntries ?? SOURCE_DEFAULTS.maxEntries,
    maxUnpackedBytes: opts.maxUnpackedBytes ?? SOURCE_DEFAULTS.maxUnpackedBytes,
  };
  await prepareDir(dir);
  const work = await mkdtemp(path.join(tmpdir(), 'caas-source-'));
  try {
    const archive = path.join(work, 'source.tar.gz');
    const { sha256, bytes } = await download(url, archive, limits, opts.policy, opts.lookup);
    try {
      const { files } = await extractArchive(archive, dir, limits);
      return { sha256, bytes, files };
    } catch (err) {
      if (err instanceof ArchiveRefused) throw new SourceError('source_invalid', err.message);
      throw err;
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
