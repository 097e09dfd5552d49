import { existsSync, mkdirSync, readdirSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { findBinary, LocalServerError, processAlive, readPidFile, spawnDetached, stopProcess, waitFor, withFileLock } from '../local-server';
import type { WpPhpSettings } from '../wordpress.provider';

/**
 * One php-fpm master per site (`php-fpm<version> --fpm-config <site>/php/php-fpm.conf`), with one
 * pool that runs as the site's own OS account and listens on a unix socket only the web server's
 * account may open: no other site's PHP, and no other local user, can hand it a FastCGI request
 * (which could set `PHP_VALUE` and run any file as the site). A master per site is what makes a
 * site's restart, settings and PHP version its own.
 *
 * The pool is locked down with `php_admin_value` (code cannot loosen it with ini_set):
 * `open_basedir` to the site's directory and the platform's, a temporary directory of its own,
 * functions that start processes disabled, and the customer's settings (memory_limit, ...).
 *
 * Graceful restart (settings change, `php/restart`): SIGUSR2, php-fpm's graceful reload: the master
 * re-reads its configuration and replaces its workers, finishing the requests in flight.
 */
const INSTALL_FIX = 'run bash scripts/install/wordpress.sh (as root): it installs php8.2-fpm';

/**
 * What a site's PHP may not call, in its pool and in the platform's helper alike: starting processes
 * (and `mail`/`putenv`, the usual way around that with `LD_PRELOAD`), loading extensions.
 */
export const SITE_DISABLED_FUNCTIONS = 'exec,passthru,shell_exec,system,proc_open,popen,pcntl_exec,dl,mail,putenv';

export const DEFAULT_PHP_SETTINGS: WpPhpSettings = {
  memory_limit: '256M',
  upload_max_filesize: '64M',
  post_max_size: '64M',
  max_execution_time: 30,
  max_input_vars: 1000,
};

/** The PHP versions whose php-fpm this machine has (`8.2`), newest last. */
export function installedPhpVersions(): string[] {
  const found = new Set<string>();
  for (const dir of ['/usr/sbin', '/usr/bin']) {
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir)) {
      const m = /^php-fpm(\d+\.\d+)$/.exec(f);
      if (m) found.add(m[1]);
    }
  }
  return [...found].sort((a, b) => Number(a.split('.')[0]) - Number(b.split('.')[0]) || Number(a.split('.')[1]) - Number(b.split('.')[1]));
}

export function fpmBinary(version: string): string {
  if (!/^\d+\.\d+$/.test(version)) throw new Error(`bad PHP version ${version}`);
  const found = findBinary(`php-fpm${version}`, `/usr/sbin/php-fpm${version}`);
  if (!found) throw new LocalServerError(`php-fpm${version} is missing`, INSTALL_FIX);
  return found;
}

export function phpCliBinary(version: string): string {
  const found = findBinary(`php${version}`, `/usr/bin/php${version}`);
  if (!found) throw new LocalServerError(`php${version} (the CLI) is missing`, INSTALL_FIX);
  return found;
}

export interface FpmSite {
  /** The site's root directory (`<dataDir>/sites/svc-12`). */
  root: string;
  /** The platform's directory every site may read (the helper, the must-use plugins). */
  platformDir: string;
  version: string;
  settings: WpPhpSettings;
  /** The site's account (root only), null: this process's. */
  account: string | null;
  /** The web server's account, which alone may open the socket (root only). */
  webAccount: string | null;
  /** `php_admin_value`s the site needs besides the settings (the database CA for mysqli: `openssl.cafile`). */
  ini: Record<string, string>;
}

const confPath = (root: string) => path.join(root, 'php', 'php-fpm.conf');
export const fpmSocket = (root: string) => path.join(root, 'run', 'php-fpm.sock');
const isOurs = (root: string) => (args: string[]) => args.join(' ').includes(confPath(root));

