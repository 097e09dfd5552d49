import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { inflateRawSync } from 'node:zlib';
import type { Knex } from 'knex';
import { create as createTar, extract as extractTar } from 'tar';
import { BackendGoneError, BackendRefusedError } from '../errors';
import { simulatedDelay } from '../switchboard';
import { storedZip } from './stored-zip';
import type {
  WordpressProvider,
  WpAddress,
  WpCommand,
  WpCronEvent,
  WpDirectoryPlugin,
  WpLive,
  WpLogLine,
  WpMailLogEntry,
  WpPhp,
  WpPhpSettings,
  WpPlugin,
  WpRole,
  WpSiteSpec,
} from '../wordpress.provider';

const BACKEND = 'wordpress';

/** How long things take at SIM_DELAY_SCALE 1 (about what a real site takes on a small machine). */
const TIMING_MS = { create: 3_000, call: 20, install: 500, backup: 1_000, restore: 1_500, coreUpdate: 1_500, phpReload: 300 } as const;

const PHP_VERSIONS = ['8.2'];
const CORE_VERSION = '6.1.9';
const LATEST_CORE_VERSION = '6.1.10';
/** `db_version` of WordPress 6.1 (minor releases keep it). */
const DB_VERSION = '53496';
const DEFAULT_PHP_SETTINGS: WpPhpSettings = {
  memory_limit: '256M',
  upload_max_filesize: '64M',
  post_max_size: '64M',
  max_execution_time: 30,
  max_input_vars: 1000,
};
const SIMULATED_ADDRESS: WpAddress = { ip: '127.0.0.1', httpPort: 8088 };

/** Kept per site: WordPress trims neither, the simulator must. */
const MAX_LOG_LINES = 1_000;
const MAX_MAIL_ENTRIES = 1_000;

/** The local stand-in of the plugin directory (DECISIONS "Hosted WordPress"), versions oldest first. */
const DIRECTORY: ReadonlyArray<{ slug: string; name: string; description: string; versions: string[] }> = [
  {
    slug: 'akismet',
    name: 'Akismet Anti-Spam',
    description: 'Used by millions, Akismet is quite possibly the best way to protect your blog from spam.',
    versions: ['5.0.2'],
  },
  { slug: 'cloud-hello', name: 'Cloud Hello', description: 'Adds an X-Cloud-Hello header to front-end answers.', versions: ['1.0.0', '1.1.0'] },
];

/** Where directoryZip keeps its archives: one file per (slug, version), the same path in every process. */
const DIRECTORY_DIR = path.join(tmpdir(), 'cloud-wordpress-simulator-directory');
const directoryZipPath = (slug: string, version: string) => path.join(DIRECTORY_DIR, `${slug}.${version}.zip`);
/** path -> (slug, version) of every zip directoryZip makes (a fixed set, so any process recognises them). */
const DIRECTORY_ZIPS = new Map(DIRECTORY.flatMap((p) => p.versions.map((version) => [directoryZipPath(p.slug, version), { slug: p.slug, version }] as const)));

/** Seconds between two runs of WordPress's recurrences (`wp_get_schedules`). */
const RECURRENCES: Record<string, number> = { hourly: 3_600, twicedaily: 43_200, daily: 86_400, weekly: 604_800 };

/** The events a fresh WordPress 6.1 schedules (wp-admin/includes/upgrade.php, wp-includes/update.php...). */
const DEFAULT_CRON: ReadonlyArray<{ hook: string; schedule: string; firstInSeconds: number }> = [
  { hook: 'wp_privacy_delete_old_export_files', schedule: 'hourly', firstInSeconds: 3_600 },
  { hook: 'wp_version_check', schedule: 'twicedaily', firstInSeconds: 0 },
  { hook: 'wp_update_plugins', schedule: 'twicedaily', firstInSeconds: 0 },
  { hook: 'wp_update_themes', schedule: 'twicedaily', firstInSeconds: 0 },
  { hook: 'wp_https_detection', schedule: 'twicedaily', firstInSeconds: 0 },
  { hook: 'wp_scheduled_delete', schedule: 'daily', firstInSeconds: 86_400 },
  { hook: 'delete_expired_transients', schedule: 'daily', firstInSeconds: 86_400 },
  { hook: 'wp_scheduled_auto_draft_delete', schedule: 'daily', firstInSeconds: 86_400 },
  { hook: 'recovery_mode_clean_expired_keys', schedule: 'daily', firstInSeconds: 86_400 },
  { hook: 'wp_site_health_scheduled_check', schedule: 'weekly', firstInSeconds: 604_800 },
];

