/**
 * The local stand-in of wordpress.org's plugin directory (not reachable here): the plugins of
 * providers/wordpress/catalog/ (`<slug>/<version>/<slug>/...`, e.g. cloud-hello 1.0.0 and 1.1.0) plus
 * akismet as Debian installs it (/usr/share/wordpress/wp-content/plugins/akismet, 5.0.2), read at
 * run time and never copied into the repository. Zips are built once per slug and version into
 * `cacheDir` with PHP's ZipArchive (php/build-zip.php, its request as JSON on stdin); their top
 * folder is the slug. `cacheDir` and the zips are world-readable: the sites' helpers (each its
 * own OS account) read them.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import type { WpDirectoryPlugin } from '../wordpress.provider';
import { BackendRefusedError } from '../errors';
import { makeDirectory } from '../local-server';
import { DEFAULT_PHP_BINARY } from './helper';
import { compareVersions, DEFAULT_CORE_SOURCE } from './site-files';

const BACKEND = 'wordpress';
export const CATALOG_DIR = path.join(__dirname, 'catalog');
const BUILD_ZIP = path.join(__dirname, 'php', 'build-zip.php');
const SLUG = /^[a-z0-9][a-z0-9-]{0,99}$/;
const VERSION = /^\d+(\.\d+){1,3}$/;

/** One version of one plugin: the folder whose contents become `<slug>/` in its zip. */
export interface CatalogSource {
  slug: string;
  version: string;
  dir: string;
}

export interface LocalPluginDirectoryOptions {
  /** `<slug>/<version>/<slug>/` trees (default: providers/wordpress/catalog). */
  catalogDir?: string;
  /** More plugins (default: akismet from the installed WordPress, when present). */
  extraSources?: CatalogSource[];
  phpBinary?: string;
}

interface Entry {
  slug: string;
  name: string;
  versions: Map<string, string>;
}

/** A plugin header field of a plugin's main file (as WordPress's get_file_data reads it). */
function headerField(text: string, field: string): string | null {
  const match = text.slice(0, 8192).match(new RegExp(`^[ \\t/*#@]*${field}:(.*)$`, 'mi'));
  return match ? match[1].replace(/\s*(?:\*\/|\?>).*/, '').trim() || null : null;
}