/** A value php-fpm's ini parser reads back as written: no quotes, newlines or `;`, checked by the caller's validation too. */
function iniValue(value: string | number): string {
  const s = String(value);
  if (/["\n\r;=]/.test(s) || s.length > 4096) throw new Error(`refusing a php-fpm value ${JSON.stringify(s)}`);
  return s;
}

function config(site: FpmSite): string {
  const tmp = path.join(site.root, 'tmp');
  const values: Record<string, string | number> = {
    ...site.settings,
    open_basedir: `${site.root}/:${site.platformDir}/:/usr/share/php/:/usr/share/zoneinfo/`,
    upload_tmp_dir: tmp,
    sys_temp_dir: tmp,
    'session.save_path': tmp,
    // Written by the pool's workers, as the site: in its own private directory.
    error_log: path.join(site.root, 'private', 'php.log'),
    disable_functions: SITE_DISABLED_FUNCTIONS,
    allow_url_include: 'Off',
    expose_php: 'Off',
    ...site.ini,
  };
  return [
    '; Written by providers/wordpress/php-fpm.ts; edits are overwritten.',
    '[global]',
    `pid = ${path.join(site.root, 'php', 'php-fpm.pid')}`,
    `error_log = ${path.join(site.root, 'logs', 'php-fpm.log')}`,
    'daemonize = no',
    'process_control_timeout = 10s',
    '',
    '[site]',
    ...(site.account ? [`user = ${site.account}`, `group = ${site.account}`] : []),
    `listen = ${fpmSocket(site.root)}`,
    ...(site.webAccount ? [`listen.owner = ${site.webAccount}`, `listen.group = ${site.webAccount}`, 'listen.mode = 0600'] : ['listen.mode = 0600']),
    'pm = ondemand',
    'pm.max_children = 5',
    'pm.process_idle_timeout = 30s',
    'pm.max_requests = 500',
    'catch_workers_output = yes',
    'clear_env = yes',
    'security.limit_extensions = .php',
    ...Object.entries(values).map(([k, v]) => `php_admin_value[${k}] = ${iniValue(v)}`),
    'php_admin_flag[log_errors] = on',
    'php_admin_flag[display_errors] = off',
    '',
  ].join('\n');
}

/** Whether the site's pool accepts a connection on its socket. */
function socketAnswers(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const c = net.connect(socket);
    const done = (ok: boolean) => {
      c.destroy();
      resolve(ok);
    };
    c.setTimeout(1_000, () => done(false));
    c.once('connect', () => done(true));
    c.once('error', () => done(false));
  });
}

/** The master of one site. */
export class SitePhpFpm {
  constructor(private readonly site: FpmSite) {}

  private get root() {
    return this.site.root;
  }

  async running(): Promise<boolean> {
    const pid = await readPidFile(path.join(this.root, 'php', 'php-fpm.pid'));
    return pid !== null && (await processAlive(pid, isOurs(this.root))) && (await socketAnswers(fpmSocket(this.root)));
  }

  /**
   * Writes the configuration and makes the master run it: started when none runs, else reloaded
   * gracefully (SIGUSR2) when `reload`; a master of another PHP version is replaced.
   */
  async apply(opts: { reload: boolean }): Promise<void> {
    mkdirSync(path.join(this.root, 'php'), { recursive: true, mode: 0o755 });
    await withFileLock(path.join(this.root, 'php', 'start.lock'), async () => {
      mkdirSync(path.join(this.root, 'run'), { recursive: true, mode: 0o755 });
      const file = confPath(this.root);
      writeFileSync(`${file}.partial`, config(this.site), { mode: 0o644 });
      renameSync(`${file}.partial`, file);
      const pidfile = path.join(this.root, 'php', 'php-fpm.pid');
      const pid = await readPidFile(pidfile);
      const binary = fpmBinary(this.site.version);
      const alive = pid !== null && (await processAlive(pid, isOurs(this.root)));
      const sameVersion = alive && (await readFileSafe(`/proc/${pid}/exe`)) === realpathSync(binary);
      if (alive && sameVersion) {
        if (opts.reload) {
          process.kill(pid, 'SIGUSR2');
          // The master answers again on its socket once it has re-executed; one that does not failed its reload.
          const answered = await waitFor(() => socketAnswers(fpmSocket(this.root)), 10_000, 50);
          if (!answered)
            throw new Error(`php-fpm of ${path.basename(this.root)} did not come back from its reload; see ${path.join(this.root, 'logs', 'php-fpm.log')}`);
        }
        return;
      }
      if (alive) await stopProcess(pid, isOurs(this.root), 10_000);
      rmSync(fpmSocket(this.root), { force: true });
      const started = await spawnDetached(binary, ['--nodaemonize', '--fpm-config', file], {
        cwd: this.root,
        outputFile: path.join(this.root, 'logs', 'php-fpm.out'),
        env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      });
      const ok = await waitFor(async () => !(await processAlive(started, isOurs(this.root))) || (await socketAnswers(fpmSocket(this.root))), 15_000, 25);
      if (!ok || !(await processAlive(started, isOurs(this.root)))) {
        throw new Error(`php-fpm of ${path.basename(this.root)} did not start; see ${path.join(this.root, 'logs', 'php-fpm.log')}`);
      }
    });
  }

  async stop(): Promise<void> {
    const pidfile = path.join(this.root, 'php', 'php-fpm.pid');
    const pid = await readPidFile(pidfile);
    if (pid !== null) await stopProcess(pid, isOurs(this.root), 10_000);
    rmSync(pidfile, { force: true });
  }
}

async function readFileSafe(link: string): Promise<string | null> {
  try {
    const { readlink } = await import('node:fs/promises');
    return await readlink(link);
  } catch {
    return null;
  }
}