/** WordPress's default roles (populate_roles), capabilities abridged. */
const DEFAULT_ROLES: Record<string, StoredRole> = {
  administrator: {
    display: 'Administrator',
    caps: [
      'switch_themes',
      'edit_themes',
      'activate_plugins',
      'edit_plugins',
      'edit_users',
      'edit_files',
      'manage_options',
      'moderate_comments',
      'manage_categories',
      'manage_links',
      'upload_files',
      'import',
      'unfiltered_html',
      'edit_posts',
      'edit_others_posts',
      'edit_published_posts',
      'publish_posts',
      'edit_pages',
      'read',
      'install_plugins',
      'update_plugins',
      'delete_plugins',
      'update_core',
      'list_users',
      'create_users',
      'delete_users',
      'promote_users',
      'export',
    ],
  },
  editor: {
    display: 'Editor',
    caps: [
      'moderate_comments',
      'manage_categories',
      'manage_links',
      'upload_files',
      'unfiltered_html',
      'edit_posts',
      'edit_others_posts',
      'edit_published_posts',
      'publish_posts',
      'edit_pages',
      'read',
      'edit_others_pages',
      'edit_published_pages',
      'publish_pages',
      'delete_pages',
      'delete_posts',
    ],
  },
  author: {
    display: 'Author',
    caps: ['upload_files', 'edit_posts', 'edit_published_posts', 'publish_posts', 'read', 'delete_posts', 'delete_published_posts'],
  },
  contributor: { display: 'Contributor', caps: ['edit_posts', 'read', 'delete_posts'] },
  subscriber: { display: 'Subscriber', caps: ['read'] },
};

interface StoredPlugin {
  name: string;
  version: string;
  active: boolean;
  /** The main file, relative to wp-content/plugins (what `active_plugins` lists). */
  file: string;
}

interface StoredRole {
  display: string;
  caps: string[];
}

/** What the site's database and `wp-content/` hold: what a backup keeps and a restore puts back. */
interface SiteContent {
  options: Record<string, unknown>;
  plugins: Record<string, StoredPlugin>;
  roles: Record<string, StoredRole>;
  cron: WpCronEvent[];
  mail: WpMailLogEntry[];
  /** Unused, unexpired autologin tokens (SHA-256, hex) of the must-use plugin. */
  autologin: Array<{ tokenSha256: string; expiresAt: string }>;
}

/** One site, as `sim_wordpress_sites.state`: its content plus what lives outside it (files, pool, server block). */
interface SiteState {
  hostname: string;
  adminEmail: string;
  database: { host: string; port: number; name: string; user: string };
  hosts: string[];
  primary: string;
  coreVersion: string;
  php: WpPhp;
  /** wp-config.php's platform-written constants and secrets. */
  constants: Record<string, string | number | boolean>;
  secrets: Record<string, string>;
  cdnUrl: string | null;
  /** Issued certificates by domain (the stand-in CA's `notAfter`); absent in states written before. */
  certificates?: Record<string, { names: string[]; notAfter: string }>;
  cdnPurges?: number;
  logs: WpLogLine[];
  content: SiteContent;
}

/** The `database.sql` of a simulated backup: a comment line, then the content as JSON. */
const DUMP_HEADER = '-- WordPress simulator dump: the site content as JSON';

/**
 * The WordPress backend, simulated in PostgreSQL (`sim_wordpress_sites`: one jsonb per site, read,
 * changed and written under `select ... for update`, so concurrent calls lose no update). It keeps
 * what a real site keeps (options, plugins, roles, cron, constants and secrets, PHP, core version,
 * host names, CDN, mail log, autologin tokens, log lines) and behaves as WordPress does on them; it
 * serves nothing: the address it answers (127.0.0.1:8088) has no server behind it. No mail leaves:
 * a test mail is logged with `sent: false`. Backups are real `.tar.gz` files (`database.sql` holding
 * the content as JSON, `wp-content/` with a file per plugin); the plugin directory is the local
 * stand-in's catalog, its zips small real archives under the OS temporary directory. The outage
 * switch is not here: the registry wraps this provider with withOutageSwitch like the real one.
 */
export class WordpressSimulator implements WordpressProvider {
  constructor(
    private readonly db: Knex,
    private readonly scale: number,
  ) {}

  private delay(ms: number): Promise<void> {
    return simulatedDelay(ms, this.scale);
  }

  private async read(serviceId: number): Promise<SiteState> {
    await this.delay(TIMING_MS.call);
    const row = await this.db('sim_wordpress_sites').where({ service_id: serviceId }).first();
    if (!row) throw gone(serviceId);
    return row.state as SiteState;
  }

