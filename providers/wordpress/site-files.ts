/**
 * The files of hosted WordPress sites on a host (DECISIONS "Hosted WordPress"): core releases shared
 * by every site, the platform's PHP (helper, must-use plugin), and one site's root.
 *
 *   <dataDir>/core/<version>/        a WordPress release without wp-config.php, .htaccess and wp-content;
 *                                    root-owned, read-only for everyone else (0755 / 0644)
 *   <dataDir>/platform/              cloud-helper.php and mu-plugins/cloud-platform.php (root, 0755 / 0644)
 *   S/                               root, 0711 (the site's account and the web server pass through)
 *   S/wp-config.php                  the platform's static config (php/wp-config.php), root 0644
 *   S/public/                        ABSPATH: the core release's files hard-linked, root-owned
 *   S/public/wp-content/             the site's own (plugins/, themes/, uploads/), owned by the account;
 *                                    with a web server group: group = it, 02750 (setgid), else 0755
 *   S/config/                        root:account 0750; site.json, constants.json, secrets.json 0640,
 *                                    db-ca.pem 0644
 *   S/private/                       account 0700 (mail.jsonl)
 *   S/logs/                          root:account 0750: the caller makes the log files its servers write
 *
 * The account can write nothing but wp-content/ and private/; core and configuration are root's.
 * Without root (`process.getuid() !== 0`) nothing is chowned: everything is this process's.
 * Changes to one site take S/.layout.lock, so layout, core switches and configuration writes of one
 * site never interleave (API and worker processes included).
 */
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import path from 'node:path';
import { BackendRefusedError } from '../errors';
import { makeDirectory, runningAsRoot, withFileLock } from '../local-server';

const BACKEND = 'wordpress';

/** The release Debian installs, and the "latest core" stand-in made from it (a patched copy). */
export const BASE_CORE_VERSION = '6.1.9';
export const LATEST_CORE_VERSION = '6.1.10';
export const DEFAULT_CORE_SOURCE = '/usr/share/wordpress';
/** Where the platform's PHP files live in this checkout. */
export const PHP_SOURCE_DIR = path.join(__dirname, 'php');

export const SALT_NAMES = [
  'AUTH_KEY',
  'SECURE_AUTH_KEY',
  'LOGGED_IN_KEY',
  'NONCE_KEY',
  'AUTH_SALT',
  'SECURE_AUTH_SALT',
  'LOGGED_IN_SALT',
  'NONCE_SALT',
] as const;
export type SaltName = (typeof SALT_NAMES)[number];

/** S/config/site.json, read by php/wp-config.php (and `hostname` by the helper). */
export interface SiteJson {
  db: { host: string; port: number; name: string; user: string; password: string; ca_file: string };
  table_prefix: string;
  salts: Record<SaltName, string>;
  /** The host's relay (no authentication, no TLS); null: the site cannot send mail. */
  smtp: { host: string; port: number } | null;
  /** The platform's must-use plugins (`<dataDir>/platform/mu-plugins`). */
  mu_plugin_dir: string;
  /** Site-owned, outside the web root (`S/private`). */
  private_dir: string;
  /** The platform hostname: the Host the helper's WordPress believes it serves before it reads `home`. */
  hostname?: string;
}

/** What the caller gives layoutSite: site.json, where the platform's own parts may be left out. */
export interface SiteJsonInput {
  db: Omit<SiteJson['db'], 'ca_file'> & { ca_file?: string };
  table_prefix?: string;
  /** Kept from the existing site.json, else generated, when left out. */
  salts?: Partial<Record<SaltName, string>>;
  smtp: SiteJson['smtp'];
  mu_plugin_dir?: string;
  private_dir?: string;
  hostname?: string;
}

export interface SitePaths {
  root: string;
  wpConfig: string;
  public: string;
  wpContent: string;
  plugins: string;
  themes: string;
  uploads: string;
  config: string;
  siteJson: string;
  constantsJson: string;
  secretsJson: string;
  dbCa: string;
  private: string;
  mailLog: string;
  logs: string;
}

