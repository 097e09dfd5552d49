import type { FileHandle } from 'node:fs/promises';
import { mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DownloadError, downloadToFile, type DownloadWords } from '../../infra/outbound-download';
import type { LookupFn, TargetPolicy } from '../../infra/webhook-targets';
import { BackendGoneError, BackendRefusedError } from '../../providers/errors';
import type { WordpressProvider, WpDirectoryPlugin, WpPlugin } from '../../providers/wordpress.provider';
import { conflict, notFound, validationFailed, type FieldError } from '../errors';

/**
 * A site's plugins (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): installed from the plugin
 * directory (the local stand-in behind the provider) by `slug` and `version`, or from a zip the
 * customer serves at an https URL. The control plane downloads such a zip itself (the outbound
 * download kit: the webhook targets' address rules, no redirect, a size cap, a deadline), checks
 * its SHA-256 when one is given and reads its central directory for the plugin's slug (the zip's
 * only top folder), then hands the file to the backend. Updates come from the directory only.
 */

/** A plugin slug as paths and zips name it. */
export const PLUGIN_SLUG_RE = /^[a-z0-9][a-z0-9._-]{0,99}$/;
export const PLUGIN_SLUG_RULE = 'must be a plugin slug: lower-case letters, digits, ".", "_" and "-", starting with a letter or digit, at most 100 characters';

/** SPEC "Limits": a recipe zip is at most 20 MB; a plugin zip too. */
export const PLUGIN_ZIP_MAX_BYTES = 20 << 20;
/** Deadline of a plugin zip's download (the request waits for it). */
export const PLUGIN_ZIP_TIMEOUT_MS = 60_000;
/** More entries than any plugin has; bounds the reading of a hostile central directory. */
const MAX_ZIP_ENTRIES = 100_000;

const ZIP_WORDS: DownloadWords = {
  url: 'the zip URL',
  file: 'the plugin zip',
  refusedFor: 'plugin zips',
  example: 'https://example.com/my-plugin.zip',
};

// ---- versions ----------------------------------------------------------------------------------

/** PHP's `version_compare` ranks of the words a version may hold; any other word is below `dev`. */
const WORD_RANK: Record<string, number> = { dev: 0, alpha: 1, a: 1, beta: 2, b: 2, rc: 3, '#': 4, pl: 5, p: 5 };

function versionParts(version: string): string[] {
  return version
    .trim()
    .toLowerCase()
    .replace(/[-_+]/g, '.')
    .replace(/(\d)([^\d.])/g, '$1.$2')
    .replace(/([^\d.])(\d)/g, '$1.$2')
    .split('.')
    .filter((p) => p !== '');
}

const rankOf = (part: string): number => (/^\d+$/.test(part) ? WORD_RANK['#'] : (WORD_RANK[part] ?? -1));

/** Negative, zero or positive as `a` is below, equal to or above `b`, as WordPress compares plugin versions (PHP's version_compare). */
export function compareVersions(a: string, b: string): number {
  const x = versionParts(a);
  const y = versionParts(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const p = x[i];
    const q = y[i];
    if (p === q) continue;
    // A missing part is below a number (1.0 < 1.0.1) and above a pre-release word (1.0rc1 < 1.0).
    if (p === undefined) return /^\d+$/.test(q) ? -1 : WORD_RANK['#'] - rankOf(q);
    if (q === undefined) return /^\d+$/.test(p) ? 1 : rankOf(p) - WORD_RANK['#'];
    const pn = /^\d+$/.test(p);
    const qn = /^\d+$/.test(q);
    if (pn && qn) {
      const d = Number(p) - Number(q);
      if (d !== 0) return d;
      continue;
    }
    const d = rankOf(p) - rankOf(q);
    if (d !== 0) return d;
  }
  return 0;
}

// ---- what the API shows ------------------------------------------------------------------------

/** An installed plugin with what the directory offers for it. */
export interface PluginView extends WpPlugin {
  latestVersion: string | null;
  updateAvailable: boolean;
}

export function pluginView(plugin: WpPlugin, listed: WpDirectoryPlugin | null): PluginView {
  const latestVersion = listed?.latestVersion ?? null;
  return { ...plugin, latestVersion, updateAvailable: latestVersion !== null && compareVersions(latestVersion, plugin.version) > 0 };
}

/** Each plugin with the directory's latest version (a plugin the directory does not list: none, no update). */
export async function withDirectory(wp: WordpressProvider, plugins: WpPlugin[]): Promise<PluginView[]> {
  const out: PluginView[] = [];
  for (const plugin of plugins) out.push(pluginView(plugin, await wp.directoryPlugin(plugin.slug)));
  return out;
}

/**
 * A backend's "gone" about what the path names (a plugin, a cron hook), not the site, is the
 * request's 404 (`what` names it); anything else goes up as it is (the site's own absence stays a
 * 409, the central mapping). Backends name the site `site <n>` in BackendGoneError's `what`.
 */