  /** Reads the site under a row lock, lets `change` edit it in place, and writes it back. */
  private async mutate<T>(serviceId: number, change: (state: SiteState) => T | Promise<T>): Promise<T> {
    await this.delay(TIMING_MS.call);
    return this.db.transaction(async (trx) => {
      const row = await trx('sim_wordpress_sites').where({ service_id: serviceId }).forUpdate().first();
      if (!row) throw gone(serviceId);
      const state = row.state as SiteState;
      const result = await change(state);
      state.logs = state.logs.slice(-MAX_LOG_LINES);
      await trx('sim_wordpress_sites')
        .where({ service_id: serviceId })
        .update({ state: JSON.stringify(state), updated_at: trx.fn.now() });
      return result;
    });
  }

  async phpVersions(): Promise<string[]> {
    return [...PHP_VERSIONS];
  }

  async latestCoreVersion(): Promise<string> {
    return LATEST_CORE_VERSION;
  }

  // ---- sites -----------------------------------------------------------------------------------

  async createSite(spec: WpSiteSpec): Promise<WpAddress> {
    if (!PHP_VERSIONS.includes(spec.phpVersion))
      throw new BackendRefusedError(
        BACKEND,
        `PHP ${spec.phpVersion} is not available; choose one of ${PHP_VERSIONS.join(', ')}.`,
        'validation_failed',
        'php_version',
      );
    const hostname = spec.hostname.toLowerCase();
    const existing = await this.db('sim_wordpress_sites').where({ service_id: spec.serviceId }).first();
    if (!existing) {
      await this.delay(TIMING_MS.create);
      // A concurrent create of the same site installs it once: the first row wins.
      await this.db('sim_wordpress_sites')
        .insert({ service_id: spec.serviceId, state: JSON.stringify(freshSite(spec, hostname)) })
        .onConflict('service_id')
        .ignore();
    }
    // Repairs what a half-done create would lack: the platform hostname among the names it answers to.
    await this.mutate(spec.serviceId, (state) => {
      if (!state.hosts.includes(hostname)) state.hosts.push(hostname);
    });
    return { ...SIMULATED_ADDRESS };
  }

  async destroySite(serviceId: number): Promise<void> {
    await this.delay(TIMING_MS.call);
    await this.db('sim_wordpress_sites').where({ service_id: serviceId }).delete();
  }

  /** Nothing runs, so nothing is ever down: a missing site is gone. */
  async repair(serviceId: number): Promise<string[]> {
    await this.read(serviceId);
    return [];
  }

  async live(serviceId: number): Promise<WpLive> {
    const state = await this.read(serviceId);
    const recipe = state.content.options.cloud_recipe;
    return {
      state: 'up',
      wpVersion: state.coreVersion,
      phpVersion: state.php.version,
      recipe: recipe && typeof recipe === 'object' && !Array.isArray(recipe) ? (recipe as Record<string, unknown>) : null,
    };
  }

  async setHostnames(serviceId: number, hosts: string[], primary: string): Promise<void> {
    const names = [...new Set([...hosts, primary].map((h) => h.toLowerCase()))];
    await this.mutate(serviceId, (state) => {
      state.hosts = names;
      state.primary = primary.toLowerCase();
      state.content.options.home = `http://${state.primary}`;
      state.content.options.siteurl = `http://${state.primary}`;
    });
  }

  async armAutologin(serviceId: number, tokenSha256: string, expiresAt: Date): Promise<void> {
    await this.mutate(serviceId, (state) => {
      const now = Date.now();
      state.content.autologin = state.content.autologin.filter((t) => new Date(t.expiresAt).getTime() > now && t.tokenSha256 !== tokenSha256);
      state.content.autologin.push({ tokenSha256, expiresAt: expiresAt.toISOString() });
    });
  }

  // ---- plugins ---------------------------------------------------------------------------------

  async listPlugins(serviceId: number): Promise<WpPlugin[]> {
    const state = await this.read(serviceId);
    // As the Plugins screen lists them: by name.
    return Object.entries(state.content.plugins)
      .map(([slug, p]) => pluginOf(slug, p))
      .sort((a, b) => a.name.localeCompare(b.name, 'en', { sensitivity: 'base' }) || a.slug.localeCompare(b.slug));
  }

  async installPlugin(serviceId: number, slug: string, zipPath: string, activate: boolean): Promise<WpPlugin> {
    const header = await pluginHeaderOf(slug, zipPath);
    await this.delay(TIMING_MS.install);
    return this.mutate(serviceId, (state) => {
      const before = state.content.plugins[slug];
      const plugin: StoredPlugin = { ...header, active: activate || (before?.active ?? false) };
      state.content.plugins[slug] = plugin;
      return pluginOf(slug, plugin);
    });
  }

  async activatePlugin(serviceId: number, slug: string): Promise<WpPlugin> {
    return this.mutate(serviceId, (state) => {
      const plugin = installed(state, slug);
      plugin.active = true;
      return pluginOf(slug, plugin);
    });
  }