/** The plugin's name and version from the first top-level PHP file with a `Plugin Name:` header. */
async function readHeader(dir: string): Promise<{ name: string; version: string | null } | null> {
  const files = (await fs.readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.php')).sort();
  for (const file of files) {
    const text = await fs.readFile(path.join(dir, file), 'utf8').catch(() => '');
    const name = headerField(text, 'Plugin Name');
    if (name) return { name, version: headerField(text, 'Version') };
  }
  return null;
}

function defaultExtraSources(): CatalogSource[] {
  return [{ slug: 'akismet', version: '', dir: path.join(DEFAULT_CORE_SOURCE, 'wp-content', 'plugins', 'akismet') }];
}

export class LocalPluginDirectory {
  private catalog: Promise<Map<string, Entry>> | null = null;
  private readonly building = new Map<string, Promise<string>>();

  constructor(
    readonly cacheDir: string,
    private readonly opts: LocalPluginDirectoryOptions = {},
  ) {}

  private load(): Promise<Map<string, Entry>> {
    this.catalog ??= this.scan().catch((err: unknown) => {
      this.catalog = null;
      throw err;
    });
    return this.catalog;
  }

  private async scan(): Promise<Map<string, Entry>> {
    const sources: CatalogSource[] = [];
    const catalogDir = this.opts.catalogDir ?? CATALOG_DIR;
    for (const slug of await fs.readdir(catalogDir).catch(() => [] as string[])) {
      if (!SLUG.test(slug)) continue;
      for (const version of await fs.readdir(path.join(catalogDir, slug)).catch(() => [] as string[])) {
        if (VERSION.test(version)) sources.push({ slug, version, dir: path.join(catalogDir, slug, version, slug) });
      }
    }
    sources.push(...(this.opts.extraSources ?? defaultExtraSources()));
    const entries = new Map<string, Entry>();
    for (const source of sources) {
      const header = await readHeader(source.dir);
      if (!header || !SLUG.test(source.slug)) continue;
      // The files say which version they are when the source does not.
      const version = source.version || header.version;
      if (!version || !VERSION.test(version)) continue;
      const entry = entries.get(source.slug) ?? { slug: source.slug, name: header.name, versions: new Map<string, string>() };
      entry.versions.set(version, source.dir);
      entries.set(source.slug, entry);
    }
    for (const entry of entries.values()) {
      // The newest version names the plugin.
      const latest = [...entry.versions.keys()].sort(compareVersions).at(-1) as string;
      entry.name = (await readHeader(entry.versions.get(latest) as string))?.name ?? entry.name;
    }
    return entries;
  }

  private static describe(entry: Entry): WpDirectoryPlugin {
    const versions = [...entry.versions.keys()].sort(compareVersions);
    return { slug: entry.slug, name: entry.name, latestVersion: versions[versions.length - 1], versions };
  }

  /** Plugins whose slug or name holds `query` (case-insensitive; an empty query lists them all), by slug. */
  async search(query: string): Promise<WpDirectoryPlugin[]> {
    const q = query.trim().toLowerCase();
    return [...(await this.load()).values()]
      .filter((e) => !q || e.slug.includes(q) || e.name.toLowerCase().includes(q))
      .sort((a, b) => a.slug.localeCompare(b.slug))
      .map((e) => LocalPluginDirectory.describe(e));
  }

  async plugin(slug: string): Promise<WpDirectoryPlugin | null> {
    const entry = (await this.load()).get(slug);
    return entry ? LocalPluginDirectory.describe(entry) : null;
  }

  /**
   * The path of the plugin's zip at `version` (top folder = slug), built on first use. Unknown slug
   * or version: BackendRefusedError (validation_failed, param `slug` / `version`).
   */
  async zip(slug: string, version: string): Promise<string> {
    const entry = (await this.load()).get(slug);
    if (!entry) throw new BackendRefusedError(BACKEND, `The plugin directory has no plugin "${slug}".`, 'validation_failed', 'slug');
    const dir = entry.versions.get(version);
    if (!dir) throw new BackendRefusedError(BACKEND, `The plugin directory has no version "${version}" of "${slug}".`, 'validation_failed', 'version');
    const key = `${slug}@${version}`;
    let pending = this.building.get(key);
    if (!pending) {
      pending = this.build(slug, version, dir).finally(() => this.building.delete(key));
      this.building.set(key, pending);
    }
    return pending;
  }

  private async build(slug: string, version: string, dir: string): Promise<string> {
    const out = path.join(path.resolve(this.cacheDir), `${slug}-${version}.zip`);
    if (
      await fs.stat(out).then(
        (st) => st.isFile(),
        () => false,
      )
    )
      return out;
    await makeDirectory(this.cacheDir, 0o755);
    // Built under a temporary name and renamed: a zip at its final name is always whole.
    const tmp = path.join(path.dirname(out), `.${slug}-${version}-${process.pid}-${randomBytes(4).toString('hex')}.zip`);
    try {
      await this.runBuild({ source: dir, top: slug, out: tmp });
      await fs.chmod(tmp, 0o644);
      await fs.rename(tmp, out);
    } finally {
      await fs.rm(tmp, { force: true });
    }
    return out;
  }

  private runBuild(request: { source: string; top: string; out: string }): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.opts.phpBinary ?? DEFAULT_PHP_BINARY, ['-d', 'display_errors=stderr', BUILD_ZIP], {
        env: { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8' },
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
      child.stderr.on('data', (c: Buffer) => (stderr = (stderr + c.toString('utf8')).slice(-4000)));
      const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
      child.once('error', (e) => {
        clearTimeout(timer);
        reject(new Error(`building the plugin zip: cannot start php: ${e.message}`));
      });
      child.once('close', (code) => {
        clearTimeout(timer);
        let answer: { ok?: boolean; error?: string } = {};
        try {
          answer = JSON.parse(stdout.trim()) as typeof answer;
        } catch {
          // below
        }
        if (code === 0 && answer.ok) resolve();
        else reject(new Error(`building the plugin zip ${path.basename(request.out)} failed (${code}): ${answer.error ?? (stderr.trim() || stdout.trim())}`));
      });
      child.stdin.on('error', () => undefined);
      child.stdin.end(JSON.stringify(request));
    });
  }
}