export function sitePaths(root: string): SitePaths {
  const r = path.resolve(root);
  const wpContent = path.join(r, 'public', 'wp-content');
  return {
    root: r,
    wpConfig: path.join(r, 'wp-config.php'),
    public: path.join(r, 'public'),
    wpContent,
    plugins: path.join(wpContent, 'plugins'),
    themes: path.join(wpContent, 'themes'),
    uploads: path.join(wpContent, 'uploads'),
    config: path.join(r, 'config'),
    siteJson: path.join(r, 'config', 'site.json'),
    constantsJson: path.join(r, 'config', 'constants.json'),
    secretsJson: path.join(r, 'config', 'secrets.json'),
    dbCa: path.join(r, 'config', 'db-ca.pem'),
    private: path.join(r, 'private'),
    mailLog: path.join(r, 'private', 'mail.jsonl'),
    logs: path.join(r, 'logs'),
  };
}

export interface PlatformPaths {
  dir: string;
  helper: string;
  muPlugins: string;
  coreDir: string;
}

export function platformPaths(dataDir: string): PlatformPaths {
  const d = path.resolve(dataDir);
  return {
    dir: path.join(d, 'platform'),
    helper: path.join(d, 'platform', 'cloud-helper.php'),
    muPlugins: path.join(d, 'platform', 'mu-plugins'),
    coreDir: path.join(d, 'core'),
  };
}

const VERSION_PATTERN = /^\d+\.\d+(\.\d+)?$/;
/** Top-level entries of a WordPress tree that are never core. */
const NOT_CORE = new Set(['wp-config.php', '.htaccess', 'wp-content']);
/** What a new site's wp-content starts with, from the core source's wp-content. */
const SEEDED_CONTENT = ['themes/twentytwentythree', 'themes/twentytwentytwo', 'plugins/akismet'];

export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

const exists = (p: string) =>
  fs.lstat(p).then(
    () => true,
    () => false,
  );

const tmpSuffix = () => `${process.pid}-${randomBytes(4).toString('hex')}`;