  async deactivatePlugin(serviceId: number, slug: string): Promise<WpPlugin> {
    return this.mutate(serviceId, (state) => {
      const plugin = installed(state, slug);
      plugin.active = false;
      return pluginOf(slug, plugin);
    });
  }

  async deletePlugin(serviceId: number, slug: string): Promise<void> {
    await this.mutate(serviceId, (state) => {
      installed(state, slug);
      delete state.content.plugins[slug];
    });
  }

  // ---- plugin directory ------------------------------------------------------------------------

  async searchDirectory(query: string): Promise<WpDirectoryPlugin[]> {
    const q = query.trim().toLowerCase();
    return DIRECTORY.filter((p) => !q || `${p.slug} ${p.name} ${p.description}`.toLowerCase().includes(q)).map(directoryEntry);
  }

  async directoryPlugin(slug: string): Promise<WpDirectoryPlugin | null> {
    const plugin = DIRECTORY.find((p) => p.slug === slug);
    return plugin ? directoryEntry(plugin) : null;
  }

  async directoryZip(slug: string, version: string): Promise<string> {
    const plugin = DIRECTORY.find((p) => p.slug === slug);
    if (!plugin) throw new BackendRefusedError(BACKEND, `There is no plugin ${slug} in the plugin directory.`, 'validation_failed', 'slug');
    if (!plugin.versions.includes(version))
      throw new BackendRefusedError(
        BACKEND,
        `The plugin ${slug} has no version ${version}; it has ${plugin.versions.join(', ')}.`,
        'validation_failed',
        'version',
      );
    const target = directoryZipPath(slug, version);
    if (!existsSync(target)) {
      await mkdir(DIRECTORY_DIR, { recursive: true });
      const zip = storedZip([
        { name: `${slug}/`, data: Buffer.alloc(0) },
        { name: `${slug}/${slug}.php`, data: Buffer.from(pluginFile(plugin.name, version, plugin.description)) },
      ]);
      // Written aside then renamed: a reader in another process never sees half a file.
      const partial = `${target}.${randomUUID()}.partial`;
      await writeFile(partial, zip, { mode: 0o644 });
      await rename(partial, target);
    }
    return target;
  }

  // ---- settings inside WordPress ---------------------------------------------------------------

  async getOption(serviceId: number, name: string): Promise<unknown> {
    return optionOf((await this.read(serviceId)).content, name);
  }

  async updateOptions(serviceId: number, options: Record<string, unknown>): Promise<void> {
    await this.mutate(serviceId, (state) => {
      for (const [name, value] of Object.entries(options)) {
        if (name === 'active_plugins' && Array.isArray(value)) {
          // WordPress keeps activation in this option: writing it (de)activates installed plugins.
          for (const plugin of Object.values(state.content.plugins)) plugin.active = value.includes(plugin.file);
        } else state.content.options[name] = value;
      }
    });
  }

  async addRoles(serviceId: number, roles: WpRole[]): Promise<string[]> {
    return this.mutate(serviceId, (state) => {
      const added: string[] = [];
      for (const role of roles) {
        if (state.content.roles[role.name]) continue;
        state.content.roles[role.name] = { display: role.display, caps: [...role.caps] };
        added.push(role.name);
      }
      return added;
    });
  }

  async setConstants(serviceId: number, constants: Record<string, string | number | boolean>): Promise<void> {
    await this.mutate(serviceId, (state) => {
      Object.assign(state.constants, constants);
    });
  }

  async ensureSecrets(serviceId: number, names: string[]): Promise<Record<string, string>> {
    return this.mutate(serviceId, (state) => {
      const values: Record<string, string> = {};
      for (const name of names) {
        state.secrets[name] ??= randomBytes(32).toString('hex');
        values[name] = state.secrets[name];
      }
      return values;
    });
  }

  async runCommand(serviceId: number, argv: WpCommand): Promise<{ exitCode: number; output: string }> {
    const args = argv[0] === 'wp' ? argv.slice(1) : argv;
    const command = args.slice(0, 2).join(' ');
    const [arg] = args.slice(2);
    const allowed = args.length === 3 ? ['option get', 'plugin is-active', 'plugin is-installed', 'role exists'] : args.length === 2 ? ['core version'] : [];
    if (!allowed.includes(command))
      throw new BackendRefusedError(
        BACKEND,
        `The command "${argv.join(' ')}" is not allowed; use option get, plugin is-active, plugin is-installed, role exists or core version.`,
        'validation_failed',
        'verify',
      );
    const state = await this.read(serviceId);
    const { content } = state;
    // Exit codes and messages as WP-CLI's.
    switch (command) {
      case 'option get': {
        const value = optionOf(content, arg);
        if (value === undefined || value === null) return { exitCode: 1, output: `Error: Could not get '${arg}' option. Does it exist?` };
        return { exitCode: 0, output: typeof value === 'string' ? value : JSON.stringify(value) };
      }
      case 'plugin is-active':
        return { exitCode: content.plugins[arg]?.active ? 0 : 1, output: '' };
      case 'plugin is-installed':
        return { exitCode: content.plugins[arg] ? 0 : 1, output: '' };
      case 'role exists':
        return content.roles[arg]
          ? { exitCode: 0, output: `Success: Role with ID '${arg}' exists.` }
          : { exitCode: 1, output: `Error: Role with ID '${arg}' does not exist.` };
      default:
        return { exitCode: 0, output: state.coreVersion };
    }
  }