export function notFoundIfGone(err: unknown, what = 'plugin'): never {
  if (err instanceof BackendGoneError && !/^site\b/.test(err.what)) throw notFound(what);
  throw err;
}

/** The installed plugin `slug`; 404 when the site has none. */
export async function installedPlugin(wp: WordpressProvider, serviceId: number, slug: string): Promise<WpPlugin> {
  const plugin = (await wp.listPlugins(serviceId)).find((p) => p.slug === slug);
  if (!plugin) throw notFound('plugin');
  return plugin;
}

// ---- install -----------------------------------------------------------------------------------

export type InstallSource = { kind: 'directory'; slug: string; version?: string } | { kind: 'url'; url: string; sha256?: string };

/** The install body's source: `{slug, version?}` or `{url, sha256?}`, never both (400 with the param at fault). */
export function installSource(body: { slug?: string; version?: string; url?: string; sha256?: string }): InstallSource {
  const errors: FieldError[] = [];
  if (body.slug !== undefined && body.url !== undefined)
    errors.push({ param: 'url', message: 'give either "slug" (from the plugin directory) or "url" (a zip), not both' });
  else if (body.slug === undefined && body.url === undefined)
    errors.push({ param: 'slug', message: 'is required: a plugin of the directory (or give "url", a zip)' });
  if (body.slug !== undefined && !PLUGIN_SLUG_RE.test(body.slug)) errors.push({ param: 'slug', message: PLUGIN_SLUG_RULE });
  if (body.version !== undefined && body.slug === undefined) errors.push({ param: 'version', message: 'goes with "slug"; a zip carries its own version' });
  if (body.version !== undefined && !/^[0-9A-Za-z][0-9A-Za-z.+_-]{0,49}$/.test(body.version))
    errors.push({ param: 'version', message: 'must be a version such as 1.2.3' });
  if (body.sha256 !== undefined && body.url === undefined) errors.push({ param: 'sha256', message: 'goes with "url": the SHA-256 of the zip' });
  if (body.sha256 !== undefined && !/^[0-9a-fA-F]{64}$/.test(body.sha256))
    errors.push({ param: 'sha256', message: 'must be 64 hexadecimal characters (the SHA-256 of the zip)' });
  if (errors.length > 0) throw validationFailed(errors);
  return body.url !== undefined
    ? { kind: 'url', url: body.url, ...(body.sha256 ? { sha256: body.sha256.toLowerCase() } : {}) }
    : { kind: 'directory', slug: body.slug!, ...(body.version ? { version: body.version } : {}) };
}

export interface PluginInstallDeps {
  wp: WordpressProvider;
  policy: TargetPolicy;
  /** Host resolution (tests). */
  lookup?: LookupFn;
  maxBytes?: number;
  timeoutMs?: number;
}

/** The directory's plugin and version (the latest unless one is named); 400 `slug` or `version` otherwise. */
async function directoryRelease(wp: WordpressProvider, slug: string, version?: string): Promise<{ listed: WpDirectoryPlugin; version: string }> {
  const listed = await wp.directoryPlugin(slug);
  if (!listed) throw validationFailed([{ param: 'slug', message: `there is no plugin "${slug}" in the plugin directory` }]);
  if (version === undefined) return { listed, version: listed.latestVersion };
  if (!listed.versions.includes(version))
    throw validationFailed([{ param: 'version', message: `the plugin "${slug}" has no version ${version}; it has ${listed.versions.join(', ')}` }]);
  return { listed, version };
}

/**
 * The backend's install refusal with `param` naming the request's field: the site's helper names
 * the file it was given (`zip`) or the folder it took (`slug`), which for a URL install are both the
 * zip at `url`, and for a directory install the plugin `slug`.
 */
function asRequestParam(err: unknown, field: 'url' | 'slug'): never {
  if (err instanceof BackendRefusedError && (err.param === 'zip' || err.param === 'slug') && err.param !== field) {
    throw new BackendRefusedError(err.backend, err.message, err.code, field);
  }
  throw err;
}