/** Writes a file atomically (temporary file beside it, then rename), with owner and mode. */
async function writeFileAtomic(file: string, content: string | Buffer, mode: number, owner: { uid: number; gid: number } | null): Promise<void> {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${tmpSuffix()}`);
  try {
    await fs.writeFile(tmp, content, { mode, flag: 'wx' });
    await fs.chmod(tmp, mode);
    if (owner && runningAsRoot()) await fs.chown(tmp, owner.uid, owner.gid);
    await fs.rename(tmp, file);
  } catch (err) {
    await fs.rm(tmp, { force: true });
    throw err;
  }
}

/** A directory made or repaired with this owner and mode (never through a symbolic link). */
async function ensureDir(dir: string, mode: number, owner: { uid: number; gid: number } | null): Promise<void> {
  await fs.mkdir(dir, { mode }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  const st = await fs.lstat(dir);
  if (!st.isDirectory()) throw new Error(`${dir} is not a directory`);
  if (owner && runningAsRoot() && (st.uid !== owner.uid || st.gid !== owner.gid)) await fs.lchown(dir, owner.uid, owner.gid);
  // chown clears setgid: the mode is set afterwards.
  if ((st.mode & 0o7777) !== mode || (owner && runningAsRoot() && (st.uid !== owner.uid || st.gid !== owner.gid))) await fs.chmod(dir, mode);
}

/** Copies a tree, following symbolic links to files (Debian links some of WordPress to system packages). */
async function copyTree(src: string, dst: string, opts: { skipTop?: Set<string>; fileMode: number; dirMode: number }, top = true): Promise<void> {
  await fs.mkdir(dst, { mode: opts.dirMode });
  await fs.chmod(dst, opts.dirMode);
  const entries = await fs.readdir(src, { withFileTypes: true });
  await Promise.all(
    entries.map(async (entry) => {
      if (top && opts.skipTop?.has(entry.name)) return;
      const s = path.join(src, entry.name);
      const d = path.join(dst, entry.name);
      const st = await fs.stat(s).catch(() => null);
      if (!st) return; // a dangling link
      if (st.isDirectory()) await copyTree(s, d, opts, false);
      else if (st.isFile()) {
        await fs.copyFile(s, d, fsConstants.COPYFILE_EXCL);
        await fs.chmod(d, opts.fileMode);
      }
    }),
  );
}

/** Mirrors `src` into the new directory `dst` with hard links (copies across file systems). */
async function linkTree(src: string, dst: string, skipTop: Set<string>, top = true): Promise<void> {
  await fs.mkdir(dst, { mode: 0o755 });
  await fs.chmod(dst, 0o755);
  const entries = await fs.readdir(src, { withFileTypes: true });
  await Promise.all(
    entries.map(async (entry) => {
      if (top && skipTop.has(entry.name)) return;
      const s = path.join(src, entry.name);
      const d = path.join(dst, entry.name);
      if (entry.isDirectory()) await linkTree(s, d, skipTop, false);
      else if (entry.isFile()) {
        await fs.link(s, d).catch(async (err: NodeJS.ErrnoException) => {
          if (err.code !== 'EXDEV') throw err;
          await fs.copyFile(s, d, fsConstants.COPYFILE_EXCL);
          await fs.chmod(d, 0o644);
        });
      }
    }),
  );
}

/** Whether `dst` holds exactly `src`'s files, hard-linked (wp-content aside). */
async function treeMatches(src: string, dst: string, skipTop: Set<string>, top = true): Promise<boolean> {
  const [a, b] = await Promise.all([fs.readdir(src, { withFileTypes: true }), fs.readdir(dst, { withFileTypes: true }).catch(() => null)]);
  if (!b) return false;
  const wanted = a.filter((e) => !(top && skipTop.has(e.name)));
  const present = b.filter((e) => !(top && skipTop.has(e.name)));
  if (wanted.length !== present.length) return false;
  const results = await Promise.all(
    wanted.map(async (entry) => {
      const s = path.join(src, entry.name);
      const d = path.join(dst, entry.name);
      const st = await fs.lstat(d).catch(() => null);
      if (!st) return false;
      if (entry.isDirectory()) return st.isDirectory() && (await treeMatches(s, d, skipTop, false));
      const ss = await fs.lstat(s);
      return st.isFile() && st.ino === ss.ino && st.dev === ss.dev;
    }),
  );
  return results.every(Boolean);
}

/** Rewrites the release's wp-includes/version.php: `$wp_version` and `$wp_db_version` + 1. */
function patchVersionFile(text: string, version: string): string {
  let patched = text.replace(/\$wp_version = '[^']*';/, `$wp_version = '${version}';`);
  patched = patched.replace(/\$wp_db_version = (\d+);/, (_m, n: string) => `$wp_db_version = ${Number(n) + 1};`);
  if (patched === text || !/\$wp_db_version = \d+;/.test(patched)) throw new Error('wp-includes/version.php does not have the expected shape');
  return patched;
}

/** The WordPress version of a core tree (its wp-includes/version.php), or null. */
async function versionOfTree(dir: string): Promise<string | null> {
  const text = await fs.readFile(path.join(dir, 'wp-includes', 'version.php'), 'utf8').catch(() => null);
  return text?.match(/\$wp_version = '([^']+)';/)?.[1] ?? null;
}

/**
 * Makes `<dataDir>/core/6.1.9/` (a copy of the installed WordPress without wp-config.php,
 * .htaccess and wp-content) and the "latest core" stand-in `<dataDir>/core/6.1.10/` (hard links to
 * 6.1.9 but for a patched wp-includes/version.php: `$wp_version` 6.1.10 and `$wp_db_version` one
 * more, so the database upgrade really runs). Idempotent and safe with concurrent callers: each
 * release is built under a temporary name and renamed into place; a finished release is never
 * changed. Returns the versions present.
 */
export async function prepareCore(dataDir: string, opts: { source?: string } = {}): Promise<string[]> {
  const source = opts.source ?? DEFAULT_CORE_SOURCE;
  const { coreDir } = platformPaths(dataDir);
  await makeDirectory(coreDir, 0o755);
  const base = path.join(coreDir, BASE_CORE_VERSION);
  if (!(await exists(base))) {
    const found = await versionOfTree(source);
    if (found !== BASE_CORE_VERSION)
      throw new Error(`${source} holds WordPress ${found ?? 'nothing'}, not ${BASE_CORE_VERSION} (install the wordpress package)`);
    await buildRelease(base, (tmp) => copyTree(source, tmp, { skipTop: NOT_CORE, fileMode: 0o644, dirMode: 0o755 }));
  }
  const latest = path.join(coreDir, LATEST_CORE_VERSION);
  if (!(await exists(latest))) {
    await buildRelease(latest, async (tmp) => {
      await linkTree(base, tmp, new Set());
      const versionFile = path.join(tmp, 'wp-includes', 'version.php');
      const text = await fs.readFile(versionFile, 'utf8');
      await fs.rm(versionFile);
      await fs.writeFile(versionFile, patchVersionFile(text, LATEST_CORE_VERSION), { mode: 0o644 });
      await fs.chmod(versionFile, 0o644);
    });
  }
  return coreVersions(dataDir);
}

async function buildRelease(final: string, build: (tmp: string) => Promise<void>): Promise<void> {
  const tmp = path.join(path.dirname(final), `.build-${path.basename(final)}-${tmpSuffix()}`);
  try {
    await build(tmp);
    await fs.rename(tmp, final).catch(async (err: NodeJS.ErrnoException) => {
      // Another caller finished first: theirs stays.
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
    });
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
}

/** The core releases of this host, oldest first. */
export async function coreVersions(dataDir: string): Promise<string[]> {
  const names = await fs.readdir(platformPaths(dataDir).coreDir).catch(() => [] as string[]);
  return names.filter((n) => VERSION_PATTERN.test(n)).sort(compareVersions);
}

/** The WordPress version a site's public/ holds, or null when it has none. */
export async function coreVersionOf(siteRoot: string): Promise<string | null> {
  return versionOfTree(sitePaths(siteRoot).public);
}

async function releaseDir(dataDir: string, version: string): Promise<string> {
  if (!VERSION_PATTERN.test(version)) throw new BackendRefusedError(BACKEND, `"${version}" is not a WordPress version.`, 'validation_failed', 'version');
  const dir = path.join(platformPaths(dataDir).coreDir, version);
  if (!(await exists(dir)) && (version === BASE_CORE_VERSION || version === LATEST_CORE_VERSION)) await prepareCore(dataDir);
  if (!(await exists(dir))) throw new BackendRefusedError(BACKEND, `WordPress ${version} is not available on this host.`, 'validation_failed', 'version');
  return dir;
}

/** Copies the platform's helper and must-use plugin to `<dataDir>/platform/` (root, read-only for sites). */
export async function ensurePlatform(dataDir: string): Promise<PlatformPaths> {
  const p = platformPaths(dataDir);
  await makeDirectory(p.dir, 0o755);
  await makeDirectory(p.muPlugins, 0o755);
  const files: Array<[string, string]> = [
    [path.join(PHP_SOURCE_DIR, 'cloud-helper.php'), p.helper],
    [path.join(PHP_SOURCE_DIR, 'mu-plugins', 'cloud-platform.php'), path.join(p.muPlugins, 'cloud-platform.php')],
  ];
  for (const [src, dst] of files) {
    const content = await fs.readFile(src);
    const current = await fs.readFile(dst).catch(() => null);
    if (!current || !current.equals(content)) await writeFileAtomic(dst, content, 0o644, runningAsRoot() ? { uid: 0, gid: 0 } : null);
  }
  return p;
}

/**
 * Brings public/ back to a whole state after a core switch that stopped half way (see switchCore):
 * wp-content is always found in public/ or public.next/, and public/ exists afterwards if it did
 * before the switch began.
 */
async function recoverPublic(paths: SitePaths): Promise<void> {
  const next = `${paths.public}.next`;
  const old = `${paths.public}.old`;
  const hasPublic = await exists(paths.public);
  if (await exists(next)) {
    const contentInNext = await exists(path.join(next, 'wp-content'));
    if (hasPublic && !contentInNext) {
      await fs.rm(next, { recursive: true, force: true }); // the swap had not begun
    } else {
      if (hasPublic) await fs.rename(paths.public, old); // wp-content had moved: finish the swap
      await fs.rename(next, paths.public);
    }
  }
  if (await exists(old)) {
    if (await exists(path.join(old, 'wp-content'))) {
      // Never delete a site's content: put it back where WordPress looks for it.
      if (!(await exists(paths.wpContent))) await fs.rename(path.join(old, 'wp-content'), paths.wpContent);
      else throw new Error(`${old} still holds a wp-content: left for an operator`);
    }
    await fs.rm(old, { recursive: true, force: true });
  }
}

/**
 * Points public/ at another release: public.next is built with hard links, wp-content is moved
 * into it, and public.next replaces public/ by rename. A request sees the old core or the new one,
 * never a mix of files (for a few microseconds, between the renames, no wp-content or no public/).
 * php-fpm should be reloaded afterwards so OPcache drops the old release's compiled files.
 */
async function installCore(paths: SitePaths, release: string): Promise<void> {
  const next = `${paths.public}.next`;
  const old = `${paths.public}.old`;
  await fs.rm(next, { recursive: true, force: true });
  await linkTree(release, next, NOT_CORE);
  if (await exists(paths.public)) {
    if (await exists(paths.wpContent)) await fs.rename(paths.wpContent, path.join(next, 'wp-content'));
    await fs.rename(paths.public, old);
    await fs.rename(next, paths.public);
    await fs.rm(old, { recursive: true, force: true });
  } else {
    await fs.rename(next, paths.public);
  }
}

export interface LayoutSiteOptions {
  dataDir: string;
  /** The site's root S. */
  root: string;
  /** The release a new site starts on (an existing site keeps the one it has). */
  coreVersion: string;
  /** The site's OS account (its PHP runs as it); null without root. */
  account: { uid: number; gid: number } | null;
  /** The web server's group: it reads wp-content through it (02750); without one wp-content is 0755. */
  webGroupGid?: number | null;
  site: SiteJsonInput;
  /** PEM of the database server's CA: written to S/config/db-ca.pem, site.json's db.ca_file by default. */
  dbCaCertificate?: string;
}

/**
 * Creates or repairs a site's files (layout at the top of this file). Idempotent: what exists is
 * checked and repaired (owners, modes, core files), and wp-content's contents are never
 * overwritten (a new wp-content starts with the two default themes and akismet, inactive).
 * site.json is written from `site` each time (salts kept from the existing file unless given).
 */
export async function layoutSite(opts: LayoutSiteOptions): Promise<{ paths: SitePaths; coreVersion: string }> {
  const paths = sitePaths(opts.root);
  const platform = await ensurePlatform(opts.dataDir);
  await makeDirectory(paths.root, 0o711);
  if (runningAsRoot()) await fs.lchown(paths.root, 0, 0);
  return withFileLock(path.join(paths.root, '.layout.lock'), async () => {
    const root = runningAsRoot() ? { uid: 0, gid: 0 } : null;
    const account = runningAsRoot() ? opts.account : null;
    const configOwner = account ? { uid: 0, gid: account.gid } : null;
    const web = opts.webGroupGid ?? null;
    const contentOwner = account ? { uid: account.uid, gid: web ?? account.gid } : null;
    const contentDirMode = web !== null ? 0o2750 : 0o755;

    // Configuration (root's; the account reads it through its group).
    await writeFileAtomic(paths.wpConfig, await fs.readFile(path.join(PHP_SOURCE_DIR, 'wp-config.php')), 0o644, root);
    await ensureDir(paths.config, 0o750, configOwner);
    if (opts.dbCaCertificate !== undefined) await writeFileAtomic(paths.dbCa, opts.dbCaCertificate, 0o644, root);
    const existing = await readJson<Partial<SiteJson>>(paths.siteJson);
    const salts = {} as Record<SaltName, string>;
    for (const name of SALT_NAMES) salts[name] = opts.site.salts?.[name] ?? existing?.salts?.[name] ?? randomBytes(48).toString('base64');
    const siteJson: SiteJson = {
      db: { ...opts.site.db, ca_file: opts.site.db.ca_file ?? paths.dbCa },
      table_prefix: opts.site.table_prefix ?? 'wp_',
      salts,
      smtp: opts.site.smtp,
      mu_plugin_dir: opts.site.mu_plugin_dir ?? platform.muPlugins,
      private_dir: opts.site.private_dir ?? paths.private,
      ...(opts.site.hostname ? { hostname: opts.site.hostname } : {}),
    };
    await writeFileAtomic(paths.siteJson, `${JSON.stringify(siteJson, null, 2)}\n`, 0o640, configOwner);
    for (const file of [paths.constantsJson, paths.secretsJson]) {
      const current = await readJson<Record<string, unknown>>(file);
      await writeFileAtomic(file, `${JSON.stringify(current ?? {}, null, 2)}\n`, 0o640, configOwner);
    }

    await ensureDir(paths.private, 0o700, account);
    await ensureDir(paths.logs, 0o750, configOwner);

    // Core: an existing site is repaired against the release it runs, a new one gets coreVersion.
    await recoverPublic(paths);
    const current = await coreVersionOf(paths.root);
    const release = await releaseDir(opts.dataDir, current ?? opts.coreVersion);
    if (!(await treeMatches(release, paths.public, NOT_CORE))) await installCore(paths, release);
    if (root) await fs.lchown(paths.public, 0, 0);
    await fs.chmod(paths.public, 0o755);

    // wp-content: the site's own. Seeded once, atomically (built beside, renamed into place).
    if (!(await exists(paths.wpContent))) {
      const seed = path.join(paths.root, `.wp-content-${tmpSuffix()}`);
      try {
        await seedContent(seed, contentDirMode, web !== null ? 0o2755 : 0o755);
        if (contentOwner) await chownTreeTo(seed, contentOwner);
        await fs.rename(seed, paths.wpContent);
      } finally {
        await fs.rm(seed, { recursive: true, force: true });
      }
    }
    await ensureDir(paths.wpContent, contentDirMode, contentOwner);
    // Inside the account's own directory: made when missing, never chmod-ed (a link the site put
    // there would be followed), given away with lchown. They inherit wp-content's setgid group.
    for (const dir of [paths.plugins, paths.themes, paths.uploads]) {
      const made = await fs.mkdir(dir, { mode: 0o755 }).then(
        () => true,
        (err: NodeJS.ErrnoException) => {
          if (err.code !== 'EEXIST') throw err;
          return false;
        },
      );
      if (made && contentOwner) await fs.lchown(dir, contentOwner.uid, contentOwner.gid);
    }
    return { paths, coreVersion: (await coreVersionOf(paths.root)) ?? opts.coreVersion };
  });
}

/** A new wp-content, built by root where the site cannot reach it yet (modes set before any chown). */
async function seedContent(dir: string, topMode: number, dirMode: number): Promise<void> {
  await fs.mkdir(dir);
  await fs.chmod(dir, topMode);
  for (const sub of ['plugins', 'themes', 'uploads']) {
    await fs.mkdir(path.join(dir, sub));
    await fs.chmod(path.join(dir, sub), dirMode);
  }
  await fs.writeFile(path.join(dir, 'index.php'), '<?php\n// Silence is golden.\n', { mode: 0o644 });
  for (const rel of SEEDED_CONTENT) {
    const src = path.join(DEFAULT_CORE_SOURCE, 'wp-content', rel);
    if (await exists(src)) await copyTree(src, path.join(dir, rel), { fileMode: 0o644, dirMode });
  }
}

/** lchown of a tree this process just built (no link in it is followed). */
async function chownTreeTo(dir: string, owner: { uid: number; gid: number }): Promise<void> {
  await fs.lchown(dir, owner.uid, owner.gid);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTreeTo(p, owner);
    else await fs.lchown(p, owner.uid, owner.gid);
  }
}

/**
 * Switches a site's core to another release of this host (public/ rebuilt with hard links and
 * swapped in by rename; wp-content stays the same directory). Idempotent. The database upgrade is
 * the helper's `core.upgrade_db`, run after this.
 */
export async function switchCore(siteRoot: string, dataDir: string, version: string): Promise<{ from: string | null; to: string }> {
  const paths = sitePaths(siteRoot);
  const release = await releaseDir(dataDir, version);
  return withFileLock(path.join(paths.root, '.layout.lock'), async () => {
    await recoverPublic(paths);
    if (!(await exists(paths.wpContent))) throw new Error(`${paths.root} has no public/wp-content: lay the site out first`);
    const from = await coreVersionOf(paths.root);
    if (from !== version || !(await treeMatches(release, paths.public, NOT_CORE))) await installCore(paths, release);
    if (runningAsRoot()) await fs.lchown(paths.public, 0, 0);
    await fs.chmod(paths.public, 0o755);
    return { from, to: version };
  });
}

async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await fs.readFile(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

const CONSTANT_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,99}$/;
/** The same names php/wp-config.php never takes from constants.json or secrets.json: these prefixes and names, and the salts. */
const RESERVED_CONSTANT = new RegExp(
  `^(DB_|CLOUD_|WPMU_|WP_CONTENT_|WP_PLUGIN_|MYSQL_|${[
    'WP_HOME',
    'WP_SITEURL',
    'ABSPATH',
    'WPINC',
    'PLUGINDIR',
    'MUPLUGINDIR',
    'UPLOADS',
    'MULTISITE',
    'WP_ALLOW_MULTISITE',
    'SUBDOMAIN_INSTALL',
    'DOMAIN_CURRENT_SITE',
    'PATH_CURRENT_SITE',
    'SITE_ID_CURRENT_SITE',
    'BLOG_ID_CURRENT_SITE',
    'CUSTOM_USER_TABLE',
    'CUSTOM_USER_META_TABLE',
    'DISALLOW_FILE_EDIT',
    'AUTOMATIC_UPDATER_DISABLED',
    'WP_AUTO_UPDATE_CORE',
    ...SALT_NAMES,
  ]
    .map((name) => `${name}$`)
    .join('|')})`,
);

/** Whether the site's configuration may take a constant of this name (the platform's are refused). */
export function constantNameAllowed(name: string): boolean {
  return CONSTANT_NAME.test(name) && !RESERVED_CONSTANT.test(name.toUpperCase());
}

function checkConstantName(name: string, param: string): void {
  if (!CONSTANT_NAME.test(name)) throw new BackendRefusedError(BACKEND, `"${name}" is not a constant name.`, 'validation_failed', param);
  if (RESERVED_CONSTANT.test(name.toUpperCase()))
    throw new BackendRefusedError(BACKEND, `The constant ${name} is set by the platform and cannot be changed.`, 'validation_failed', param);
}

async function configOwnerOf(paths: SitePaths): Promise<{ uid: number; gid: number } | null> {
  if (!runningAsRoot()) return null;
  const st = await fs.stat(paths.config);
  return { uid: 0, gid: st.gid };
}

/**
 * Sets recipe constants in S/config/constants.json: the given names take the given values; others
 * stay, unless `replace` (then the file holds exactly `constants`). Platform names are refused.
 */
export async function writeConstants(siteRoot: string, constants: Record<string, string | number | boolean>, opts: { replace?: boolean } = {}): Promise<void> {
  for (const [name, value] of Object.entries(constants)) {
    checkConstantName(name, `constants.${name}`);
    if (!['string', 'boolean'].includes(typeof value) && !(typeof value === 'number' && Number.isFinite(value)))
      throw new BackendRefusedError(BACKEND, `The constant ${name} must be a string, a number or a boolean.`, 'validation_failed', `constants.${name}`);
  }
  const paths = sitePaths(siteRoot);
  await withFileLock(path.join(paths.root, '.layout.lock'), async () => {
    const current = opts.replace ? {} : ((await readJson<Record<string, unknown>>(paths.constantsJson)) ?? {});
    const next = { ...current, ...constants };
    await writeFileAtomic(paths.constantsJson, `${JSON.stringify(next, null, 2)}\n`, 0o640, await configOwnerOf(paths));
  });
}

/**
 * Secret constants in S/config/secrets.json: each named one without a value gets 32 random bytes
 * (64 hex characters); existing values are kept. Returns every named value (only to the caller,
 * which hands them to the customer once).
 */
export async function ensureSecrets(siteRoot: string, names: string[]): Promise<Record<string, string>> {
  names.forEach((name, i) => checkConstantName(name, `secrets.${i}`));
  const paths = sitePaths(siteRoot);
  return withFileLock(path.join(paths.root, '.layout.lock'), async () => {
    const current = (await readJson<Record<string, string>>(paths.secretsJson)) ?? {};
    let changed = false;
    const out: Record<string, string> = {};
    for (const name of names) {
      if (typeof current[name] !== 'string' || !/^[0-9a-f]{64}$/.test(current[name])) {
        current[name] = randomBytes(32).toString('hex');
        changed = true;
      }
      out[name] = current[name];
    }
    if (changed) await writeFileAtomic(paths.secretsJson, `${JSON.stringify(current, null, 2)}\n`, 0o640, await configOwnerOf(paths));
    return out;
  });
}
