import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { promises as fs, mkdtempSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { crc32 } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import { freeLoopbackPort, waitFor } from '../providers/local-server';
import { accountNameFor, ensureAccount, isolatedAccounts, removeAccount, type OsAccount } from '../providers/os-accounts';
import { runHelper, type HelperCommand, type HelperCommands } from '../providers/wordpress/helper';
import { LocalPluginDirectory } from '../providers/wordpress/plugin-directory';
import {
  coreVersionOf,
  ensureSecrets,
  layoutSite,
  prepareCore,
  sitePaths,
  switchCore,
  writeConstants,
  type LayoutSiteOptions,
} from '../providers/wordpress/site-files';

/**
 * The WordPress-internal side of the real wordpress backend (providers/wordpress/): a site laid out
 * by site-files.ts on real WordPress 6.1 (Debian's), its database on a real MariaDB instance of the
 * DBaaS adapter (TLS required, verified against the instance's CA), driven through the PHP helper
 * as the site's own OS account (when root). The must-use plugin's HTTP side is checked through
 * PHP's built-in server.
 */

const URL_HOST = 'helper-test.example';
const DB_PASSWORD = `Site-${randomBytes(9).toString('hex')}`;

let tmp: string;
let db: DbInstancesAdapter;
let account: OsAccount | null = null;
let dataDir: string;
let site: string;
let directory: LocalPluginDirectory;
let layout: LayoutSiteOptions;

const helper = <C extends HelperCommand>(command: C, args: HelperCommands[C]['args']) => runHelper({ siteRoot: site, dataDir, account }, command, args);

async function rejection(p: Promise<unknown>): Promise<Error> {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a rejection');
}

/** A zip with stored entries, written by hand so that it can hold what no zip tool would write. */
async function writeZip(file: string, entries: Array<{ name: string; data?: string; mode?: number }>): Promise<void> {
  const locals: Buffer[] = [];
  const centrals: Buffer[] = [];
  let offset = 0;
  for (const entry of entries) {
    const name = Buffer.from(entry.name, 'utf8');
    const data = Buffer.from(entry.data ?? '', 'utf8');
    const crc = crc32(data) >>> 0;
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(name.length, 26);
    const central = Buffer.alloc(46);
    central.writeUInt32LE(0x02014b50, 0);
    central.writeUInt16LE((3 << 8) | 20, 4); // made by: Unix
    central.writeUInt16LE(20, 6);
    central.writeUInt32LE(crc, 16);
    central.writeUInt32LE(data.length, 20);
    central.writeUInt32LE(data.length, 24);
    central.writeUInt16LE(name.length, 28);
    central.writeUInt32LE(((entry.mode ?? (entry.name.endsWith('/') ? 0o40755 : 0o100644)) << 16) >>> 0, 38);
    central.writeUInt32LE(offset, 42);
    locals.push(local, name, data);
    centrals.push(central, name);
    offset += local.length + name.length + data.length;
  }
  const cd = Buffer.concat(centrals);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(entries.length, 8);
  end.writeUInt16LE(entries.length, 10);
  end.writeUInt32LE(cd.length, 12);
  end.writeUInt32LE(offset, 16);
  await fs.writeFile(file, Buffer.concat([...locals, cd, end]), { mode: 0o644 });
}

/** A mail relay that accepts everything and remembers the recipients. */
async function fakeRelay(): Promise<{ port: number; recipients: string[]; close(): Promise<void> }> {
  const recipients: string[] = [];
  const server = net.createServer((socket) => {
    let buffer = '';
    let inData = false;
    socket.write('220 relay.test ESMTP\r\n');
    socket.on('data', (chunk) => {
      buffer += chunk.toString('utf8');
      let nl: number;
      while ((nl = buffer.indexOf('\r\n')) !== -1) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 2);
        if (inData) {
          if (line === '.') {
            inData = false;
            socket.write('250 queued\r\n');
          }
          continue;
        }
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') socket.write('250 relay.test\r\n');
        else if (verb === 'RCPT') {
          recipients.push(line.replace(/^RCPT TO:\s*/i, ''));
          socket.write('250 ok\r\n');
        } else if (verb === 'DATA') {
          inData = true;
          socket.write('354 go on\r\n');
        } else if (verb === 'QUIT') socket.end('221 bye\r\n');
        else socket.write('250 ok\r\n');
      }
    });
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    recipients,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** PHP's built-in web server on the site's public/, as the site's account (what php-fpm will do). */
async function startWebServer(): Promise<{ port: number; child: ChildProcess }> {
  const port = await freeLoopbackPort();
  const child = spawn(
    'php8.2',
    ['-d', `openssl.cafile=${sitePaths(site).dbCa}`, '-d', 'display_errors=stderr', '-S', `127.0.0.1:${port}`, '-t', sitePaths(site).public],
    {
      ...(account ? { uid: account.uid, gid: account.gid } : {}),
      cwd: site,
      env: { PATH: '/usr/bin:/bin', PHP_CLI_SERVER_WORKERS: '4' },
      stdio: 'ignore',
    },
  );
  const up = await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const socket = net.connect(port, '127.0.0.1', () => {
          socket.end();
          resolve(true);
        });
        socket.on('error', () => resolve(false));
      }),
    10_000,
  );
  if (!up) throw new Error('php -S did not start');
  return { port, child };
}