  // ---- cron ------------------------------------------------------------------------------------

  async listCron(serviceId: number): Promise<WpCronEvent[]> {
    return sortedCron((await this.read(serviceId)).content.cron);
  }

  async runCron(serviceId: number, hook: string): Promise<{ executedAt: string }> {
    return this.mutate(serviceId, (state) => {
      const now = new Date();
      const events = state.content.cron.filter((e) => e.hook === hook);
      if (events.length === 0) throw new BackendGoneError(BACKEND, `cron event ${hook}`, `No cron event ${hook} is scheduled on this site.`);
      // Single events run once and go; recurring ones are scheduled again one interval from now.
      state.content.cron = state.content.cron.flatMap((e) => {
        if (e.hook !== hook) return [e];
        const interval = e.schedule ? RECURRENCES[e.schedule] : undefined;
        return interval ? [{ ...e, nextRunAt: new Date(now.getTime() + interval * 1000).toISOString() }] : [];
      });
      logLine(state, 'error', 'notice', `cron: ran ${hook}`);
      return { executedAt: now.toISOString() };
    });
  }

  async deleteCron(serviceId: number, hook: string): Promise<void> {
    await this.mutate(serviceId, (state) => {
      if (!state.content.cron.some((e) => e.hook === hook))
        throw new BackendGoneError(BACKEND, `cron event ${hook}`, `No cron event ${hook} is scheduled on this site.`);
      state.content.cron = state.content.cron.filter((e) => e.hook !== hook);
    });
  }

  // ---- PHP -------------------------------------------------------------------------------------

  async php(serviceId: number): Promise<WpPhp> {
    return phpOf(await this.read(serviceId));
  }

  async setPhpSettings(serviceId: number, settings: Partial<WpPhpSettings>): Promise<WpPhp> {
    await this.delay(TIMING_MS.phpReload);
    return this.mutate(serviceId, (state) => {
      for (const key of Object.keys(DEFAULT_PHP_SETTINGS) as Array<keyof WpPhpSettings>) {
        if (settings[key] !== undefined) (state.php.settings as unknown as Record<string, unknown>)[key] = settings[key];
      }
      fpmReloaded(state);
      return phpOf(state);
    });
  }

  async setPhpVersion(serviceId: number, version: string): Promise<WpPhp> {
    if (!PHP_VERSIONS.includes(version))
      throw new BackendRefusedError(BACKEND, `PHP ${version} is not available; choose one of ${PHP_VERSIONS.join(', ')}.`, 'validation_failed', 'version');
    await this.delay(TIMING_MS.phpReload);
    return this.mutate(serviceId, (state) => {
      if (state.php.version !== version) {
        state.php.version = version;
        logLine(state, 'php', 'notice', `NOTICE: fpm is running with PHP ${version}`);
        logLine(state, 'php', 'notice', 'NOTICE: ready to handle connections');
      }
      return phpOf(state);
    });
  }

  async restartPhp(serviceId: number): Promise<void> {
    await this.delay(TIMING_MS.phpReload);
    await this.mutate(serviceId, (state) => fpmReloaded(state));
  }

  // ---- core ------------------------------------------------------------------------------------

  async coreVersion(serviceId: number): Promise<string> {
    return (await this.read(serviceId)).coreVersion;
  }

  async updateCore(serviceId: number): Promise<{ from: string; to: string }> {
    const before = await this.read(serviceId);
    if (before.coreVersion !== LATEST_CORE_VERSION) await this.delay(TIMING_MS.coreUpdate);
    return this.mutate(serviceId, (state) => {
      const from = state.coreVersion;
      if (from !== LATEST_CORE_VERSION) {
        state.coreVersion = LATEST_CORE_VERSION;
        state.content.options.db_version = DB_VERSION;
        logLine(state, 'error', 'notice', `WordPress updated from ${from} to ${LATEST_CORE_VERSION}; database upgrade done`);
      }
      return { from, to: LATEST_CORE_VERSION };
    });
  }

  // ---- backups ---------------------------------------------------------------------------------

