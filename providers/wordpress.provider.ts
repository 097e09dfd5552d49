/**
 * Hosted WordPress sites (SPEC "Hosted sites", DECISIONS "Hosted WordPress"): what the backend can
 * do for one site, in WordPress's own terms. The real adapter (providers/wordpress/) runs each site
 * as real WordPress: its files under the host's data directory, its own OS account, its own php-fpm
 * master and pool, an nginx server block selected by Host, and a database on a MariaDB instance the
 * caller made (the provisioner, through the DBaaS backend). Inside WordPress it works through the
 * project's PHP helper (`providers/wordpress/php/cloud-helper.php`), which loads WordPress and calls
 * its own functions with arguments passed as JSON on stdin. The simulator
 * (providers/simulator/wordpress.simulator.ts) keeps the same state in PostgreSQL and serves nothing.
 *
 * Sites are named by their service id (`serviceId`); every call is idempotent where the interface
 * says so (activities retry). Errors: only those of providers/errors.ts. A refusal's message is
 * written for customers; `param` names the request field it is about.
 */

/** How the site reaches its database (made by the caller on a MariaDB instance of the platform). */
export interface WpDatabase {
  host: string;
  port: number;
  name: string;
  user: string;
  password: string;
  /** PEM of the CA that signed the server's certificate (the server requires TLS). */
  caCertificate: string;
}

export interface WpSiteSpec {
  serviceId: number;
  /** The platform hostname (the order's `site_name`, lower-case): the first domain, and `blogname`. */
  hostname: string;
  /** `blogname`. */
  title: string;
  /** The first administrator's e-mail (the account owner's). */
  adminEmail: string;
  /** A PHP version the host has (`phpVersions()`). */
  phpVersion: string;
  database: WpDatabase;
}

/** Where a site answers HTTP (by Host). */
export interface WpAddress {
  ip: string;
  httpPort: number;
}

export interface WpLive {
  state: 'up' | 'down';
  wpVersion: string;
  phpVersion: string;
  /** The `cloud_recipe` option (`{name, version, applied_at}`), null when unset. */
  recipe: Record<string, unknown> | null;
}

export interface WpPlugin {
  slug: string;
  name: string;
  version: string;
  active: boolean;
}

/** A plugin of the (local stand-in of the) public plugin directory. */
export interface WpDirectoryPlugin {
  slug: string;
  name: string;
  latestVersion: string;
  /** Oldest first. */
  versions: string[];
}

export interface WpPhpSettings {
  memory_limit: string;
  upload_max_filesize: string;
  post_max_size: string;
  max_execution_time: number;
  max_input_vars: number;
}

export interface WpPhp {
  /** What runs (`8.2`). */
  version: string;
  settings: WpPhpSettings;
}

export interface WpCronEvent {
  hook: string;
  /** The recurrence's name (`hourly`), null for a single event. */
  schedule: string | null;
  /** ISO 8601 (UTC). */
  nextRunAt: string;
}

export interface WpRole {
  name: string;
  display: string;
  caps: string[];
}

export interface WpMailLogEntry {
  to: string;
  subject: string;
  /** How it left (`smtp`). */
  method: string;
  /** ISO 8601 (UTC). */
  sentAt: string;
  sent: boolean;
}

export interface WpLogLine {
  timestamp: string;
  source: 'access' | 'error' | 'php';
  level: string;
  message: string;
}

/** The allowlisted read-only commands of recipes' `verify` (`option get`, `plugin is-active`, ...), as argv. */
export type WpCommand = string[];

export interface WordpressProvider {
  /** The PHP versions this host runs sites on (`['8.2']`). */
  phpVersions(): Promise<string[]>;
  /** The newest WordPress version the host offers (the core update stand-in's). */
  latestCoreVersion(): Promise<string>;

  /**
   * Creates the site (account, files, PHP pool, install, server block for `hostname`) and returns
   * where it answers. Idempotent: a second call finds it, repairs what is missing, installs nothing twice.
   */
  createSite(spec: WpSiteSpec): Promise<WpAddress>;
  /** Removes everything of the site on this host (files, pool, server block, account). Absent is fine. */
  destroySite(serviceId: number): Promise<void>;
  /**
   * Brings the site's processes back when they do not run (its PHP; the host's web server) and says
   * what it had to start (`php`, `web`, `egress`: the site's network rules); [] when everything
   * ran. The keeper calls it.
   */
  repair(serviceId: number): Promise<string[]>;
  /** Live state; throws BackendUnavailableError when the site does not answer. */
  live(serviceId: number): Promise<WpLive>;
  /**
   * The Host names the site answers to (the platform hostname, custom domains and their `www.`
   * forms), and its primary name: `home` and `siteurl` become `http://<primary>`.
   */
  setHostnames(serviceId: number, hosts: string[], primary: string): Promise<void>;
  /** Stores a single-use login token (its SHA-256, hex) valid until `expiresAt`; the site's must-use plugin honours it once. */
  armAutologin(serviceId: number, tokenSha256: string, expiresAt: Date): Promise<void>;