/** Installs (or reinstalls over) a plugin from the directory or a zip URL; activates it when asked. */
export async function installPlugin(deps: PluginInstallDeps, serviceId: number, source: InstallSource, activate: boolean): Promise<PluginView> {
  const { wp } = deps;
  if (source.kind === 'directory') {
    const { listed, version } = await directoryRelease(wp, source.slug, source.version);
    const zip = await wp.directoryZip(source.slug, version);
    return pluginView(await wp.installPlugin(serviceId, source.slug, zip, activate).catch((err: unknown) => asRequestParam(err, 'slug')), listed);
  }
  const work = await mkdtemp(path.join(tmpdir(), 'wp-plugin-zip-'));
  try {
    const zip = path.join(work, 'plugin.zip');
    let sha256: string;
    try {
      ({ sha256 } = await downloadToFile(source.url, zip, {
        policy: deps.policy,
        maxBytes: deps.maxBytes ?? PLUGIN_ZIP_MAX_BYTES,
        timeoutMs: deps.timeoutMs ?? PLUGIN_ZIP_TIMEOUT_MS,
        lookup: deps.lookup,
        words: ZIP_WORDS,
        accept: 'application/zip, application/octet-stream;q=0.9, */*;q=0.8',
        userAgent: 'cloud-wordpress-plugins/1',
      }));
    } catch (err) {
      if (err instanceof DownloadError) throw validationFailed([{ param: 'url', message: err.message }]);
      throw err;
    }
    if (source.sha256 !== undefined && sha256 !== source.sha256)
      throw validationFailed([{ param: 'sha256', message: `does not match the zip: the zip served has SHA-256 ${sha256}` }]);
    let slug: string;
    try {
      slug = await zipTopFolder(zip);
    } catch (err) {
      if (err instanceof ZipRefused) throw validationFailed([{ param: 'url', message: err.message }]);
      throw err;
    }
    const plugin = await wp.installPlugin(serviceId, slug, zip, activate).catch((err: unknown) => asRequestParam(err, 'url'));
    return pluginView(plugin, await wp.directoryPlugin(slug));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

// ---- updates -----------------------------------------------------------------------------------

/**
 * Updates an installed plugin to the directory's latest version, keeping whether it is active.
 * 404 when it is not installed, 409 when the directory does not list it; an up-to-date plugin is
 * answered as it is (`from` equals `to`).
 */
export async function updatePlugin(wp: WordpressProvider, serviceId: number, slug: string): Promise<{ plugin: PluginView; from: string; to: string }> {
  const plugin = await installedPlugin(wp, serviceId, slug);
  const listed = await wp.directoryPlugin(slug);
  if (!listed)
    throw conflict(
      `The plugin ${slug} is not in the plugin directory, so it has no update to install; install a newer zip by URL (POST /v1/wordpress/{id}/plugins with "url") to replace it.`,
    );
  if (compareVersions(listed.latestVersion, plugin.version) <= 0) return { plugin: pluginView(plugin, listed), from: plugin.version, to: plugin.version };
  const zip = await wp.directoryZip(slug, listed.latestVersion);
  const updated = await wp.installPlugin(serviceId, slug, zip, plugin.active);
  return { plugin: pluginView(updated, listed), from: plugin.version, to: updated.version };
}

/** Updates every installed plugin the directory has a greater version of, each keeping whether it is active; answers what changed. */
export async function updateAllPlugins(wp: WordpressProvider, serviceId: number): Promise<Array<{ slug: string; from: string; to: string }>> {
  const updated: Array<{ slug: string; from: string; to: string }> = [];
  for (const plugin of await wp.listPlugins(serviceId)) {
    const listed = await wp.directoryPlugin(plugin.slug);
    if (!listed || compareVersions(listed.latestVersion, plugin.version) <= 0) continue;
    const zip = await wp.directoryZip(plugin.slug, listed.latestVersion);
    const after = await wp.installPlugin(serviceId, plugin.slug, zip, plugin.active);
    updated.push({ slug: plugin.slug, from: plugin.version, to: after.version });
  }
  return updated;
}

// ---- zips --------------------------------------------------------------------------------------

/** Why a zip is not a plugin zip, in words for the customer (never this machine's paths). */
export class ZipRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ZipRefused';
  }
}

const EOCD = 0x06054b50;
const ZIP64_LOCATOR = 0x07064b50;
const ZIP64_EOCD = 0x06064b50;
const CENTRAL = 0x02014b50;

async function readAt(file: FileHandle, position: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  const { bytesRead } = await file.read(buf, 0, length, position);
  return buf.subarray(0, bytesRead);
}

/**
 * The entry names of a zip's central directory (ZIP64 included), read without unpacking anything.
 * ZipRefused when the file is not a zip or its directory is damaged.
 */