  async backup(serviceId: number, archivePath: string): Promise<{ sizeBytes: number }> {
    const state = await this.read(serviceId);
    await this.delay(TIMING_MS.backup);
    const staging = await mkdtemp(path.join(tmpdir(), 'cloud-wp-sim-backup-'));
    try {
      await writeFile(path.join(staging, 'database.sql'), `${DUMP_HEADER}\n${JSON.stringify(state.content, null, 1)}\n`);
      for (const dir of ['plugins', 'themes/twentytwentythree', 'uploads']) await mkdir(path.join(staging, 'wp-content', dir), { recursive: true });
      await writeFile(path.join(staging, 'wp-content', 'index.php'), '<?php\n// Silence is golden.\n');
      await writeFile(path.join(staging, 'wp-content', 'themes', 'twentytwentythree', 'style.css'), '/*\nTheme Name: Twenty Twenty-Three\nVersion: 1.0\n*/\n');
      for (const [slug, plugin] of Object.entries(state.content.plugins)) {
        const file = path.join(staging, 'wp-content', 'plugins', plugin.file);
        if (!file.startsWith(path.join(staging, 'wp-content', 'plugins') + path.sep)) continue;
        await mkdir(path.dirname(file), { recursive: true });
        await writeFile(file, pluginFile(plugin.name, plugin.version, `The ${slug} plugin (simulated).`));
      }
      await mkdir(path.dirname(archivePath), { recursive: true });
      const partial = `${archivePath}.${randomUUID()}.partial`;
      await createTar({ gzip: true, file: partial, cwd: staging, portable: true }, ['database.sql', 'wp-content']);
      await rename(partial, archivePath);
      return { sizeBytes: (await stat(archivePath)).size };
    } finally {
      await rm(staging, { recursive: true, force: true });
    }
  }

  async restore(serviceId: number, archivePath: string): Promise<void> {
    await this.read(serviceId);
    if (!existsSync(archivePath)) throw new BackendGoneError(BACKEND, 'backup archive', 'The backup archive is not on the site host any more.');
    const content = await readDump(archivePath);
    await this.delay(TIMING_MS.restore);
    await this.mutate(serviceId, (state) => {
      state.content = content;
      // The server block and the platform's domains are not in the archive: the site keeps answering
      // at its current primary name, as the real adapter rewrites `home` and `siteurl` after an import.
      state.content.options.home = `http://${state.primary}`;
      state.content.options.siteurl = `http://${state.primary}`;
      logLine(state, 'error', 'notice', 'site restored from a backup');
    });
  }

  // ---- caches, CDN, mail, logs -----------------------------------------------------------------

  async flushCache(serviceId: number): Promise<string[]> {
    await this.read(serviceId);
    return ['object'];
  }

  async issueCertificate(serviceId: number, domain: string, names: string[]): Promise<{ notAfter: string }> {
    await this.delay(TIMING_MS.call);
    return this.mutate(serviceId, (state) => {
      const notAfter = new Date(Date.now() + 90 * 86_400_000).toISOString();
      state.certificates = { ...(state.certificates ?? {}), [domain]: { names: [...names], notAfter } };
      logLine(state, 'error', 'notice', `certificate issued for ${names.join(', ')}`);
      return { notAfter };
    });
  }

  async removeCertificate(serviceId: number, domain: string): Promise<void> {
    await this.mutate(serviceId, (state) => {
      if (state.certificates) delete state.certificates[domain];
    });
  }

  async purgeCdn(serviceId: number): Promise<void> {
    await this.mutate(serviceId, (state) => {
      state.cdnPurges = (state.cdnPurges ?? 0) + 1;
      logLine(state, 'error', 'notice', 'cdn purged');
    });
  }

  async setCdn(serviceId: number, url: string | null): Promise<void> {
    await this.mutate(serviceId, (state) => {
      state.cdnUrl = url;
    });
  }

  async sendTestMail(serviceId: number, to: string): Promise<{ sent: boolean; detail: string }> {
    await this.mutate(serviceId, (state) => {
      const blogname = typeof state.content.options.blogname === 'string' ? state.content.options.blogname : state.hostname;
      state.content.mail.push({ to, subject: `[${blogname}] Test email`, method: 'smtp', sentAt: new Date().toISOString(), sent: false });
      state.content.mail = state.content.mail.slice(-MAX_MAIL_ENTRIES);
    });
    return { sent: false, detail: 'simulator: no mail is sent' };
  }

  async mailLog(serviceId: number, since: Date): Promise<WpMailLogEntry[]> {
    const state = await this.read(serviceId);
    return state.content.mail
      .filter((m) => new Date(m.sentAt).getTime() >= since.getTime())
      .sort((a, b) => b.sentAt.localeCompare(a.sentAt))
      .map((m) => ({ ...m }));
  }