function get(port: number, pathAndQuery: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: pathAndQuery, headers: { Host: URL_HOST } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString('utf8')));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

beforeAll(async () => {
  tmp = mkdtempSync(path.join(os.tmpdir(), 'wp-helper-'));
  await fs.chmod(tmp, 0o711); // the site's account and the instance's pass through
  db = new DbInstancesAdapter({ rootDir: path.join(tmp, 'db'), pollIntervalMs: 100 });
  dataDir = path.join(tmp, 'wp');
  site = path.join(dataDir, 'sites', 'site-1');
  directory = new LocalPluginDirectory(path.join(dataDir, 'plugin-cache'));
  const [, , acct] = await Promise.all([
    db.createInstance({ name: 'wp', serviceId: 1, engine: 'mysql', adminUsername: 'admin', adminPassword: 'Admin-Passw0rd-for-tests' }),
    prepareCore(dataDir),
    isolatedAccounts() ? ensureAccount(accountNameFor('db', tmp, 'wp-site'), { purpose: 'WordPress helper test site', dataDir: tmp }) : null,
  ]);
  account = acct;
  await db.createUser('wp', { username: 'site1', password: DB_PASSWORD });
  await db.createDatabase('wp', { name: 'site1', owner: 'site1' });
  const info = await db.connectionInfo('wp');
  await fs.mkdir(path.join(dataDir, 'sites'), { recursive: true, mode: 0o711 });
  layout = {
    dataDir,
    root: site,
    coreVersion: '6.1.9',
    account,
    webGroupGid: isolatedAccounts() ? 33 : null,
    dbCaCertificate: info.caCertificate,
    site: { db: { host: info.host, port: info.port, name: 'site1', user: 'site1', password: DB_PASSWORD }, smtp: null, hostname: URL_HOST },
  };
  await layoutSite(layout);
});

afterAll(async () => {
  if (db) for (const name of await db.instanceNames().catch(() => [])) await db.destroyInstance(name).catch(() => undefined);
  if (account) await removeAccount(account.name);
  if (tmp) await fs.rm(tmp, { recursive: true, force: true });
});

