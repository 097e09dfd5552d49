import { randomBytes } from 'node:crypto';
import {
  constants as fsConstants,
  createReadStream,
  createWriteStream,
  existsSync,
  promises as fs,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { killProcessesOf, makeDirectory, run, runningAsRoot, streamOutput, tailLines, withFileLock } from '../local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, lookupAccount, removeAccount, type OsAccount } from '../os-accounts';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
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
import { applySiteEgressFor, removeSiteEgressFor } from './egress';
import { runHelper, sitePhpIni } from './helper';
import { LocalCertificateAuthority } from './local-ca';
import { SERVER_NAME, WordpressNginx, type NginxSettings } from './nginx';
import { DEFAULT_PHP_SETTINGS, fpmSocket, installedPhpVersions, phpCliBinary, SITE_DISABLED_FUNCTIONS, SitePhpFpm } from './php-fpm';
import { LocalPluginDirectory } from './plugin-directory';
import { BASE_CORE_VERSION, coreVersionOf, coreVersions, ensureSecrets, layoutSite, prepareCore, sitePaths, switchCore, writeConstants } from './site-files';

/**
 * Real WordPress on this host (WORDPRESS_BACKEND=local): each site is a directory
 * `<dataDir>/sites/svc-<n>/` (core files hard-linked read-only from a core release, its own
 * `wp-content`), its own OS account (`cwp-svc-<n>-<hash>`), its own php-fpm master and pool
 * (providers/wordpress/php-fpm.ts) and a server block in the host's nginx
 * (providers/wordpress/nginx.ts). Inside WordPress everything goes through the PHP helper
 * (providers/wordpress/helper.ts) run as the site's account. The site's database is on a MariaDB
 * instance the caller made; the adapter only holds its connection in the site's configuration.
 *
 * State the adapter needs between processes lives in the site's directory (`state.json`, root's):
 * its host names, primary, PHP version and settings, CDN prefix. The API and the worker both use
 * the adapter; changes to one site are serialised by a lock file in its directory.
 */
export interface WordpressLocalOptions {
  dataDir: string;
  bindAddress: string;
  httpPort: number;
  /** `host:port` of the SMTP relay, or null. */
  smtpRelay: string | null;
}

interface SiteState {
  hosts: string[];
  primary: string;
  phpVersion: string;
  settings: WpPhpSettings;
  cdn: boolean;
  account: string | null;
}

const siteKey = (serviceId: number) => `svc-${serviceId}`;
const HELPER_TIMEOUT_MS = 120_000;
/** Archiving, dumping and importing a big site: bounded by the activity's heartbeat instead (a lost worker), not by a short timer. */
const LONG_MS = 6 * 3_600_000;

export class WordpressLocalProvider implements WordpressProvider {
  private readonly dataDir: string;
  private readonly nginx: WordpressNginx;
  private readonly directory: LocalPluginDirectory;
  private coreReady: Promise<void> | null = null;

  constructor(private readonly options: WordpressLocalOptions) {
    this.dataDir = path.resolve(options.dataDir);
    this.nginx = new WordpressNginx({
      dataDir: this.dataDir,
      bindAddress: options.bindAddress,
      port: options.httpPort,
      webAccount: isolatedAccounts() ? this.webAccountName() : null,
    });
    this.directory = new LocalPluginDirectory(path.join(this.dataDir, 'plugin-directory'));
  }

  // ---- layout and state ----------------------------------------------------------------------

  private webAccountName(): string {
    return accountNameFor('wp', this.dataDir, 'web');
  }

  private root(serviceId: number): string {
    return path.join(this.dataDir, 'sites', siteKey(serviceId));
  }

  private state(serviceId: number): SiteState | null {
    try {
      return JSON.parse(readFileSync(path.join(this.root(serviceId), 'state.json'), 'utf8')) as SiteState;
    } catch {
      return null;
    }
  }

  private requireState(serviceId: number): SiteState {
    const state = this.state(serviceId);
    if (!state) throw new BackendGoneError('wordpress', `site ${siteKey(serviceId)}`, 'The site does not exist on its host.');
    return state;
  }

  private saveState(serviceId: number, state: SiteState): void {
    const file = path.join(this.root(serviceId), 'state.json');
    writeFileSync(`${file}.partial`, JSON.stringify(state, null, 2), { mode: 0o600 });
    renameSync(`${file}.partial`, file);
  }

  private async account(state: SiteState): Promise<OsAccount | null> {
    if (!state.account) return null;
    const account = await lookupAccount(state.account);
    if (!account) throw new BackendUnavailableError('wordpress');
    return account;
  }

  private async ensureCore(): Promise<void> {
    this.coreReady ??= prepareCore(this.dataDir).then(
      () => undefined,
      (err: unknown) => {
        this.coreReady = null;
        throw err;
      },
    );
    return this.coreReady;
  }

  private withSiteLock<T>(serviceId: number, fn: () => Promise<T>): Promise<T> {
    return withFileLock(path.join(this.root(serviceId), 'site.lock'), fn);
  }

  private fpm(serviceId: number, state: SiteState): SitePhpFpm {
    const root = this.root(serviceId);
    return new SitePhpFpm({
      root,
      platformDir: path.join(this.dataDir, 'platform'),
      version: state.phpVersion,
      settings: state.settings,
      account: state.account,
      webAccount: isolatedAccounts() ? this.webAccountName() : null,
      ini: { 'openssl.cafile': sitePaths(root).dbCa },
    });
  }

  private async helper<T>(serviceId: number, command: string, args: Record<string, unknown> = {}, timeoutMs = HELPER_TIMEOUT_MS): Promise<T> {
    const state = this.requireState(serviceId);
    const root = this.root(serviceId);
    return runHelper<T>(
      {
        siteRoot: root,
        dataDir: this.dataDir,
        account: await this.account(state),
        phpBinary: phpCliBinary(state.phpVersion),
        timeoutMs,
        ini: {
          ...(await sitePhpIni(root)),
          // The site's plugins run here too: the same limits as its pool.
          disable_functions: SITE_DISABLED_FUNCTIONS,
          open_basedir: [
            root,
            path.join(this.dataDir, 'platform'),
            path.join(this.dataDir, 'scratch', siteKey(serviceId)),
            '/usr/share/php',
            '/usr/share/zoneinfo',
          ]
            .map((d) => `${d}/`)
            .join(':'),
          sys_temp_dir: path.join(root, 'tmp'),
          upload_tmp_dir: path.join(root, 'tmp'),
        },
      },
      command,
      args,
    );
  }

  private async serve(serviceId: number, state: SiteState): Promise<NginxSettings> {
    const root = this.root(serviceId);
    await this.nginx.putSite(siteKey(serviceId), {
      key: siteKey(serviceId),
      hosts: state.hosts,
      root: path.join(root, 'public'),
      fpmSocket: fpmSocket(root),
      logDir: path.join(root, 'logs'),
      cdnPrefix: state.cdn ? `/_cdn/svc_${serviceId}` : null,
    });
    return this.nginx.settings()!;
  }

  // ---- host ------------------------------------------------------------------------------------

  async phpVersions(): Promise<string[]> {
    return installedPhpVersions();
  }

  async latestCoreVersion(): Promise<string> {
    await this.ensureCore();
    const versions = await coreVersions(this.dataDir);
    return versions[versions.length - 1];
  }

  /** The host's nginx settings, started when needed (the keeper and `npm start`). */
  async ensureNginx(): Promise<NginxSettings> {
    return this.nginx.ensure();
  }

  /** The sites this host has (by their directories), for the keeper. */
  async localSites(): Promise<number[]> {
    const dir = path.join(this.dataDir, 'sites');
    if (!existsSync(dir)) return [];
    return (await fs.readdir(dir)).flatMap((d) => (/^svc-\d+$/.test(d) && existsSync(path.join(dir, d, 'state.json')) ? [Number(d.slice(4))] : []));
  }

  async repair(serviceId: number): Promise<string[]> {
    const state = this.requireState(serviceId);
    const repaired: string[] = [];
    const settings = this.nginx.settings();
    if (!settings || !(await this.nginx.answers(settings))) {
      await this.nginx.ensure();
      repaired.push('web');
    }
    if (!this.nginx.siteKeys().includes(siteKey(serviceId))) {
      await this.serve(serviceId, state);
      if (!repaired.includes('web')) repaired.push('web');
    }
    // The network rules live in the kernel: gone after a reboot, put back before PHP starts.
    const account = await this.account(state);
    if (account && (await applySiteEgressFor(account.uid, this.root(serviceId), this.nginx.settings())).changed) repaired.push('egress');
    const fpm = this.fpm(serviceId, state);
    if (!(await fpm.running())) {
      await fpm.apply({ reload: false });
      repaired.push('php');
    }
    return repaired;
  }

  /** Stops every site's PHP and the host's nginx (`npm start`'s Ctrl-C). */
  async stopAll(): Promise<void> {
    for (const id of await this.localSites()) {
      const state = this.state(id);
      if (state) await this.fpm(id, state).stop();
    }
    await this.nginx.stop();
  }

  // ---- lifecycle -------------------------------------------------------------------------------

  async createSite(spec: WpSiteSpec): Promise<WpAddress> {
    const host = spec.hostname.toLowerCase();
    if (!SERVER_NAME.test(host)) throw new BackendRefusedError('wordpress', `"${spec.hostname}" is not a host name.`, 'validation_failed', 'site_name');
    if (!(await this.phpVersions()).includes(spec.phpVersion)) {
      throw new BackendRefusedError('wordpress', `PHP ${spec.phpVersion} is not available here.`, 'validation_failed', 'php_version');
    }
    await this.ensureCore();
    const root = this.root(spec.serviceId);
    await makeDirectory(root, 0o711);
    return this.withSiteLock(spec.serviceId, async () => {
      let account: OsAccount | null = null;
      let web: OsAccount | null = null;
      if (isolatedAccounts()) {
        account = await ensureAccount(accountNameFor('wp', this.dataDir, siteKey(spec.serviceId)), {
          purpose: `WordPress site ${siteKey(spec.serviceId)}`,
          dataDir: root,
        });
        // nginx's workers read the site's wp-content through the web account's group (layoutSite's 02750).
        web = await ensureAccount(this.webAccountName(), { purpose: 'WordPress web server', dataDir: this.dataDir });
      }
      const existing = this.state(spec.serviceId);
      const state: SiteState = existing ?? {
        hosts: [host],
        primary: host,
        phpVersion: spec.phpVersion,
        settings: { ...DEFAULT_PHP_SETTINGS },
        cdn: false,
        account: account?.name ?? null,
      };
      const smtp = this.options.smtpRelay ? splitRelay(this.options.smtpRelay) : null;
      // Salts, the CA file's place and the platform's directories are kept or chosen by layoutSite.
      await layoutSite({
        dataDir: this.dataDir,
        root,
        coreVersion: BASE_CORE_VERSION,
        account: account ? { uid: account.uid, gid: account.gid } : null,
        webGroupGid: web?.gid ?? null,
        dbCaCertificate: spec.database.caCertificate,
        site: {
          db: { host: spec.database.host, port: spec.database.port, name: spec.database.name, user: spec.database.user, password: spec.database.password },
          table_prefix: 'wp_',
          smtp,
          hostname: state.primary,
        },
      });
      await siteWorkDirs(root, account);
      // Its network rules before any of its PHP runs: the site's database, the relay, the public internet; nothing else of this host.
      if (account) await applySiteEgressFor(account.uid, root, await this.nginx.ensure());
      this.saveState(spec.serviceId, state);
      await this.fpm(spec.serviceId, state).apply({ reload: true });
      await this.helper(spec.serviceId, 'install', { title: spec.title, admin_email: spec.adminEmail, url: `http://${state.primary}` });
      const settings = await this.serve(spec.serviceId, state);
      return { ip: settings.bindAddress, httpPort: settings.port };
    });
  }

  async destroySite(serviceId: number): Promise<void> {
    const root = this.root(serviceId);
    const state = this.state(serviceId);
    // The account as createSite names it, also when the site's state was never written.
    const accountName = state?.account ?? (isolatedAccounts() ? accountNameFor('wp', this.dataDir, siteKey(serviceId)) : null);
    await this.nginx.putSite(siteKey(serviceId), null).catch(() => undefined);
    if (state) await this.fpm(serviceId, state).stop();
    // Its processes go before its files: none can steer the removal elsewhere.
    if (accountName) await killProcessesOf(accountName);
    await fs.rm(root, { recursive: true, force: true });
    await fs.rm(path.join(this.dataDir, 'scratch', siteKey(serviceId)), { recursive: true, force: true });
    if (accountName) await removeSiteEgressFor(accountName);
    if (accountName) await removeAccount(accountName);
  }

  async live(serviceId: number): Promise<WpLive> {
    const state = this.requireState(serviceId);
    const settings = this.nginx.settings();
    const status = settings ? await httpStatus(settings, state.primary, '/') : null;
    const info = await this.helper<{ wp_version: string; recipe: Record<string, unknown> | null }>(serviceId, 'status', {}, 15_000);
    return { state: status !== null && status < 500 ? 'up' : 'down', wpVersion: info.wp_version, phpVersion: state.phpVersion, recipe: info.recipe ?? null };
  }

  async setHostnames(serviceId: number, hosts: string[], primary: string): Promise<void> {
    const names = [...new Set(hosts.map((h) => h.toLowerCase()))];
    for (const h of names) if (!SERVER_NAME.test(h)) throw new BackendRefusedError('wordpress', `"${h}" is not a host name.`, 'validation_failed', 'domain');
    if (!names.includes(primary)) throw new BackendRefusedError('wordpress', 'The primary name must be one of the names.', 'validation_failed', 'domain');
    await this.withSiteLock(serviceId, async () => {
      const state = this.requireState(serviceId);
      // Recorded once nginx took the names (it refuses one another site serves).
      await this.serve(serviceId, { ...state, hosts: names, primary });
      this.saveState(serviceId, { ...state, hosts: names, primary });
      await this.helper(serviceId, 'urls.set', { url: `http://${primary}` });
    });
  }

  async armAutologin(serviceId: number, tokenSha256: string, expiresAt: Date): Promise<void> {
    await this.helper(serviceId, 'autologin.arm', { sha256: tokenSha256, expires: Math.floor(expiresAt.getTime() / 1000) });
  }

  // ---- plugins ---------------------------------------------------------------------------------

  async listPlugins(serviceId: number): Promise<WpPlugin[]> {
    return this.helper<WpPlugin[]>(serviceId, 'plugins.list');
  }

  async installPlugin(serviceId: number, slug: string, zipPath: string, activate: boolean): Promise<WpPlugin> {
    // The helper runs as the site's account: the zip is staged where that account may read it and
    // nothing it controls can redirect root's copy (a directory of root's, the file made exclusive).
    const state = this.requireState(serviceId);
    const account = await this.account(state);
    return this.withRootScratch(serviceId, account, async (dir) => {
      const staged = path.join(dir, 'plugin.zip');
      await fs.copyFile(zipPath, staged, fsConstants.COPYFILE_EXCL);
      await fs.chmod(staged, 0o640);
      if (account && runningAsRoot()) await fs.lchown(staged, 0, account.gid);
      return this.helper<WpPlugin>(serviceId, 'plugin.install', { slug, zip: staged, activate });
    });
  }

  async activatePlugin(serviceId: number, slug: string): Promise<WpPlugin> {
    return this.helper<WpPlugin>(serviceId, 'plugin.activate', { slug });
  }

  async deactivatePlugin(serviceId: number, slug: string): Promise<WpPlugin> {
    return this.helper<WpPlugin>(serviceId, 'plugin.deactivate', { slug });
  }

  async deletePlugin(serviceId: number, slug: string): Promise<void> {
    await this.helper(serviceId, 'plugin.delete', { slug });
  }

  async searchDirectory(query: string): Promise<WpDirectoryPlugin[]> {
    return this.directory.search(query);
  }

  async directoryPlugin(slug: string): Promise<WpDirectoryPlugin | null> {
    return this.directory.plugin(slug);
  }

  async directoryZip(slug: string, version: string): Promise<string> {
    return this.directory.zip(slug, version);
  }

  // ---- settings inside WordPress ---------------------------------------------------------------

  async getOption(serviceId: number, name: string): Promise<unknown> {
    const { exists, value } = await this.helper<{ exists: boolean; value: unknown }>(serviceId, 'option.get', { name });
    return exists ? value : null;
  }

  async updateOptions(serviceId: number, options: Record<string, unknown>): Promise<void> {
    await this.helper(serviceId, 'options.update', { options });
  }

  async addRoles(serviceId: number, roles: WpRole[]): Promise<string[]> {
    const { added } = await this.helper<{ added: string[] }>(serviceId, 'roles.add', { roles });
    return added;
  }

  async setConstants(serviceId: number, constants: Record<string, string | number | boolean>): Promise<void> {
    this.requireState(serviceId);
    await writeConstants(this.root(serviceId), constants);
  }

  async ensureSecrets(serviceId: number, names: string[]): Promise<Record<string, string>> {
    this.requireState(serviceId);
    return ensureSecrets(this.root(serviceId), names);
  }

  async runCommand(serviceId: number, argv: WpCommand): Promise<{ exitCode: number; output: string }> {
    const { exit_code, output } = await this.helper<{ exit_code: number; output: string }>(serviceId, 'command', { argv });
    return { exitCode: exit_code, output };
  }

  // ---- cron ------------------------------------------------------------------------------------

  async listCron(serviceId: number): Promise<WpCronEvent[]> {
    const events = await this.helper<Array<{ hook: string; schedule: string | null; next_run_at: string }>>(serviceId, 'cron.list');
    return events.map((e) => ({ hook: e.hook, schedule: e.schedule, nextRunAt: e.next_run_at }));
  }

  async runCron(serviceId: number, hook: string): Promise<{ executedAt: string }> {
    const { executed_at } = await this.helper<{ executed_at: string }>(serviceId, 'cron.run', { hook });
    return { executedAt: executed_at };
  }

  async deleteCron(serviceId: number, hook: string): Promise<void> {
    await this.helper(serviceId, 'cron.delete', { hook });
  }

  // ---- PHP -------------------------------------------------------------------------------------

  async php(serviceId: number): Promise<WpPhp> {
    const state = this.requireState(serviceId);
    return { version: state.phpVersion, settings: state.settings };
  }

  async setPhpSettings(serviceId: number, settings: Partial<WpPhpSettings>): Promise<WpPhp> {
    return this.withSiteLock(serviceId, async () => {
      const state = this.requireState(serviceId);
      state.settings = { ...state.settings, ...settings };
      // Checked here, under the site's lock, against what the site has: two changes at once cannot both pass.
      if (phpBytes(state.settings.post_max_size) < phpBytes(state.settings.upload_max_filesize)) {
        throw new BackendRefusedError(
          'wordpress',
          `post_max_size (${state.settings.post_max_size}) must be at least upload_max_filesize (${state.settings.upload_max_filesize}).`,
          'validation_failed',
          'post_max_size' in settings ? 'post_max_size' : 'upload_max_filesize',
        );
      }
      await this.fpm(serviceId, state).apply({ reload: true });
      this.saveState(serviceId, state);
      return { version: state.phpVersion, settings: state.settings };
    });
  }

  async setPhpVersion(serviceId: number, version: string): Promise<WpPhp> {
    if (!(await this.phpVersions()).includes(version)) {
      throw new BackendRefusedError(
        'wordpress',
        `PHP ${version} is not available (available: ${(await this.phpVersions()).join(', ')}).`,
        'validation_failed',
        'version',
      );
    }
    return this.withSiteLock(serviceId, async () => {
      const state = this.requireState(serviceId);
      state.phpVersion = version;
      // A master of another version is replaced (a few seconds of errors); the same version restarts gracefully.
      await this.fpm(serviceId, state).apply({ reload: true });
      this.saveState(serviceId, state);
      return { version: state.phpVersion, settings: state.settings };
    });
  }

  async restartPhp(serviceId: number): Promise<void> {
    await this.withSiteLock(serviceId, async () => {
      const state = this.requireState(serviceId);
      await this.fpm(serviceId, state).apply({ reload: true });
    });
  }

  // ---- core ------------------------------------------------------------------------------------

  async coreVersion(serviceId: number): Promise<string> {
    this.requireState(serviceId);
    const version = await coreVersionOf(this.root(serviceId));
    if (!version) throw new BackendUnavailableError('wordpress');
    return version;
  }

  async updateCore(serviceId: number): Promise<{ from: string; to: string }> {
    const to = await this.latestCoreVersion();
    return this.withSiteLock(serviceId, async () => {
      this.requireState(serviceId);
      const root = this.root(serviceId);
      const from = (await coreVersionOf(root)) ?? BASE_CORE_VERSION;
      if (from !== to) {
        await switchCore(root, this.dataDir, to);
        // OPcache holds the old release's files: the workers are replaced.
        await this.fpm(serviceId, this.requireState(serviceId)).apply({ reload: true });
      }
      // Always: a crash between the switch and the upgrade is finished by the retry.
      await this.helper(serviceId, 'core.upgrade_db');
      return { from, to };
    });
  }

  // ---- backups ---------------------------------------------------------------------------------

  /** A `[client]` defaults file for the site's database (root's, 0600), removed after `fn`. */
  private async withDbDefaults<T>(serviceId: number, fn: (file: string, database: string) => Promise<T>): Promise<T> {
    const site = readJson<{ db: { host: string; port: number; name: string; user: string; password: string; ca_file: string } }>(
      path.join(this.root(serviceId), 'config', 'site.json'),
    );
    if (!site) throw new BackendGoneError('wordpress', `site ${siteKey(serviceId)}`);
    const dir = path.join(this.dataDir, 'private');
    await makeDirectory(dir, 0o700);
    const file = path.join(dir, `client-${randomBytes(8).toString('hex')}.cnf`);
    const line = (k: string, v: string | number) => {
      if (/[\n\r]/.test(String(v))) throw new Error('bad database setting');
      return `${k}=${v}`;
    };
    writeFileSync(
      file,
      [
        '[client]',
        line('host', site.db.host),
        line('port', site.db.port),
        line('user', site.db.user),
        line('password', site.db.password),
        line('ssl-ca', site.db.ca_file),
        'ssl-verify-server-cert',
        '',
      ].join('\n'),
      { mode: 0o600 },
    );
    try {
      return await fn(file, site.db.name);
    } finally {
      rmSync(file, { force: true });
    }
  }

  /**
   * A scratch directory of root's for one piece of work on a site (`<data>/scratch/svc-<n>/<random>`,
   * root:site 0750: the site's account may read what root puts there, never write), removed after
   * `fn`. Root never works in a directory the site's account can write: a link planted there could
   * turn root's write, chown or delete onto any file of the host.
   */
  private async withRootScratch<T>(serviceId: number, account: OsAccount | null, fn: (dir: string) => Promise<T>): Promise<T> {
    const parent = path.join(this.dataDir, 'scratch', siteKey(serviceId));
    await makeDirectory(parent, 0o711);
    if (runningAsRoot()) await fs.lchown(parent, 0, 0);
    const dir = path.join(parent, randomBytes(8).toString('hex'));
    await fs.mkdir(dir, { mode: 0o750 });
    if (account && runningAsRoot()) await fs.lchown(dir, 0, account.gid);
    try {
      return await fn(dir);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }

  /**
   * Removes a tree of the site's own files that sits in a directory of root's: its contents are
   * deleted by the site's account (`find -delete` follows no link), then root removes the empty
   * directory. Root never walks a tree the site can write to.
   */
  private async removeAsSite(dir: string, account: OsAccount | null): Promise<void> {
    if (!(await fs.lstat(dir).catch(() => null))) return;
    if (account && runningAsRoot()) {
      await run('find', [dir, '-xdev', '-mindepth', '1', '-delete'], { as: account, timeoutMs: LONG_MS }).catch(() => undefined);
      await fs.rmdir(dir);
    } else {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }

  async backup(serviceId: number, archivePath: string): Promise<{ sizeBytes: number }> {
    const root = this.root(serviceId);
    const state = this.requireState(serviceId);
    const account = await this.account(state);
    return this.withRootScratch(serviceId, account, async (scratch) => {
      // 1. wp-content, archived by the site's account (its files, links included, read with its rights only)
      //    into a file root opened in its own scratch directory.
      const tarFile = path.join(scratch, 'site.tar');
      const out = await fs.open(tarFile, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o600);
      try {
        await pipeline(
          streamOutput('tar', ['-cf', '-', '-C', path.join(root, 'public'), 'wp-content'], { as: account ?? undefined, timeoutMs: LONG_MS }),
          out.createWriteStream(),
        );
      } finally {
        await out.close().catch(() => undefined);
      }
      // 2. The database, dumped by root into its scratch directory and appended to the archive.
      const dump = path.join(scratch, 'database.sql');
      await this.withDbDefaults(serviceId, async (defaults, database) => {
        const handle = await fs.open(dump, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, 0o600);
        try {
          await pipeline(
            streamOutput(
              'mariadb-dump',
              [
                `--defaults-extra-file=${defaults}`,
                '--single-transaction',
                '--skip-lock-tables',
                '--add-drop-table',
                '--default-character-set=utf8mb4',
                '--',
                database,
              ],
              { timeoutMs: LONG_MS },
            ),
            handle.createWriteStream(),
          );
        } finally {
          await handle.close().catch(() => undefined);
        }
      });
      await run('tar', ['-rf', tarFile, '-C', scratch, 'database.sql'], { timeoutMs: LONG_MS });
      // 3. Compressed to the archive, whole or not at all.
      await fs.mkdir(path.dirname(archivePath), { recursive: true, mode: 0o700 });
      const partial = `${archivePath}.partial`;
      try {
        await pipeline(streamOutput('gzip', ['-c', '-6', '--', tarFile], { timeoutMs: LONG_MS }), createWriteStream(partial, { mode: 0o600 }));
        renameSync(partial, archivePath);
      } finally {
        rmSync(partial, { force: true });
      }
      return { sizeBytes: (await fs.stat(archivePath)).size };
    });
  }

  /**
   * Overwrites the database and `wp-content/` from an archive `backup` wrote. Idempotent, and safe
   * to run again after a crash at any point:
   * 1. the dump (appended by root, never the site's) is taken out by root into its own scratch
   *    directory and imported by the `mariadb` client in sandbox mode (no `\!`, no file access, no
   *    `LOCAL INFILE`), after every table of the site's database is dropped;
   * 2. `wp-content/` is unpacked by the site's account into `trash/incoming` (made by root in the
   *    site's root-owned `trash/`, beside `public/`, so it is never served and cannot be swapped for
   *    a link), then put in place by two renames in root's directories; a crash between them is
   *    finished by the next run, and the old tree is emptied by the site's account.
   */
  async restore(serviceId: number, archivePath: string): Promise<void> {
    if (!existsSync(archivePath)) throw new BackendGoneError('wordpress', 'backup archive', 'The backup archive is gone.');
    const root = this.root(serviceId);
    const live = path.join(root, 'public', 'wp-content');
    // Beside public/ (never served), root's; the site's account may enter it by name only.
    const trash = path.join(root, 'trash');
    const incoming = path.join(trash, 'incoming');
    const old = path.join(trash, 'old');
    await this.withSiteLock(serviceId, async () => {
      const state = this.requireState(serviceId);
      const account = await this.account(state);
      const webGid = isolatedAccounts() ? ((await lookupAccount(this.webAccountName()))?.gid ?? null) : null;
      await fs.mkdir(trash, { recursive: true, mode: 0o710 });
      if (account && runningAsRoot()) await fs.lchown(trash, 0, account.gid);
      await fs.chmod(trash, 0o710);
      // A run that crashed between the two renames left wp-content aside: put it back first.
      if (!existsSync(live) && existsSync(old)) renameSync(old, live);
      await this.removeAsSite(old, account);
      await this.removeAsSite(incoming, account);

      await this.withRootScratch(serviceId, account, async (scratch) => {
        await run('tar', ['-xzf', archivePath, '-C', scratch, '--no-same-owner', 'database.sql'], { timeoutMs: LONG_MS });
        const dump = path.join(scratch, 'database.sql');
        if (!(await fs.lstat(dump).catch(() => null))?.isFile()) throw new BackendRefusedError('wordpress', 'The backup archive is not complete.', 'conflict');
        await this.withDbDefaults(serviceId, async (defaults, database) => {
          const client = [`--defaults-extra-file=${defaults}`, '--sandbox', '--local-infile=0', '--default-character-set=utf8mb4'];
          const { stdout } = await run('mariadb', [
            ...client,
            '-N',
            '-B',
            '-e',
            'SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()',
            '--',
            database,
          ]);
          const tables = stdout.split('\n').filter((t) => /^[A-Za-z0-9_$]+$/.test(t));
          const drops = tables.map((t) => `DROP TABLE IF EXISTS \`${t}\`;`).join('\n');
          const input = (async function* () {
            yield Buffer.from(`SET FOREIGN_KEY_CHECKS=0;\n${drops}\n`);
            for await (const chunk of createReadStream(dump)) yield chunk as Buffer;
          })();
          await run('mariadb', [...client, '--', database], { input, timeoutMs: LONG_MS });
        });
      });

      // wp-content: a directory of the site's (with the web server's group, setgid) in root's public/.
      await fs.mkdir(incoming, { mode: 0o2750 });
      if (account && runningAsRoot()) await fs.lchown(incoming, account.uid, webGid ?? account.gid);
      await fs.chmod(incoming, webGid !== null ? 0o2750 : 0o755);
      await run('tar', ['-xzf', '-', '--no-same-owner', '--no-same-permissions', '--strip-components=1', '-C', incoming, 'wp-content'], {
        as: account ?? undefined,
        input: createReadStream(archivePath) as AsyncIterable<Buffer>,
        timeoutMs: LONG_MS,
      });
      renameSync(live, old);
      renameSync(incoming, live);
      await this.removeAsSite(old, account);
    });
    // The database holds the URLs and CDN setting of the backup's day: today's are put back.
    const state = this.requireState(serviceId);
    await this.helper(serviceId, 'urls.set', { url: `http://${state.primary}` });
    await this.helper(serviceId, 'cdn.set', { url: state.cdn ? this.cdnUrl(serviceId) : null });
    // Cached pages and objects belong to the old content.
    await this.flushCache(serviceId).catch(() => undefined);
  }

  // ---- caches, CDN, mail, logs -----------------------------------------------------------------

  async flushCache(serviceId: number): Promise<string[]> {
    const { flushed } = await this.helper<{ flushed: string[] }>(serviceId, 'cache.flush');
    return flushed;
  }

  async setCdn(serviceId: number, url: string | null): Promise<void> {
    await this.withSiteLock(serviceId, async () => {
      const state = { ...this.requireState(serviceId), cdn: url !== null };
      await this.serve(serviceId, state);
      this.saveState(serviceId, state);
      await this.helper(serviceId, 'cdn.set', { url });
    });
  }

  /** The CDN stand-in's base URL for a site (its uploads are served under it by the host's nginx). */
  cdnUrl(serviceId: number): string | null {
    const settings = this.nginx.settings();
    return settings ? `http://${settings.bindAddress}:${settings.port}/_cdn/svc_${serviceId}` : null;
  }

  async sendTestMail(serviceId: number, to: string): Promise<{ sent: boolean; detail: string }> {
    return this.helper<{ sent: boolean; detail: string }>(serviceId, 'mail.test', { to });
  }

  async mailLog(serviceId: number, since: Date): Promise<WpMailLogEntry[]> {
    this.requireState(serviceId);
    const file = path.join(this.root(serviceId), 'private', 'mail.jsonl');
    if (!existsSync(file)) return [];
    const { lines } = await tailLines(file, (l) => l.length >= 5_000);
    const entries: WpMailLogEntry[] = [];
    for (const line of lines) {
      try {
        const e = JSON.parse(line) as { to?: unknown; subject?: unknown; method?: unknown; sent_at?: unknown; sent?: unknown };
        const sentAt = typeof e.sent_at === 'string' ? new Date(e.sent_at) : null;
        if (!sentAt || Number.isNaN(sentAt.getTime()) || sentAt < since) continue;
        entries.push({
          to: Array.isArray(e.to) ? e.to.map(String).join(', ') : String(e.to ?? ''),
          subject: String(e.subject ?? ''),
          method: String(e.method ?? 'smtp'),
          sentAt: sentAt.toISOString(),
          sent: e.sent === true,
        });
      } catch {
        // a torn line
      }
    }
    return entries.reverse();
  }

  async logs(serviceId: number, source: 'access' | 'error' | 'php', lines: number): Promise<WpLogLine[]> {
    this.requireState(serviceId);
    const file = source === 'php' ? path.join(this.root(serviceId), 'private', 'php.log') : path.join(this.root(serviceId), 'logs', `${source}.log`);
    if (!existsSync(file)) return [];
    const tail = await tailLines(file, (l) => l.length > lines);
    return tail.lines
      .filter((l) => l.trim() !== '')
      .slice(-lines)
      .map((line) => parseLogLine(source, line));
  }

  // ---- certificates and the CDN's cache ------------------------------------------------------------

  private localCa: LocalCertificateAuthority | null = null;

  /** The host's certificate authority (`<dataDir>/ca/`), the stand-in for an ACME CA. */
  private get certificateAuthority(): LocalCertificateAuthority {
    this.localCa ??= new LocalCertificateAuthority(path.join(this.dataDir, 'ca'));
    return this.localCa;
  }

  /**
   * Issues the domain's certificate from the host's CA into `<site>/certs/<domain>.{crt,key}`
   * (root's; the key 0600 in a 0700 directory). Stored, not served: nginx serves the sites plain
   * HTTP locally (DECISIONS "Hosted WordPress": certificates simulated for serving).
   */
  async issueCertificate(serviceId: number, domain: string, names: string[]): Promise<{ notAfter: string }> {
    this.requireState(serviceId);
    for (const name of [domain, ...names]) {
      if (!SERVER_NAME.test(name) || !name.includes('.'))
        throw new BackendRefusedError('wordpress', `"${name}" is not a host name.`, 'validation_failed', 'domain');
    }
    const issued = await this.certificateAuthority.issue(names, { dir: path.join(this.root(serviceId), 'certs'), base: domain });
    return { notAfter: issued.notAfter };
  }

  async removeCertificate(serviceId: number, domain: string): Promise<void> {
    if (!SERVER_NAME.test(domain)) return;
    await this.certificateAuthority.remove({ dir: path.join(this.root(serviceId), 'certs'), base: domain });
  }

  /** Empties the site's cache in the CDN stand-in (nginx's `proxy_cache` of `/_cdn/svc_<n>/`). */
  async purgeCdn(serviceId: number): Promise<void> {
    this.requireState(serviceId);
    this.nginx.purgeCdn(siteKey(serviceId));
  }
}

/**
 * The site's scratch directory besides wp-content: `tmp/` (PHP's uploads and sessions, the backups'
 * scratch space), the site's alone. Its PHP error log is `private/php.log` (layoutSite's, the
 * account's); nginx (root) writes `logs/`.
 */
async function siteWorkDirs(root: string, account: OsAccount | null): Promise<void> {
  const tmp = path.join(root, 'tmp');
  await fs.mkdir(tmp, { recursive: true, mode: 0o700 });
  await fs.chmod(tmp, 0o700);
  if (account && runningAsRoot()) await fs.lchown(tmp, account.uid, account.gid);
}

function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

function splitRelay(relay: string): { host: string; port: number } {
  const at = relay.lastIndexOf(':');
  return { host: relay.slice(0, at), port: Number(relay.slice(at + 1)) };
}

/** The status of `GET path` with `Host: host` through the host's nginx (null: no answer). */
function httpStatus(settings: NginxSettings, host: string, urlPath: string, timeoutMs = 10_000): Promise<number | null> {
  return new Promise((resolve) => {
    const req = http.get({ host: settings.bindAddress, port: settings.port, path: urlPath, headers: { host }, timeout: timeoutMs }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? null));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
}

/** PHP's size shorthand (`64M`, `1G`) in bytes. */
function phpBytes(value: string): number {
  const m = /^(\d+)([KMG]?)$/i.exec(value.trim());
  if (!m) return Number.NaN;
  return Number(m[1]) * ({ '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3 } as Record<string, number>)[m[2].toUpperCase()];
}

/** Autologin tokens in a request line (nginx's error log names the whole request) never reach an answer. */
const redactTokens = (line: string) => line.replace(/([?&]cloud_autologin=)[^&\s"]*/g, '$1[redacted]');

const MONTHS: Record<string, string> = {
  Jan: '01',
  Feb: '02',
  Mar: '03',
  Apr: '04',
  May: '05',
  Jun: '06',
  Jul: '07',
  Aug: '08',
  Sep: '09',
  Oct: '10',
  Nov: '11',
  Dec: '12',
};

/** One line of a site log as `{timestamp, source, level, message}` (the format of each source is fixed by its writer). */
export function parseLogLine(source: 'access' | 'error' | 'php', raw: string): WpLogLine {
  const line = redactTokens(raw);
  if (source === 'access') {
    // $time_iso8601 $status $request_method $path (the requested path, no query) $body_bytes_sent $request_time "$http_user_agent"
    const [time, status] = line.split(' ', 2);
    const code = Number(status);
    const ts = new Date(time);
    return {
      timestamp: Number.isNaN(ts.getTime()) ? new Date(0).toISOString() : ts.toISOString(),
      source,
      level: code >= 500 ? 'error' : code >= 400 ? 'warning' : 'info',
      message: line.slice(time.length + 1),
    };
  }
  if (source === 'error') {
    // 2026/11/26 05:00:00 [error] 123#123: *1 message
    const m = /^(\d{4})\/(\d{2})\/(\d{2}) (\d{2}:\d{2}:\d{2}) \[(\w+)\] (?:\d+#\d+: )?(.*)$/.exec(line);
    if (m) return { timestamp: new Date(`${m[1]}-${m[2]}-${m[3]}T${m[4]}Z`).toISOString(), source, level: m[5], message: m[6] };
  }
  if (source === 'php') {
    // [26-Nov-2026 05:00:00 UTC] PHP Warning:  message
    const m = /^\[(\d{2})-(\w{3})-(\d{4}) (\d{2}:\d{2}:\d{2}) UTC\] (?:PHP (\w[\w ]*?):\s+)?(.*)$/.exec(line);
    if (m && MONTHS[m[2]]) {
      const level = (m[5] ?? 'notice').toLowerCase().replace('fatal error', 'error').replace('parse error', 'error');
      return { timestamp: new Date(`${m[3]}-${MONTHS[m[2]]}-${m[1]}T${m[4]}Z`).toISOString(), source, level, message: m[6] };
    }
  }
  return { timestamp: new Date(0).toISOString(), source, level: 'info', message: line };
}