  async logs(serviceId: number, source: 'access' | 'error' | 'php', lines: number): Promise<WpLogLine[]> {
    const state = await this.read(serviceId);
    const mine = state.logs.filter((l) => l.source === source);
    return lines > 0 ? mine.slice(-lines) : [];
  }
}

// ---- helpers ---------------------------------------------------------------------------------------

const gone = (serviceId: number) =>
  new BackendGoneError(BACKEND, `site ${serviceId}`, `The site of service ${serviceId} is not on the WordPress backend any more.`);

function installed(state: SiteState, slug: string): StoredPlugin {
  const plugin = state.content.plugins[slug];
  if (!plugin) throw new BackendGoneError(BACKEND, `plugin ${slug}`, `The plugin ${slug} is not installed on this site.`);
  return plugin;
}

const pluginOf = (slug: string, p: StoredPlugin): WpPlugin => ({ slug, name: p.name, version: p.version, active: p.active });

const directoryEntry = (p: (typeof DIRECTORY)[number]): WpDirectoryPlugin => ({
  slug: p.slug,
  name: p.name,
  latestVersion: p.versions[p.versions.length - 1],
  versions: [...p.versions],
});

const phpOf = (state: SiteState): WpPhp => ({ version: state.php.version, settings: { ...state.php.settings } });

function optionOf(content: SiteContent, name: string): unknown {
  if (name === 'active_plugins')
    return Object.values(content.plugins)
      .filter((p) => p.active)
      .map((p) => p.file)
      .sort();
  return Object.hasOwn(content.options, name) ? content.options[name] : null;
}

const sortedCron = (events: WpCronEvent[]): WpCronEvent[] =>
  [...events].sort((a, b) => a.nextRunAt.localeCompare(b.nextRunAt) || a.hook.localeCompare(b.hook)).map((e) => ({ ...e }));

function logLine(state: SiteState, source: WpLogLine['source'], level: string, message: string): void {
  state.logs.push({ timestamp: new Date().toISOString(), source, level, message });
}

function fpmReloaded(state: SiteState): void {
  logLine(state, 'php', 'notice', 'NOTICE: Reloading in progress ...');
  logLine(state, 'php', 'notice', 'NOTICE: ready to handle connections');
}

function freshSite(spec: WpSiteSpec, hostname: string): SiteState {
  const now = Date.now();
  const url = `http://${hostname}`;
  const state: SiteState = {
    hostname,
    adminEmail: spec.adminEmail,
    database: { host: spec.database.host, port: spec.database.port, name: spec.database.name, user: spec.database.user },
    hosts: [hostname],
    primary: hostname,
    coreVersion: CORE_VERSION,
    php: { version: spec.phpVersion, settings: { ...DEFAULT_PHP_SETTINGS } },
    constants: {},
    secrets: {},
    cdnUrl: null,
    logs: [],
    content: {
      // The options `wp core install` writes that callers read.
      options: {
        blogname: spec.title,
        blogdescription: 'Just another WordPress site',
        admin_email: spec.adminEmail,
        home: url,
        siteurl: url,
        blog_public: '1',
        users_can_register: '0',
        default_role: 'subscriber',
        permalink_structure: '',
        timezone_string: '',
        gmt_offset: '0',
        date_format: 'F j, Y',
        time_format: 'g:i a',
        start_of_week: '1',
        posts_per_page: '10',
        template: 'twentytwentythree',
        stylesheet: 'twentytwentythree',
        WPLANG: '',
        db_version: DB_VERSION,
      },
      plugins: { akismet: { name: 'Akismet Anti-Spam', version: '5.0.2', active: false, file: 'akismet/akismet.php' } },
      roles: structuredClone(DEFAULT_ROLES),
      cron: sortedCron(
        DEFAULT_CRON.map((e) => ({
          hook: e.hook,
          schedule: e.schedule,
          nextRunAt: new Date(Math.floor(now / 1000) * 1000 + e.firstInSeconds * 1000).toISOString(),
        })),
      ),
      mail: [],
      autologin: [],
    },
  };
  logLine(state, 'php', 'notice', `NOTICE: fpm is running with PHP ${spec.phpVersion}`);
  logLine(state, 'php', 'notice', 'NOTICE: ready to handle connections');
  logLine(state, 'error', 'notice', `WordPress ${CORE_VERSION} installed for ${hostname}`);
  return state;
}

/** A plugin's main file with the header WordPress reads (get_plugin_data). */
function pluginFile(name: string, version: string, description: string): string {
  return `<?php\n/**\n * Plugin Name: ${name}\n * Description: ${description}\n * Version: ${version}\n */\n`;
}