export async function zipEntryNames(zipPath: string): Promise<string[]> {
  const notZip = () => new ZipRefused('the file at the URL is not a zip archive');
  const damaged = () => new ZipRefused('the zip is damaged: its central directory cannot be read');
  const file = await open(zipPath, 'r');
  try {
    const size = (await file.stat()).size;
    if (size < 22) throw notZip();
    // The end record: 22 bytes and a comment of at most 65535, at the end of the file.
    const tailStart = Math.max(0, size - 22 - 0xffff);
    const tail = await readAt(file, tailStart, size - tailStart);
    let at = -1;
    for (let i = tail.length - 22; i >= 0; i--) {
      if (tail.readUInt32LE(i) === EOCD && i + 22 + tail.readUInt16LE(i + 20) <= tail.length) {
        at = i;
        break;
      }
    }
    if (at < 0) throw notZip();
    const eocdPos = tailStart + at;
    if (tail.readUInt16LE(at + 4) !== 0 || tail.readUInt16LE(at + 6) !== 0) throw new ZipRefused('the zip is split over several files; give a single-file zip');
    let count = tail.readUInt16LE(at + 10);
    let cdSize = tail.readUInt32LE(at + 12);
    let cdOffset = tail.readUInt32LE(at + 16);
    if (count === 0xffff || cdSize === 0xffffffff || cdOffset === 0xffffffff) {
      if (eocdPos < 20) throw damaged();
      const locator = await readAt(file, eocdPos - 20, 20);
      if (locator.length < 20 || locator.readUInt32LE(0) !== ZIP64_LOCATOR) throw damaged();
      const recordPos = Number(locator.readBigUInt64LE(8));
      if (!Number.isSafeInteger(recordPos) || recordPos + 56 > eocdPos) throw damaged();
      const record = await readAt(file, recordPos, 56);
      if (record.length < 56 || record.readUInt32LE(0) !== ZIP64_EOCD) throw damaged();
      count = Number(record.readBigUInt64LE(32));
      cdSize = Number(record.readBigUInt64LE(40));
      cdOffset = Number(record.readBigUInt64LE(48));
    }
    if (count > MAX_ZIP_ENTRIES) throw new ZipRefused(`the zip holds more than ${MAX_ZIP_ENTRIES} entries`);
    if (!Number.isSafeInteger(cdOffset) || !Number.isSafeInteger(cdSize) || cdOffset + cdSize > eocdPos) throw damaged();
    const cd = await readAt(file, cdOffset, cdSize);
    if (cd.length < cdSize) throw damaged();
    const names: string[] = [];
    let pos = 0;
    for (let n = 0; n < count; n++) {
      if (pos + 46 > cd.length || cd.readUInt32LE(pos) !== CENTRAL) throw damaged();
      const utf8 = (cd.readUInt16LE(pos + 8) & 0x0800) !== 0;
      const nameLength = cd.readUInt16LE(pos + 28);
      const next = pos + 46 + nameLength + cd.readUInt16LE(pos + 30) + cd.readUInt16LE(pos + 32);
      if (next > cd.length) throw damaged();
      names.push(cd.subarray(pos + 46, pos + 46 + nameLength).toString(utf8 ? 'utf8' : 'latin1'));
      pos = next;
    }
    return names;
  } finally {
    await file.close();
  }
}

/** A name as the customer wrote it, quoted and cut short for a message. */
const shown = (name: string) => JSON.stringify(name.length > 120 ? `${name.slice(0, 120)}...` : name);

/**
 * The plugin's slug from a zip: its only top folder (macOS's `__MACOSX/` and `./` entries are
 * ignored, as WordPress ignores them, and as the site's helper skips them when it extracts:
 * providers/wordpress/php/cloud-helper.php cloud_helper_zip_entries). ZipRefused for a zip with no top folder, files beside it or several, an unsafe entry
 * path (absolute, `..`), or a folder name that is not a slug.
 */
export async function zipTopFolder(zipPath: string): Promise<string> {
  const tops = new Set<string>();
  const loose: string[] = [];
  for (const raw of await zipEntryNames(zipPath)) {
    const name = raw.replaceAll('\\', '/');
    if (name.startsWith('/') || /^[A-Za-z]:/.test(name) || name.split('/').includes('..') || name.includes('\0'))
      throw new ZipRefused(`the zip has an entry with an unsafe path: ${shown(raw)}`);
    const parts = name.split('/').filter((p) => p !== '' && p !== '.');
    if (parts.length === 0 || parts[0] === '__MACOSX') continue;
    if (parts.length === 1 && !name.endsWith('/')) loose.push(parts[0]);
    else tops.add(parts[0]);
  }
  if (loose.length > 0)
    throw new ZipRefused(
      `the zip has files outside a top folder (${loose.slice(0, 3).map(shown).join(', ')}); a plugin zip holds one folder named after the plugin`,
    );
  if (tops.size === 0) throw new ZipRefused('the zip holds no folder; a plugin zip holds one folder named after the plugin');
  if (tops.size > 1)
    throw new ZipRefused(
      `the zip has ${tops.size} top folders (${[...tops].slice(0, 3).map(shown).join(', ')}${tops.size > 3 ? ', ...' : ''}); a plugin zip holds exactly one, named after the plugin`,
    );
  const [slug] = tops;
  if (!PLUGIN_SLUG_RE.test(slug)) throw new ZipRefused(`the zip's top folder ${shown(slug)} is not a plugin slug; it ${PLUGIN_SLUG_RULE}`);
  return slug;
}