describe('WordPress sites: files, helper and must-use plugin on real PHP and MariaDB', () => {
  it("lays the site out: core root-owned and hard-linked from the release, wp-content the account's, configuration readable by it alone", async () => {
    const p = sitePaths(site);
    const [core, pub, content, config, secrets] = await Promise.all([
      fs.stat(path.join(dataDir, 'core', '6.1.9', 'wp-load.php')),
      fs.stat(path.join(p.public, 'wp-load.php')),
      fs.stat(p.wpContent),
      fs.stat(p.siteJson),
      fs.stat(p.secretsJson),
    ]);
    expect(pub.ino).toBe(core.ino);
    expect(pub.mode & 0o022).toBe(0);
    expect(config.mode & 0o777).toBe(0o640);
    expect(secrets.mode & 0o777).toBe(0o640);
    await expect(fs.access(path.join(p.public, 'wp-config.php'))).rejects.toThrow();
    expect(await coreVersionOf(site)).toBe('6.1.9');
    if (account) {
      expect(pub.uid).toBe(0);
      expect(content.uid).toBe(account.uid);
      expect(content.gid).toBe(33);
      expect(content.mode & 0o7777).toBe(0o2750);
      expect(config.uid).toBe(0);
      expect(config.gid).toBe(account.gid);
    }
    expect((await fs.readdir(p.themes)).sort()).toEqual(['twentytwentythree', 'twentytwentytwo']);
    // A second layout repairs and keeps everything (salts included).
    const before = JSON.parse(await fs.readFile(p.siteJson, 'utf8')) as { salts: Record<string, string> };
    await fs.writeFile(path.join(p.uploads, 'kept.txt'), 'mine');
    await fs.rm(path.join(p.public, 'wp-includes', 'version.php'));
    await layoutSite(layout);
    expect(JSON.parse(await fs.readFile(p.siteJson, 'utf8'))).toMatchObject({ salts: before.salts });
    expect(await fs.readFile(path.join(p.uploads, 'kept.txt'), 'utf8')).toBe('mine');
    expect(await coreVersionOf(site)).toBe('6.1.9');
  });

  it('installs WordPress once (over TLS to MariaDB) and reports its status', async () => {
    expect(await helper('status', {})).toMatchObject({ installed: false, wp_version: '6.1.9', db_version: null });
    expect(await helper('install', { title: 'Helper Test', admin_email: 'owner@example.com', url: `http://${URL_HOST}` })).toMatchObject({ installed: true });
    expect(await helper('install', { title: 'Other', admin_email: 'owner@example.com', url: `http://${URL_HOST}` })).toEqual({ installed: false });
    expect(await helper('status', {})).toMatchObject({ installed: true, wp_version: '6.1.9', db_version: 53496, recipe: null });
    expect(await helper('option.get', { name: 'blogname' })).toEqual({ exists: true, value: 'Helper Test' });
    expect(await helper('option.get', { name: 'home' })).toEqual({ exists: true, value: `http://${URL_HOST}` });
    expect(await helper('option.get', { name: 'no_such_option' })).toEqual({ exists: false, value: null });
    await helper('options.update', { options: { cloud_recipe: { name: 'r', version: '1.0.0', applied_at: 'x' }, blogdescription: 'Tagline' } });
    expect((await helper('status', {})).recipe).toEqual({ name: 'r', version: '1.0.0', applied_at: 'x' });
    const refused = await rejection(helper('options.update', { options: { cloud_autologin: 'x' } }));
    expect(refused).toBeInstanceOf(BackendRefusedError);
    expect((refused as BackendRefusedError).param).toBe('options.cloud_autologin');
  });

  it('lists akismet inactive, installs cloud-hello 1.0.0 from the directory, then 1.1.0 over it', async () => {
    expect(await helper('plugins.list', {})).toEqual([{ slug: 'akismet', name: 'Akismet Anti-Spam', version: '5.0.2', active: false }]);
    expect(await directory.plugin('cloud-hello')).toEqual({ slug: 'cloud-hello', name: 'Cloud Hello', latestVersion: '1.1.0', versions: ['1.0.0', '1.1.0'] });
    expect((await directory.search('AKIS')).map((p) => p.slug)).toEqual(['akismet']);
    expect(await directory.plugin('nope')).toBeNull();
    expect(await rejection(directory.zip('nope', '1.0.0'))).toMatchObject({ name: 'BackendRefusedError', param: 'slug' });
    expect(await rejection(directory.zip('cloud-hello', '9.9.9'))).toMatchObject({ name: 'BackendRefusedError', param: 'version' });

    const v1 = await directory.zip('cloud-hello', '1.0.0');
    expect(await directory.zip('cloud-hello', '1.0.0')).toBe(v1);
    expect(await helper('plugin.install', { slug: 'cloud-hello', zip: v1, activate: true })).toEqual({
      slug: 'cloud-hello',
      name: 'Cloud Hello',
      version: '1.0.0',
      active: true,
    });
    const main = path.join(sitePaths(site).plugins, 'cloud-hello', 'cloud-hello.php');
    if (account) expect((await fs.stat(main)).uid).toBe(account.uid);
    expect(await helper('plugin.install', { slug: 'cloud-hello', zip: await directory.zip('cloud-hello', '1.1.0'), activate: false })).toEqual({
      slug: 'cloud-hello',
      name: 'Cloud Hello',
      version: '1.1.0',
      active: true,
    });
    expect(await fs.readFile(main, 'utf8')).toContain("CLOUD_HELLO_VERSION = '1.1.0'");
    expect(await helper('plugin.deactivate', { slug: 'akismet' })).toMatchObject({ slug: 'akismet', active: false });
    expect(await rejection(helper('plugin.activate', { slug: 'nope' }))).toBeInstanceOf(BackendGoneError);
  });

  it('refuses hostile zips before writing anything', async () => {
    const p = sitePaths(site);
    const zips = path.join(tmp, 'zips');
    await fs.mkdir(zips, { mode: 0o755 });
    const cases: Array<{ file: string; param: string; entries: Array<{ name: string; data?: string; mode?: number }> }> = [
      { file: 'dotdot.zip', param: 'zip', entries: [{ name: 'cloud-hello/' }, { name: 'cloud-hello/../../evil.php', data: '<?php // evil' }] },
      { file: 'parent.zip', param: 'zip', entries: [{ name: '../evil.php', data: '<?php // evil' }] },
      { file: 'absolute.zip', param: 'zip', entries: [{ name: `${p.wpContent}/evil.php`, data: '<?php // evil' }] },
      { file: 'top.zip', param: 'slug', entries: [{ name: 'other/other.php', data: '<?php /* Plugin Name: Other */' }] },
      {
        file: 'link.zip',
        param: 'zip',
        entries: [
          { name: 'cloud-hello/cloud-hello.php', data: '<?php /* Plugin Name: X */' },
          { name: 'cloud-hello/link', data: '/etc/passwd', mode: 0o120777 },
        ],
      },
      { file: 'noplugin.zip', param: 'zip', entries: [{ name: 'cloud-hello/readme.txt', data: 'no plugin here' }] },
    ];
    for (const c of cases) {
      await writeZip(path.join(zips, c.file), c.entries);
      const err = await rejection(helper('plugin.install', { slug: 'cloud-hello', zip: path.join(zips, c.file), activate: true }));
      expect(err, c.file).toBeInstanceOf(BackendRefusedError);
      expect((err as BackendRefusedError).param, c.file).toBe(c.param);
    }
    for (const dir of [p.wpContent, p.plugins, p.public, site, path.dirname(site)]) await expect(fs.access(path.join(dir, 'evil.php'))).rejects.toThrow();
    expect((await fs.readdir(path.join(p.wpContent, 'upgrade'))).filter((n) => n.startsWith('cloud-'))).toEqual([]);
    expect((await fs.readdir(path.join(p.plugins, 'cloud-hello'))).sort()).toEqual(['cloud-hello.php', 'readme.txt']);
    expect(await helper('plugins.list', {})).toContainEqual({ slug: 'cloud-hello', name: 'Cloud Hello', version: '1.1.0', active: true });
  });

  it('installs a zip made on macOS: its `./` entries and `__MACOSX/` are skipped, never extracted', async () => {
    const p = sitePaths(site);
    const file = path.join(tmp, 'mac-made.zip');
    await writeZip(file, [
      { name: './' },
      { name: './mac-made/' },
      { name: './mac-made/mac-made.php', data: '<?php /* Plugin Name: Mac Made\nVersion: 2.0.0 */' },
      { name: '__MACOSX/' },
      { name: '__MACOSX/mac-made/._mac-made.php', data: 'resource fork' },
      { name: '__MACOSX/._evil.php', data: '<?php // evil' },
    ]);
    expect(await helper('plugin.install', { slug: 'mac-made', zip: file, activate: false })).toEqual({
      slug: 'mac-made',
      name: 'Mac Made',
      version: '2.0.0',
      active: false,
    });
    expect(await fs.readdir(path.join(p.plugins, 'mac-made'))).toEqual(['mac-made.php']);
    for (const dir of [p.plugins, p.wpContent]) await expect(fs.access(path.join(dir, '__MACOSX'))).rejects.toThrow();
    expect((await fs.readdir(path.join(p.wpContent, 'upgrade'))).filter((n) => n.startsWith('cloud-'))).toEqual([]);
    expect(await helper('plugin.delete', { slug: 'mac-made' })).toEqual({ deleted: 'mac-made' });
  });

  it('adds roles once and runs only the allowlisted commands', async () => {
    const roles = [{ name: 'shop_manager', display: 'Shop manager', caps: ['read', 'edit_posts'] }];
    expect(await helper('roles.add', { roles })).toEqual({ added: ['shop_manager'] });
    expect(await helper('roles.add', { roles: [...roles, { name: 'editor', display: 'Editor', caps: [] }] })).toEqual({ added: [] });
    const run = (...argv: string[]) => helper('command', { argv });
    expect(await run('option', 'get', 'blogname')).toEqual({ exit_code: 0, output: 'Helper Test' });
    expect((await run('option', 'get', 'no_such_option')).exit_code).toBe(1);
    expect((await run('plugin', 'is-active', 'cloud-hello')).exit_code).toBe(0);
    expect((await run('plugin', 'is-active', 'akismet')).exit_code).toBe(1);
    expect((await run('plugin', 'is-installed', 'akismet')).exit_code).toBe(0);
    expect((await run('plugin', 'is-installed', 'nope')).exit_code).toBe(1);
    expect((await run('role', 'exists', 'shop_manager')).exit_code).toBe(0);
    expect((await run('role', 'exists', 'nope')).exit_code).toBe(1);
    expect(await run('wp', 'core', 'version')).toEqual({ exit_code: 0, output: '6.1.9' });
    for (const argv of [['eval', 'phpinfo();'], ['plugin', 'install', 'x'], ['option', 'update', 'blogname', 'x'], ['option', 'get'], []]) {
      const err = await rejection(helper('command', { argv }));
      expect(err, argv.join(' ')).toBeInstanceOf(BackendRefusedError);
      expect((err as BackendRefusedError).param).toBe('argv');
    }
  });

  it("lists, runs and deletes a plugin's cron event", async () => {
    const tick = (await helper('cron.list', {})).filter((e) => e.hook === 'cloud_hello_tick');
    expect(tick).toEqual([{ hook: 'cloud_hello_tick', schedule: 'hourly', next_run_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/) }]);
    expect(await helper('cron.run', { hook: 'cloud_hello_tick' })).toMatchObject({ hook: 'cloud_hello_tick', executed_at: expect.any(String), runs: 1 });
    expect(await helper('option.get', { name: 'cloud_hello_ticks' })).toEqual({ exists: true, value: '1' });
    expect((await helper('cron.list', {})).filter((e) => e.hook === 'cloud_hello_tick')).toHaveLength(1); // rescheduled
    expect(await helper('cron.delete', { hook: 'cloud_hello_tick' })).toEqual({ removed: 1 });
    expect((await helper('cron.list', {})).some((e) => e.hook === 'cloud_hello_tick')).toBe(false);
    expect(await rejection(helper('cron.run', { hook: 'cloud_hello_tick' }))).toBeInstanceOf(BackendGoneError);
    expect(await rejection(helper('cron.delete', { hook: 'cloud_hello_tick' }))).toBeInstanceOf(BackendGoneError);
  });

  it('writes constants and keeps secrets', async () => {
    await writeConstants(site, { LOGGED_IN_COOKIE: 'helper_test_login', WP_POST_REVISIONS: 3, HELPER_TEST_FLAG: true });
    expect(await rejection(writeConstants(site, { DB_HOST: 'elsewhere' }))).toMatchObject({ name: 'BackendRefusedError', param: 'constants.DB_HOST' });
    const first = await ensureSecrets(site, ['STRIPE_KEY', 'OTHER_SECRET']);
    expect(Object.values(first).every((v) => /^[0-9a-f]{64}$/.test(v))).toBe(true);
    expect(await ensureSecrets(site, ['STRIPE_KEY', 'OTHER_SECRET', 'THIRD'])).toMatchObject(first);
    expect((await fs.stat(sitePaths(site).constantsJson)).mode & 0o777).toBe(0o640);
    expect(await helper('status', {})).toMatchObject({ installed: true });
    expect(await helper('command', { argv: ['option', 'get', 'blogname'] })).toEqual({ exit_code: 0, output: 'Helper Test' });
  });

  it('honours an autologin link once, rewrites media URLs for the CDN on the front end only, and runs the active plugin', async () => {
    const token = randomBytes(24).toString('base64url');
    const sha256 = createHash('sha256').update(token).digest('hex');
    expect(await helper('autologin.arm', { sha256, expires: Math.floor(Date.now() / 1000) + 120 })).toMatchObject({ armed: true });
    expect((await helper('option.get', { name: 'cloud_autologin' })).value).toMatchObject({ sha256 });
    const server = await startWebServer();
    try {
      const front = await get(server.port, '/');
      expect(front.status).toBe(200);
      expect(front.body).toContain('<title>Helper Test');
      expect(front.headers['x-cloud-hello']).toBe('1.1.0');

      const wrong = await get(server.port, '/?cloud_autologin=not-the-token');
      expect(wrong.status).toBe(403);
      expect(wrong.headers['set-cookie']).toBeUndefined();
      // Two uses at once: one login.
      const [a, b] = await Promise.all([get(server.port, `/?cloud_autologin=${token}`), get(server.port, `/?cloud_autologin=${token}`)]);
      const won = [a, b].filter((r) => r.status === 302);
      expect(won).toHaveLength(1);
      expect(won[0].headers.location).toBe(`http://${URL_HOST}/wp-admin/`);
      expect((won[0].headers['set-cookie'] ?? []).some((c) => c.startsWith('helper_test_login='))).toBe(true); // the constant took effect
      const lost = [a, b].find((r) => r.status !== 302);
      expect(lost?.status).toBe(403);
      expect(lost?.headers['set-cookie']).toBeUndefined();
      expect((await get(server.port, `/?cloud_autologin=${token}`)).status).toBe(403);
      expect((await helper('option.get', { name: 'cloud_autologin' })).exists).toBe(false);

      const media = `http://${URL_HOST}/wp-content/uploads/2026/11/cat.jpg`;
      await helper('options.update', { options: { blogname: `Helper Test ${media}` } });
      expect((await get(server.port, '/')).body).toContain(media);
      expect(await helper('cdn.set', { url: 'https://cdn.example.net/' })).toEqual({ url: 'https://cdn.example.net' });
      const rewritten = await get(server.port, '/');
      expect(rewritten.body).toContain('https://cdn.example.net/wp-content/uploads/2026/11/cat.jpg');
      expect(rewritten.body).not.toContain(media);
      const rest = await get(server.port, '/?rest_route=/');
      expect(JSON.parse(rest.body)).toMatchObject({ name: `Helper Test ${media}` });
      await helper('cdn.set', { url: null });
      expect((await get(server.port, '/')).body).toContain(media);
      await helper('options.update', { options: { blogname: 'Helper Test' } });
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('flushes caches honestly and sends mail through the relay, logging no body', async () => {
    expect(await helper('cache.flush', {})).toEqual({ flushed: ['transients'], object_cache: 'none' });
    const noRelay = await helper('mail.test', { to: 'owner@example.com' });
    expect(noRelay.sent).toBe(false);
    expect(noRelay.detail).toMatch(/relay/i);
    expect(await rejection(helper('mail.test', { to: 'not an address' }))).toMatchObject({ name: 'BackendRefusedError', param: 'to' });
    const relay = await fakeRelay();
    try {
      await layoutSite({ ...layout, site: { ...layout.site, smtp: { host: '127.0.0.1', port: relay.port } } });
      expect(await helper('mail.test', { to: 'owner@example.com' })).toMatchObject({ sent: true });
      expect(relay.recipients).toEqual(['<owner@example.com>']);
    } finally {
      await relay.close();
    }
    const log = (await fs.readFile(sitePaths(site).mailLog, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(log.map((e) => e.sent)).toEqual([false, true]);
    expect(log[1]).toEqual({ to: 'owner@example.com', subject: 'Test message from Helper Test', method: 'smtp', sent_at: expect.any(String), sent: true });
  });

  it('switches core to 6.1.10 keeping wp-content, and the database upgrade runs once', async () => {
    const p = sitePaths(site);
    const contentBefore = (await fs.stat(p.wpContent)).ino;
    expect(await switchCore(site, dataDir, '6.1.10')).toEqual({ from: '6.1.9', to: '6.1.10' });
    expect(await coreVersionOf(site)).toBe('6.1.10');
    expect((await fs.stat(p.wpContent)).ino).toBe(contentBefore);
    expect((await fs.stat(path.join(p.public, 'wp-includes', 'version.php'))).ino).toBe(
      (await fs.stat(path.join(dataDir, 'core', '6.1.10', 'wp-includes', 'version.php'))).ino,
    );
    expect((await fs.readdir(site)).filter((n) => n.startsWith('public'))).toEqual(['public']);
    expect(await helper('status', {})).toMatchObject({ wp_version: '6.1.10', db_version: 53496, files_db_version: 53497 });
    expect(await helper('core.upgrade_db', {})).toMatchObject({ from_db_version: 53496, to_db_version: 53497 });
    expect(await helper('core.upgrade_db', {})).toMatchObject({ from_db_version: 53497, to_db_version: 53497 });
    expect(await helper('plugins.list', {})).toContainEqual({ slug: 'cloud-hello', name: 'Cloud Hello', version: '1.1.0', active: true });
    expect(await switchCore(site, dataDir, '6.1.10')).toEqual({ from: '6.1.10', to: '6.1.10' });
    await layoutSite(layout); // an updated site keeps its release
    expect(await coreVersionOf(site)).toBe('6.1.10');
  });

  it("deletes a plugin's files but keeps its settings; failures are unavailability, with secrets masked", async () => {
    expect(await helper('plugin.delete', { slug: 'cloud-hello' })).toEqual({ deleted: 'cloud-hello' });
    await expect(fs.access(path.join(sitePaths(site).plugins, 'cloud-hello'))).rejects.toThrow();
    expect(await helper('option.get', { name: 'cloud_hello_ticks' })).toEqual({ exists: true, value: '1' });
    expect(await rejection(helper('plugin.delete', { slug: 'cloud-hello' }))).toBeInstanceOf(BackendGoneError);
    expect(await rejection(helper('nonsense' as HelperCommand, {} as never))).toMatchObject({ name: 'BackendRefusedError', param: 'command' });

    // Without the CA setting the site does not start, and says why.
    const noCa = await rejection(runHelper({ siteRoot: site, dataDir, account, ini: { 'openssl.cafile': '' } }, 'status', {}));
    expect(noCa).toBeInstanceOf(BackendUnavailableError);
    expect((noCa as BackendUnavailableError).detail).toContain('openssl.cafile');
    // A wrong database password: a failure whose detail never shows the password.
    const wrong = `Wrong-${randomBytes(6).toString('hex')}`;
    await layoutSite({ ...layout, site: { ...layout.site, db: { ...layout.site.db, password: wrong } } });
    try {
      const err = await rejection(helper('option.get', { name: 'blogname' }));
      expect(err).toBeInstanceOf(BackendUnavailableError);
      expect((err as BackendUnavailableError).detail).toMatch(/database/i);
      expect(`${err.message} ${(err as BackendUnavailableError).detail}`).not.toContain(wrong);
    } finally {
      await layoutSite(layout);
    }
    expect(await helper('status', {})).toMatchObject({ installed: true });
  });
});