/**
 * The name, version and main file of the plugin in a zip: from the simulator's own directory zips,
 * else from the header of a PHP file in the zip's top folder (as WordPress finds it), else the slug
 * and 1.0.0.
 */
async function pluginHeaderOf(slug: string, zipPath: string): Promise<Omit<StoredPlugin, 'active'>> {
  const fromDirectory = DIRECTORY_ZIPS.get(zipPath);
  if (fromDirectory) {
    if (fromDirectory.slug !== slug)
      throw new BackendRefusedError(BACKEND, `The archive holds the plugin ${fromDirectory.slug}, not ${slug}.`, 'validation_failed', 'slug');
    const name = DIRECTORY.find((p) => p.slug === slug)!.name;
    return { name, version: fromDirectory.version, file: `${slug}/${slug}.php` };
  }
  let zip: Buffer;
  try {
    zip = await readFile(zipPath);
  } catch {
    throw new BackendRefusedError(BACKEND, 'The plugin archive could not be read.', 'refused');
  }
  for (const entry of zipEntries(zip)) {
    const match = /^([^/]+)\/([^/]+\.php)$/.exec(entry.name);
    if (!match || match[1] !== slug) continue;
    const head = entry.read()?.subarray(0, 8192).toString('utf8');
    const name = head && headerField(head, 'Plugin Name');
    if (name) return { name, version: headerField(head, 'Version') || '1.0.0', file: entry.name };
  }
  return { name: slug, version: '1.0.0', file: `${slug}/${slug}.php` };
}

/** One field of a file header, as WordPress's get_file_data reads it. */
function headerField(text: string, field: string): string {
  const match = new RegExp(`^[ \\t/*#@]*${field}:(.*)$`, 'mi').exec(text);
  return match ? match[1].replace(/\s*(?:\*\/|\?>).*/, '').trim() : '';
}

/** The entries of a zip (no ZIP64), each readable when stored or deflated; none when it is not a zip. */
function zipEntries(zip: Buffer): Array<{ name: string; read: () => Buffer | null }> {
  const from = Math.max(0, zip.length - 65_557);
  let eocd = -1;
  for (let i = zip.length - 22; i >= from; i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) return [];
  const count = zip.readUInt16LE(eocd + 10);
  let at = zip.readUInt32LE(eocd + 16);
  const entries: Array<{ name: string; read: () => Buffer | null }> = [];
  for (let n = 0; n < count && at + 46 <= zip.length && zip.readUInt32LE(at) === 0x02014b50; n++) {
    const method = zip.readUInt16LE(at + 10);
    const size = zip.readUInt32LE(at + 20);
    const nameLength = zip.readUInt16LE(at + 28);
    const local = zip.readUInt32LE(at + 42);
    const name = zip.subarray(at + 46, at + 46 + nameLength).toString('utf8');
    entries.push({
      name,
      read: () => {
        if (local + 30 > zip.length || zip.readUInt32LE(local) !== 0x04034b50) return null;
        const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
        const data = zip.subarray(start, start + size);
        try {
          return method === 0 ? data : method === 8 ? inflateRawSync(data, { maxOutputLength: 1 << 20 }) : null;
        } catch {
          return null;
        }
      },
    });
    at += 46 + nameLength + zip.readUInt16LE(at + 30) + zip.readUInt16LE(at + 32);
  }
  return entries;
}

/** The content a backup archive holds; refused when it is not one `backup` wrote. */
async function readDump(archivePath: string): Promise<SiteContent> {
  const unpacked = await mkdtemp(path.join(tmpdir(), 'cloud-wp-sim-restore-'));
  const refused = () => new BackendRefusedError(BACKEND, 'The backup archive is damaged or is not a WordPress backup.', 'refused');
  try {
    await extractTar({ file: archivePath, cwd: unpacked, filter: (p) => p === 'database.sql' || p === './database.sql' }).catch(() => {
      throw refused();
    });
    let dump: string;
    try {
      dump = await readFile(path.join(unpacked, 'database.sql'), 'utf8');
    } catch {
      throw refused();
    }
    if (!dump.startsWith(`${DUMP_HEADER}\n`)) throw refused();
    let content: SiteContent;
    try {
      content = JSON.parse(dump.slice(DUMP_HEADER.length + 1)) as SiteContent;
    } catch {
      throw refused();
    }
    const isObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);
    if (!isObject(content) || !isObject(content.options) || !isObject(content.plugins) || !isObject(content.roles) || !Array.isArray(content.cron))
      throw refused();
    content.mail = Array.isArray(content.mail) ? content.mail : [];
    content.autologin = Array.isArray(content.autologin) ? content.autologin : [];
    return content;
  } finally {
    await rm(unpacked, { recursive: true, force: true });
  }
}