  // Plugins. Files come from the plugin directory (below) or a zip the caller fetched and checked.
  listPlugins(serviceId: number): Promise<WpPlugin[]>;
  /** Installs (or reinstalls over) the plugin from a zip file on this host whose top folder is `slug`; activates it when asked. */
  installPlugin(serviceId: number, slug: string, zipPath: string, activate: boolean): Promise<WpPlugin>;
  activatePlugin(serviceId: number, slug: string): Promise<WpPlugin>;
  deactivatePlugin(serviceId: number, slug: string): Promise<WpPlugin>;
  /** Deactivates and removes the plugin's files; its settings stay in the database. Absent: BackendGoneError. */
  deletePlugin(serviceId: number, slug: string): Promise<void>;

  // The plugin directory stand-in (wordpress.org is not reachable).
  searchDirectory(query: string): Promise<WpDirectoryPlugin[]>;
  directoryPlugin(slug: string): Promise<WpDirectoryPlugin | null>;
  /** A zip of the plugin at that version, on this host (the caller may read it; it must not change it). */
  directoryZip(slug: string, version: string): Promise<string>;

  // Settings inside WordPress (through its API, plugins loaded: hooks fire).
  getOption(serviceId: number, name: string): Promise<unknown>;
  updateOptions(serviceId: number, options: Record<string, unknown>): Promise<void>;
  /** Adds the roles that do not exist; an existing role is kept as it is. Returns the names added. */
  addRoles(serviceId: number, roles: WpRole[]): Promise<string[]>;
  /** Platform-written constants of the site's configuration (recipes): replaces the set `constants` names. */
  setConstants(serviceId: number, constants: Record<string, string | number | boolean>): Promise<void>;
  /** Secret constants (recipes' `secrets`): sets each name that has no value yet and returns every named value. */
  ensureSecrets(serviceId: number, names: string[]): Promise<Record<string, string>>;
  /** Runs one allowlisted read-only command; exit code 0 is green. */
  runCommand(serviceId: number, argv: WpCommand): Promise<{ exitCode: number; output: string }>;

  // Cron (WordPress's own schedule).
  listCron(serviceId: number): Promise<WpCronEvent[]>;
  /** Runs every scheduled occurrence of the hook now (recurring ones are rescheduled). Unknown hook: BackendGoneError. */
  runCron(serviceId: number, hook: string): Promise<{ executedAt: string }>;
  /** Removes every scheduled occurrence of the hook. Unknown hook: BackendGoneError. */
  deleteCron(serviceId: number, hook: string): Promise<void>;

  // PHP.
  php(serviceId: number): Promise<WpPhp>;
  /** Applies settings (validated by the caller) with a graceful reload. */
  setPhpSettings(serviceId: number, settings: Partial<WpPhpSettings>): Promise<WpPhp>;
  /** Runs the site on another of `phpVersions()`; settings carry over. */
  setPhpVersion(serviceId: number, version: string): Promise<WpPhp>;
  /** Graceful restart of the site's PHP (no request dropped). */
  restartPhp(serviceId: number): Promise<void>;

  // Core.
  coreVersion(serviceId: number): Promise<string>;
  /** Switches the site's core files to `latestCoreVersion()` and runs the database upgrade. Idempotent. */
  updateCore(serviceId: number): Promise<{ from: string; to: string }>;

  // Backups: a `.tar.gz` holding `database.sql` and `wp-content/`.
  /** Writes the site's backup archive to `archivePath` (a path of this host). Returns its size. */
  backup(serviceId: number, archivePath: string): Promise<{ sizeBytes: number }>;
  /** Overwrites the site's database and `wp-content/` from an archive `backup` wrote. */
  restore(serviceId: number, archivePath: string): Promise<void>;

  // Certificates (locally: a certificate authority of the host's own, the stand-in for an ACME CA).
  /**
   * Issues (or renews) the domain's certificate for `names` (the domain and, for an apex, its
   * `www.` form) and installs it for the site. The caller has checked that the names point here.
   */
  issueCertificate(serviceId: number, domain: string, names: string[]): Promise<{ notAfter: string }>;
  /** Drops the domain's certificate. Absent is fine. */
  removeCertificate(serviceId: number, domain: string): Promise<void>;

  // Caches, CDN, mail, logs.
  /** Empties the CDN's cache of the site's uploads (the stand-in edge's cache). */
  purgeCdn(serviceId: number): Promise<void>;
  /** Flushes what the site caches; answers what was flushed (`object`, `page`). */
  flushCache(serviceId: number): Promise<string[]>;
  /** Front-end `<home>/wp-content/uploads/` URLs start with `url` (null: off). */
  setCdn(serviceId: number, url: string | null): Promise<void>;
  /** Sends a test mail with wp_mail through the host's relay; `sent: false` carries the reason. */
  sendTestMail(serviceId: number, to: string): Promise<{ sent: boolean; detail: string }>;
  /** Mail the site sent since `since`, newest first (no bodies). */
  mailLog(serviceId: number, since: Date): Promise<WpMailLogEntry[]>;
  /** The last `lines` lines of one log, oldest first. */
  logs(serviceId: number, source: 'access' | 'error' | 'php', lines: number): Promise<WpLogLine[]>;
}
