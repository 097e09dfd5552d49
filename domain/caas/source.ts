import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { checkDownloadUrl, DownloadError, downloadToFile, downloadUrlProblem, type DownloadWords } from '../../infra/outbound-download';
import type { LookupFn, TargetPolicy } from '../../infra/webhook-targets';
import type { FieldError } from '../errors';
import { ArchiveRefused, extractArchive } from './source-archive';

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

/** How the download kit (infra/outbound-download.ts) words a source's problems. */
const WORDS: DownloadWords = {
  url: 'the source URL',
  file: 'the source archive',
  refusedFor: 'source archives',
  example: 'https://example.com/app.tar.gz',
};

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
    const problem = downloadUrlProblem(url, policy, WORDS);
    if (problem) problems.push({ param: 'source.url', message: problem });
  }
  for (const key of Object.keys(rest)) problems.push({ param: `source.${key}`, message: 'is not a field of a source; give "type" and "url"' });
  return problems;
}

/**
 * The create-time check as webhooks and cron destinations make it (checkTarget): `sourceProblems`,
 * then the host resolved and every address checked (a name that does not resolve, or resolves to a
 * private address, is `source.url`'s problem). `[]` when fine.
 */
export async function checkSourceProblems(source: unknown, policy: TargetPolicy, lookup?: LookupFn): Promise<FieldError[]> {
  const problems = sourceProblems(source, policy);
  if (problems.length > 0) return problems;
  const problem = await checkDownloadUrl((source as { url: string }).url, policy, { lookup, words: WORDS });
  return problem ? [{ param: 'source.url', message: problem }] : [];
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
    let downloaded: { sha256: string; bytes: number };
    try {
      downloaded = await downloadToFile(url, archive, {
        policy: opts.policy,
        maxBytes: limits.maxBytes,
        timeoutMs: limits.timeoutMs,
        lookup: opts.lookup,
        words: WORDS,
        accept: 'application/gzip, application/x-gzip, application/octet-stream;q=0.9, */*;q=0.8',
        userAgent: 'cloud-caas-deploy/1',
      });
    } catch (err) {
      if (err instanceof DownloadError) throw new SourceError('source_unavailable', err.message);
      throw err;
    }
    const { sha256, bytes } = downloaded;
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
