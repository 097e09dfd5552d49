import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { BackendRefusedError } from '../errors';
import {
  adoptOrStart,
  awaitDaemonReady,
  findBinary,
  freeLoopbackPort,
  joinHostPort,
  liveDaemon,
  LocalServerError,
  makeDirectory,
  probeBind,
  readJsonFile,
  readPidFile,
  run,
  spawnDetached,
  stopProcess,
  waitFor,
  withFileLock,
} from '../local-server';

/**
 * The host's nginx for hosted WordPress sites: one per data directory, listening on one address and
 * port, serving every site placed here by its `Host` (one `server` block per site, written from
 * validated host names only), passing PHP to the site's own php-fpm socket, and refusing any other
 * Host with 404. The master runs as root (when this process is) and its workers as the web account,
 * which is a member of each site's group, nothing more: it reads the sites' files through the group.
 *
 * Every configuration change ends with a reload that is awaited: the default server answers
 * `/_cloud/generation` with the number of the configuration it runs, so a caller knows its change
 * serves before it answers (nginx's own reload is asynchronous).
 *
 * The access log format holds the requested path without its query string (`$request_uri` up to
 * its `?`): autologin tokens travel in the query and must never reach a log.
 */
const INSTALL_FIX = 'run bash scripts/install/wordpress.sh (as root): it installs nginx, php8.2-fpm and wordpress from Debian';
const CONFIG = 'nginx.conf';
const PIDFILE = 'nginx.pid';
const SETTINGS = 'server.json';
const LOGFILE = 'nginx.log';
const GENERATION = 'generation';

/** A host name as a site's `server_name` may hold it: lower-case DNS labels, nothing nginx could read as syntax. */
export const SERVER_NAME = /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/;

export interface NginxSettings {
  bindAddress: string;
  port: number;
}

export interface NginxSite {
  /** `svc-12`: the file name of its server block. */
  key: string;
  hosts: string[];
  /** The site's document root (`<site>/public`). */
  root: string;
  /** The site's php-fpm socket. */
  fpmSocket: string;
  /** Where its access and error logs go. */
  logDir: string;
  /** The CDN stand-in's path prefix for the site's uploads (`/_cdn/svc_12`), or null when off. */
  cdnPrefix: string | null;
}

export interface NginxOptions {
  dataDir: string;
  bindAddress: string;
  /** The port asked for at the first start (0: any free one); later starts keep the stored one. */
  port: number;
  /** The account the workers run as (root only), null: this process's. */
  webAccount: string | null;
}

const isOurs =
  (dataDir: string) =>
  (args: string[]): boolean =>
    args.join(' ').includes(path.join(dataDir, CONFIG));

export function nginxBinary(): string {
  const found = findBinary('nginx', '/usr/sbin/nginx');
  if (!found) throw new LocalServerError('nginx is missing: hosted WordPress sites are served by nginx', INSTALL_FIX);
  return found;
}

const quoted = (p: string) => {
  if (/["\\\n;{}$]/.test(p)) throw new Error(`refusing a path nginx could misread: ${JSON.stringify(p)}`);
  return `"${p}"`;
};

/** A path where nginx takes no quotes (`unix:` upstreams keep them as part of the path): plain characters only. */
const bare = (p: string) => {
  if (!/^[A-Za-z0-9_./-]+$/.test(p)) throw new Error(`refusing a socket path nginx could misread: ${JSON.stringify(p)}`);
  return p;
};

/** nginx would not take a configuration (its test failed, or two sites claim one name). */
export class NginxRefused extends Error {
  constructor(
    message: string,
    /** Written for customers. */
    readonly customerMessage: string,
  ) {
    super(message);
    this.name = 'NginxRefused';
  }
}

function readOrNull(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return null;
  }
}

/** The server block of one site. Host names are checked again here: a bad one never reaches the file. */
export function siteBlock(settings: NginxSettings, site: NginxSite): string {
  for (const host of site.hosts) if (!SERVER_NAME.test(host)) throw new Error(`refusing server name ${JSON.stringify(host)}`);
  if (!/^svc-\d+$/.test(site.key)) throw new Error(`refusing site key ${JSON.stringify(site.key)}`);
  return [
    `# ${site.key}: written by providers/wordpress/nginx.ts; edits are overwritten.`,
    'server {',
    `  listen ${joinHostPort(settings.bindAddress, settings.port)};`,
    `  server_name ${site.hosts.join(' ')};`,
    `  root ${quoted(site.root)};`,
    '  index index.php;',
    `  access_log ${quoted(path.join(site.logDir, 'access.log'))} cloud;`,
    `  error_log ${quoted(path.join(site.logDir, 'error.log'))} warn;`,
    '  location ~ /\\. { deny all; }',
    '  location ~* ^/wp-content/uploads/.*\\.(php|phar|phtml|pht)$ { deny all; }',
    '  location / { try_files $uri $uri/ /index.php?$args; }',
    '  location ~ \\.php$ {',
    '    try_files $uri =404;',
    '    include /etc/nginx/fastcgi_params;',
    '    fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;',
    '    fastcgi_param HTTP_PROXY "";',
    '    fastcgi_read_timeout 300s;',
    `    fastcgi_pass unix:${bare(site.fpmSocket)};`,
    '  }',
    '}',
    '',
  ].join('\n');
}

/**
 * The CDN stand-in's location for one site, inside the default server: its uploads, static only,
 * through a cache of its own (a real one, so a purge is observable: `X-Cache-Status` MISS, then HIT,
 * MISS again after `purgeCdn`). A miss is fetched from the site's own server block on this nginx
 * with the site's Host; cookies are neither sent nor kept.
 */
function cdnBlock(settings: NginxSettings, site: NginxSite): string {
  if (!site.cdnPrefix) return '';
  if (!/^\/_cdn\/svc_\d+$/.test(site.cdnPrefix)) throw new Error(`refusing CDN prefix ${site.cdnPrefix}`);
  const host = site.hosts[0];
  if (!host || !SERVER_NAME.test(host)) throw new Error(`refusing CDN origin host ${JSON.stringify(host)}`);
  return [
    `location ${site.cdnPrefix}/wp-content/uploads/ {`,
    '  location ~* \\.(php|phar|phtml|pht)$ { deny all; }',
    `  proxy_pass http://${joinHostPort(settings.bindAddress, settings.port)}/wp-content/uploads/;`,
    `  proxy_set_header Host ${host};`,
    '  proxy_set_header Cookie "";',
    '  proxy_set_header Authorization "";',
    `  proxy_cache ${cdnZone(site.key)};`,
    '  proxy_cache_key $uri;',
    '  proxy_cache_valid 200 301 302 1d;',
    '  proxy_cache_valid 404 1m;',
    '  proxy_ignore_headers Set-Cookie Cache-Control Expires;',
    '  proxy_hide_header Set-Cookie;',
    '  proxy_hide_header Cache-Control;',
    '  add_header X-Cache-Status $upstream_cache_status always;',
    '  add_header Cache-Control "public, max-age=86400";',
    '}',
    '',
  ].join('\n');
}

/** The CDN cache's zone of a site (`cdn_svc_12`). */
const cdnZone = (key: string) => `cdn_${key.replace('-', '_')}`;

/** The http-level part of a site's CDN: its cache, in `cacheDir` (emptied by `purgeCdn`). */
function cdnCachePath(site: NginxSite, cacheDir: string): string {
  if (!site.cdnPrefix) return '';
  return `proxy_cache_path ${quoted(cacheDir)} levels=1:2 keys_zone=${cdnZone(site.key)}:1m max_size=512m inactive=7d use_temp_path=off;\n`;
}

function mainConfig(dataDir: string, settings: NginxSettings, webAccount: string | null, generation: number): string {
  const tmp = path.join(dataDir, 'tmp');
  return [
    '# Written by providers/wordpress/nginx.ts; edits are overwritten.',
    ...(webAccount ? [`user ${webAccount} ${webAccount};`] : []),
    'worker_processes 2;',
    `pid ${quoted(path.join(dataDir, PIDFILE))};`,
    `error_log ${quoted(path.join(dataDir, 'error.log'))} warn;`,
    'events { worker_connections 1024; }',
    'http {',
    '  include /etc/nginx/mime.types;',
    '  default_type application/octet-stream;',
    '  sendfile on;',
    '  keepalive_timeout 30;',
    '  server_tokens off;',
    // Long host names (labels of 63 characters, names of 253) must not make the configuration fail.
    '  server_names_hash_bucket_size 256;',
    '  server_names_hash_max_size 16384;',
    // A link in a site's files is followed only to a file of the link's owner: a site cannot link
    // to another site's wp-content, which the web server's group may read.
    '  disable_symlinks if_not_owner;',
    '  client_max_body_size 256m;',
    `  client_body_temp_path ${quoted(path.join(tmp, 'body'))};`,
    `  fastcgi_temp_path ${quoted(path.join(tmp, 'fastcgi'))};`,
    `  proxy_temp_path ${quoted(path.join(tmp, 'proxy'))};`,
    `  uwsgi_temp_path ${quoted(path.join(tmp, 'uwsgi'))};`,
    `  scgi_temp_path ${quoted(path.join(tmp, 'scgi'))};`,
    // The path the client asked for without the query string: autologin tokens never reach a log.
    // Not `$uri`: after WordPress's `try_files ... /index.php` it is `/index.php` for every page.
    '  map $request_uri $cloud_log_path { "~^(?<cloud_path>[^?]*)" $cloud_path; default "-"; }',
    `  log_format cloud '$time_iso8601 $status $request_method $cloud_log_path $body_bytes_sent $request_time "$http_user_agent"';`,
    '  access_log off;',
    '  server {',
    `    listen ${joinHostPort(settings.bindAddress, settings.port)} default_server;`,
    '    server_name _;',
    `    location = /_cloud/generation { default_type text/plain; return 200 "${generation}"; }`,
    `    include ${quoted(path.join(dataDir, 'cdn', '*.conf'))};`,
    '    location / { return 404; }',
    '  }',
    `  include ${quoted(path.join(dataDir, 'sites', '*.conf'))};`,
    '}',
    '',
  ].join('\n');
}

function writeAtomic(file: string, content: string, mode = 0o644): void {
  writeFileSync(`${file}.partial`, content, { mode });
  renameSync(`${file}.partial`, file);
}

/** The data directory's nginx. */
export class WordpressNginx {
  constructor(private readonly options: NginxOptions) {}

  private get dir(): string {
    return path.resolve(this.options.dataDir, 'nginx');
  }

  /** Where it listens (chosen at the first start), null before. */
  settings(): NginxSettings | null {
    return readJsonFile<NginxSettings>(path.join(this.dir, SETTINGS));
  }

  /** Running and answering; started (once, under a lock) otherwise. */
  async ensure(): Promise<NginxSettings> {
    const dir = this.dir;
    const found = async () => {
      const live = await liveDaemon<NginxSettings>(dir, { pidfile: PIDFILE, settingsFile: SETTINGS }, isOurs(dir));
      return live && (await this.generationServed(live.settings)) !== null ? live.settings : null;
    };
    return adoptOrStart({
      dataDir: dir,
      find: found,
      prepare: async () => {
        const binary = nginxBinary();
        await makeDirectory(dir, 0o755);
        for (const sub of ['sites', 'cdn', 'tmp']) mkdirSync(path.join(dir, sub), { recursive: true, mode: 0o755 });
        return binary;
      },
      stop: () => this.stop(),
      launch: async (binary) => {
        let settings = this.settings();
        if (!settings) {
          const asked = this.options.port;
          if (asked !== 0 && (await probeBind(this.options.bindAddress, asked)) !== 'free') {
            throw new LocalServerError(
              `the WordPress HTTP port ${joinHostPort(this.options.bindAddress, asked)} is taken`,
              'set WORDPRESS_HTTP_PORT to a free port (0 picks one)',
            );
          }
          settings = { bindAddress: this.options.bindAddress, port: asked || (await freeLoopbackPort(this.options.bindAddress)) };
          writeAtomic(path.join(dir, SETTINGS), JSON.stringify(settings, null, 2));
        }
        const generation = this.nextGeneration();
        writeAtomic(path.join(dir, CONFIG), mainConfig(dir, settings, this.options.webAccount, generation));
        const logFile = path.join(dir, LOGFILE);
        const pid = await spawnDetached(binary, ['-e', path.join(dir, 'error.log'), '-c', path.join(dir, CONFIG), '-g', 'daemon off;'], {
          cwd: dir,
          outputFile: logFile,
        });
        const s = settings;
        await awaitDaemonReady({
          what: 'nginx (WordPress sites)',
          pid,
          isOurs: isOurs(dir),
          answers: async () => (await this.generationServed(s)) === generation,
          intervalMs: 25,
          logFile: path.join(dir, 'error.log'),
          stop: () => stopProcess(pid, isOurs(dir)),
        });
        return settings;
      },
    });
  }

  private nextGeneration(): number {
    const file = path.join(this.dir, GENERATION);
    const current = Number(readJsonFile<number>(file) ?? 0);
    const next = current + 1;
    writeAtomic(file, String(next));
    return next;
  }

  /** Whether it answers (any configuration). */
  async answers(settings: NginxSettings): Promise<boolean> {
    return (await this.generationServed(settings)) !== null;
  }

  /** The configuration generation the running nginx serves (null: no answer). */
  private generationServed(settings: NginxSettings): Promise<number | null> {
    return new Promise((resolve) => {
      const req = http.get(
        { host: settings.bindAddress, port: settings.port, path: '/_cloud/generation', headers: { host: 'cloud-generation.invalid' }, timeout: 1_000 },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (body += c));
          res.on('end', () => resolve(res.statusCode === 200 && /^\d+$/.test(body) ? Number(body) : null));
        },
      );
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(null));
    });
  }

  /**
   * Writes (or, with null, removes) one site's server block and CDN location, then reloads and
   * waits until the new configuration serves. A configuration nginx refuses is put back as it was.
   */
  async putSite(key: string, site: NginxSite | null): Promise<void> {
    const settings = await this.ensure();
    await withFileLock(path.join(this.dir, 'config.lock'), async () => {
      const siteFile = path.join(this.dir, 'sites', `${key}.conf`);
      const cdnFile = path.join(this.dir, 'cdn', `${key}.conf`);
      const before = { site: readOrNull(siteFile), cdn: readOrNull(cdnFile) };
      const putBack = () => {
        for (const [file, content] of [
          [siteFile, before.site],
          [cdnFile, before.cdn],
        ] as const) {
          if (content === null) rmSync(file, { force: true });
          else writeAtomic(file, content);
        }
      };
      if (site) {
        if (site.cdnPrefix) mkdirSync(path.join(this.dir, 'cdn-cache'), { recursive: true, mode: 0o755 });
        writeAtomic(siteFile, cdnCachePath(site, this.cdnCacheDir(key)) + siteBlock(settings, site));
        if (site.cdnPrefix) writeAtomic(cdnFile, cdnBlock(settings, site));
        else rmSync(cdnFile, { force: true });
      } else {
        rmSync(siteFile, { force: true });
        rmSync(cdnFile, { force: true });
      }
      try {
        await this.reload(settings);
      } catch (err) {
        // The change is not made: every other site keeps being served by the configuration before it.
        putBack();
        if (err instanceof NginxRefused) throw new BackendRefusedError('wordpress', err.customerMessage, 'validation_failed', 'domain');
        throw err;
      }
      // A CDN turned off forgets what it cached: turned on again, it starts empty.
      if (!site?.cdnPrefix) rmSync(this.cdnCacheDir(key), { recursive: true, force: true });
    });
  }

  /** Where a site's CDN cache lives (`<nginx>/cdn-cache/svc-12`). */
  private cdnCacheDir(key: string): string {
    if (!/^svc-\d+$/.test(key)) throw new Error(`refusing site key ${JSON.stringify(key)}`);
    return path.join(this.dir, 'cdn-cache', key);
  }

  /**
   * Empties a site's CDN cache: its files are deleted, so every next request is a MISS fetched
   * from the site again (nginx treats a cached entry whose file is gone as a miss). Absent is fine.
   */
  purgeCdn(key: string): void {
    const dir = this.cdnCacheDir(key);
    if (!existsSync(dir)) return;
    for (const entry of readdirSync(dir)) rmSync(path.join(dir, entry), { recursive: true, force: true });
  }

  /** The keys of the sites it has a server block for. */
  siteKeys(): string[] {
    const dir = path.join(this.dir, 'sites');
    return existsSync(dir) ? readdirSync(dir).flatMap((f) => (/^svc-\d+\.conf$/.test(f) ? [f.slice(0, -5)] : [])) : [];
  }

  /** Reloads (new workers: a new group membership of the web account counts) and waits until it serves. */
  async reload(settings?: NginxSettings): Promise<void> {
    const s = settings ?? (await this.ensure());
    const generation = this.nextGeneration();
    writeAtomic(path.join(this.dir, CONFIG), mainConfig(this.dir, s, this.options.webAccount, generation));
    let checked: { stderr: string };
    try {
      checked = await run(nginxBinary(), ['-t', '-e', path.join(this.dir, 'error.log'), '-c', path.join(this.dir, CONFIG)]);
    } catch (err) {
      throw new NginxRefused(`nginx refused the WordPress configuration: ${(err as Error).message}`, 'The web server cannot take this host name.');
    }
    // A name another site serves is only a warning to nginx (the first file wins): refused here.
    const conflict = /conflicting server name "([^"]*)"/.exec(checked.stderr);
    if (conflict) throw new NginxRefused(`nginx: ${conflict[0]}`, `The host name ${conflict[1]} is served by another site.`);
    const pid = await readPidFile(path.join(this.dir, PIDFILE));
    if (pid === null) throw new Error('nginx (WordPress sites) has no pidfile');
    process.kill(pid, 'SIGHUP');
    const ok = await waitFor(async () => (await this.generationServed(s)) === generation, 10_000, 20);
    if (!ok) throw new Error('nginx (WordPress sites) did not load its new configuration within 10 s');
  }

  async stop(): Promise<void> {
    const pidfile = path.join(this.dir, PIDFILE);
    const pid = await readPidFile(pidfile);
    if (pid !== null) await stopProcess(pid, isOurs(this.dir));
    rmSync(pidfile, { force: true });
  }
}
