import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { list as listTar } from 'tar';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendGoneError, BackendRefusedError } from '../providers/errors';
import { WordpressSimulator } from '../providers/simulator/wordpress.simulator';
import type { WpSiteSpec } from '../providers/wordpress.provider';
import { storedZip } from '../providers/simulator/stored-zip';
import { createTestDatabase, type TestDatabase } from './helpers/db';

/** The WordPress simulator (WORDPRESS_BACKEND=simulator) against a real PostgreSQL, method group by method group. */
let testDb: TestDatabase;
let sim: WordpressSimulator;
let workDir: string;
let nextService = 1_000;

beforeAll(async () => {
  testDb = await createTestDatabase();
  sim = new WordpressSimulator(testDb.db, 0);
  workDir = mkdtempSync(path.join(tmpdir(), 'wp-sim-test-'));
});
afterAll(async () => {
  rmSync(workDir, { recursive: true, force: true });
  await testDb?.drop();
});

function spec(overrides: Partial<WpSiteSpec> = {}): WpSiteSpec {
  const serviceId = nextService++;
  return {
    serviceId,
    hostname: `site${serviceId}.example.test`,
    title: `Site ${serviceId}`,
    adminEmail: 'owner@example.test',
    phpVersion: '8.2',
    database: { host: '127.0.0.1', port: 3306, name: `wp_${serviceId}`, user: `wp_${serviceId}`, password: 'secret', caCertificate: '' },
    ...overrides,
  };
}

async function newSite(overrides: Partial<WpSiteSpec> = {}): Promise<number> {
  const s = spec(overrides);
  await sim.createSite(s);
  return s.serviceId;
}

const refusal = (param: string) => expect.objectContaining({ name: 'BackendRefusedError', code: 'validation_failed', param });

describe('sites', () => {
  it('installs once, answers where it is, and is live', async () => {
    const s = spec();
    expect(await sim.createSite(s)).toEqual({ ip: '127.0.0.1', httpPort: 8088 });
    await sim.updateOptions(s.serviceId, { blogname: 'Renamed' });
    // A second create finds the site and installs nothing again.
    expect(await sim.createSite(s)).toEqual({ ip: '127.0.0.1', httpPort: 8088 });
    expect(await sim.getOption(s.serviceId, 'blogname')).toBe('Renamed');
    expect(await sim.getOption(s.serviceId, 'home')).toBe(`http://${s.hostname}`);
    expect(await sim.getOption(s.serviceId, 'siteurl')).toBe(`http://${s.hostname}`);
    expect(await sim.getOption(s.serviceId, 'admin_email')).toBe('owner@example.test');
    expect(await sim.getOption(s.serviceId, 'no_such_option')).toBeNull();
    expect(await sim.live(s.serviceId)).toEqual({ state: 'up', wpVersion: '6.1.9', phpVersion: '8.2', recipe: null });
    await sim.updateOptions(s.serviceId, { cloud_recipe: { name: 'shop', version: '1.0.0', applied_at: '2026-01-01T00:00:00Z' } });
    expect((await sim.live(s.serviceId)).recipe).toEqual({ name: 'shop', version: '1.0.0', applied_at: '2026-01-01T00:00:00Z' });
    expect(await sim.phpVersions()).toEqual(['8.2']);
    expect(await sim.latestCoreVersion()).toBe('6.1.10');
  });

  it('refuses a PHP version the host does not run', async () => {
    await expect(sim.createSite(spec({ phpVersion: '7.4' }))).rejects.toEqual(refusal('php_version'));
  });

  it('answers gone for a site it does not have, and destroys idempotently', async () => {
    const id = await newSite();
    await sim.destroySite(id);
    await sim.destroySite(id);
    await expect(sim.live(id)).rejects.toBeInstanceOf(BackendGoneError);
    await expect(sim.listPlugins(id)).rejects.toBeInstanceOf(BackendGoneError);
    await expect(sim.updateOptions(id, { a: 1 })).rejects.toBeInstanceOf(BackendGoneError);
  });

  it('sets host names and the primary (home, siteurl), and arms autologin', async () => {
    const id = await newSite();
    await sim.setHostnames(id, ['site.example.test', 'Shop.Example.org', 'www.shop.example.org'], 'www.shop.example.org');
    expect(await sim.getOption(id, 'home')).toBe('http://www.shop.example.org');
    expect(await sim.getOption(id, 'siteurl')).toBe('http://www.shop.example.org');
    await expect(sim.armAutologin(id, 'a'.repeat(64), new Date(Date.now() + 60_000))).resolves.toBeUndefined();
  });
});

describe('plugins', () => {
  it('has akismet installed and inactive by default; activates, deactivates, deletes', async () => {
    const id = await newSite();
    expect(await sim.listPlugins(id)).toEqual([{ slug: 'akismet', name: 'Akismet Anti-Spam', version: '5.0.2', active: false }]);
    expect(await sim.activatePlugin(id, 'akismet')).toMatchObject({ slug: 'akismet', active: true });
    expect(await sim.getOption(id, 'active_plugins')).toEqual(['akismet/akismet.php']);
    expect(await sim.runCommand(id, ['plugin', 'is-active', 'akismet'])).toEqual({ exitCode: 0, output: '' });
    expect(await sim.deactivatePlugin(id, 'akismet')).toMatchObject({ active: false });
    await sim.updateOptions(id, { akismet_strictness: '1' });
    await sim.deletePlugin(id, 'akismet');
    expect(await sim.listPlugins(id)).toEqual([]);
    // Its settings stay in the database.
    expect(await sim.getOption(id, 'akismet_strictness')).toBe('1');
    for (const call of [() => sim.activatePlugin(id, 'akismet'), () => sim.deactivatePlugin(id, 'akismet'), () => sim.deletePlugin(id, 'akismet')])
      await expect(call()).rejects.toBeInstanceOf(BackendGoneError);
  });

  it('searches the directory stand-in and installs its zips at their versions', async () => {
    expect(await sim.searchDirectory('hello')).toEqual([{ slug: 'cloud-hello', name: 'Cloud Hello', latestVersion: '1.1.0', versions: ['1.0.0', '1.1.0'] }]);
    expect((await sim.searchDirectory('')).map((p) => p.slug)).toEqual(['akismet', 'cloud-hello']);
    expect(await sim.directoryPlugin('akismet')).toEqual({ slug: 'akismet', name: 'Akismet Anti-Spam', latestVersion: '5.0.2', versions: ['5.0.2'] });
    expect(await sim.directoryPlugin('nope')).toBeNull();
    await expect(sim.directoryZip('nope', '1.0.0')).rejects.toEqual(refusal('slug'));
    await expect(sim.directoryZip('cloud-hello', '9.9.9')).rejects.toEqual(refusal('version'));

    const zip = await sim.directoryZip('cloud-hello', '1.0.0');
    expect(await sim.directoryZip('cloud-hello', '1.0.0')).toBe(zip);
    const bytes = readFileSync(zip);
    expect(bytes.subarray(0, 4).toString('hex')).toBe('504b0304');
    expect(bytes.includes(Buffer.from('cloud-hello/cloud-hello.php'))).toBe(true);

    const id = await newSite();
    expect(await sim.installPlugin(id, 'cloud-hello', zip, false)).toEqual({ slug: 'cloud-hello', name: 'Cloud Hello', version: '1.0.0', active: false });
    await sim.activatePlugin(id, 'cloud-hello');
    // Reinstalling over it at another version keeps it active.
    const newer = await sim.directoryZip('cloud-hello', '1.1.0');
    expect(await sim.installPlugin(id, 'cloud-hello', newer, false)).toEqual({ slug: 'cloud-hello', name: 'Cloud Hello', version: '1.1.0', active: true });
    expect((await sim.listPlugins(id)).map((p) => p.slug)).toEqual(['akismet', 'cloud-hello']);
  });

  it('installs a zip from elsewhere: its header when it has one, else the slug at 1.0.0', async () => {
    const id = await newSite();
    const withHeader = path.join(workDir, 'my-plugin.zip');
    writeFileSync(withHeader, zipOf({ 'my-plugin/': '', 'my-plugin/main.php': '<?php\n/*\nPlugin Name: My Plugin\nVersion: 2.3.4\n*/\n' }));
    expect(await sim.installPlugin(id, 'my-plugin', withHeader, true)).toEqual({ slug: 'my-plugin', name: 'My Plugin', version: '2.3.4', active: true });
    expect(await sim.getOption(id, 'active_plugins')).toEqual(['my-plugin/main.php']);
    const bare = path.join(workDir, 'bare.zip');
    writeFileSync(bare, zipOf({ 'bare/readme.txt': 'no header' }));
    expect(await sim.installPlugin(id, 'bare', bare, false)).toEqual({ slug: 'bare', name: 'bare', version: '1.0.0', active: false });
  });
});

describe('settings inside WordPress', () => {
  it('updates options without losing a concurrent update', async () => {
    const id = await newSite();
    await Promise.all([sim.updateOptions(id, { first: 'a', shared: 1 }), sim.updateOptions(id, { second: 'b', shared: 2 })]);
    expect(await sim.getOption(id, 'first')).toBe('a');
    expect(await sim.getOption(id, 'second')).toBe('b');
    expect([1, 2]).toContain(await sim.getOption(id, 'shared'));
    // Many more at once: every one lands.
    await Promise.all(Array.from({ length: 10 }, (_, i) => sim.updateOptions(id, { [`k${i}`]: i })));
    for (let i = 0; i < 10; i++) expect(await sim.getOption(id, `k${i}`)).toBe(i);
  });

  it('adds only missing roles, sets constants, keeps secrets', async () => {
    const id = await newSite();
    const added = await sim.addRoles(id, [
      { name: 'editor', display: 'Changed', caps: ['read'] },
      { name: 'shop_manager', display: 'Shop manager', caps: ['read', 'manage_woocommerce'] },
    ]);
    expect(added).toEqual(['shop_manager']);
    expect(await sim.addRoles(id, [{ name: 'shop_manager', display: 'Shop manager', caps: [] }])).toEqual([]);
    expect(await sim.runCommand(id, ['role', 'exists', 'shop_manager'])).toMatchObject({ exitCode: 0 });
    expect(await sim.runCommand(id, ['role', 'exists', 'nobody'])).toMatchObject({ exitCode: 1 });

    await expect(sim.setConstants(id, { WP_POST_REVISIONS: 5, DISALLOW_FILE_EDIT: true })).resolves.toBeUndefined();

    const first = await sim.ensureSecrets(id, ['SHOP_KEY']);
    expect(first.SHOP_KEY).toMatch(/^[0-9a-f]{64}$/);
    const again = await sim.ensureSecrets(id, ['SHOP_KEY', 'OTHER_KEY']);
    expect(again.SHOP_KEY).toBe(first.SHOP_KEY);
    expect(again.OTHER_KEY).toMatch(/^[0-9a-f]{64}$/);
    expect(again.OTHER_KEY).not.toBe(first.SHOP_KEY);
  });

  it('runs only the allowlisted commands', async () => {
    const id = await newSite({ title: 'My shop' });
    expect(await sim.runCommand(id, ['option', 'get', 'blogname'])).toEqual({ exitCode: 0, output: 'My shop' });
    expect(await sim.runCommand(id, ['option', 'get', 'missing'])).toMatchObject({ exitCode: 1 });
    expect(await sim.runCommand(id, ['plugin', 'is-installed', 'akismet'])).toMatchObject({ exitCode: 0 });
    expect(await sim.runCommand(id, ['plugin', 'is-installed', 'jetpack'])).toMatchObject({ exitCode: 1 });
    expect(await sim.runCommand(id, ['plugin', 'is-active', 'akismet'])).toMatchObject({ exitCode: 1 });
    expect(await sim.runCommand(id, ['core', 'version'])).toEqual({ exitCode: 0, output: '6.1.9' });
    for (const argv of [['option', 'update', 'blogname', 'x'], ['plugin', 'delete', 'akismet'], ['eval', 'echo 1;'], ['core', 'version', 'extra'], []])
      await expect(sim.runCommand(id, argv)).rejects.toEqual(refusal('verify'));
  });
});

describe('cron', () => {
  it('lists WordPress default events, runs (rescheduling) and deletes them', async () => {
    const id = await newSite();
    const events = await sim.listCron(id);
    const byHook = Object.fromEntries(events.map((e) => [e.hook, e]));
    expect(byHook.wp_version_check.schedule).toBe('twicedaily');
    expect(byHook.wp_update_plugins.schedule).toBe('twicedaily');
    expect(byHook.wp_scheduled_delete.schedule).toBe('daily');
    expect(byHook.delete_expired_transients.schedule).toBe('daily');
    expect(events.map((e) => e.nextRunAt)).toEqual([...events.map((e) => e.nextRunAt)].sort());

    const before = Date.now();
    const { executedAt } = await sim.runCron(id, 'wp_scheduled_delete');
    expect(new Date(executedAt).getTime()).toBeGreaterThanOrEqual(before - 1000);
    const rescheduled = (await sim.listCron(id)).find((e) => e.hook === 'wp_scheduled_delete')!;
    expect(new Date(rescheduled.nextRunAt).getTime() - new Date(executedAt).getTime()).toBe(86_400_000);

    await sim.deleteCron(id, 'wp_version_check');
    expect((await sim.listCron(id)).some((e) => e.hook === 'wp_version_check')).toBe(false);
    await expect(sim.deleteCron(id, 'wp_version_check')).rejects.toBeInstanceOf(BackendGoneError);
    await expect(sim.runCron(id, 'no_such_hook')).rejects.toBeInstanceOf(BackendGoneError);
  });
});

describe('PHP and core', () => {
  it('reads and applies settings, switches version, restarts', async () => {
    const id = await newSite();
    expect(await sim.php(id)).toEqual({
      version: '8.2',
      settings: { memory_limit: '256M', upload_max_filesize: '64M', post_max_size: '64M', max_execution_time: 30, max_input_vars: 1000 },
    });
    const changed = await sim.setPhpSettings(id, { memory_limit: '512M', max_input_vars: 3000 });
    expect(changed.settings).toMatchObject({ memory_limit: '512M', max_input_vars: 3000, upload_max_filesize: '64M' });
    expect(await sim.setPhpVersion(id, '8.2')).toEqual(changed);
    await expect(sim.setPhpVersion(id, '5.6')).rejects.toEqual(refusal('version'));
    await sim.restartPhp(id);
    const php = await sim.logs(id, 'php', 2);
    expect(php).toHaveLength(2);
    expect(php.every((l) => l.source === 'php')).toBe(true);
    expect(php[0].message).toMatch(/Reloading/);
    expect(await sim.logs(id, 'access', 10)).toEqual([]);
    expect((await sim.logs(id, 'error', 100)).every((l) => l.source === 'error')).toBe(true);
  });

  it('updates core once to the latest', async () => {
    const id = await newSite();
    expect(await sim.coreVersion(id)).toBe('6.1.9');
    expect(await sim.updateCore(id)).toEqual({ from: '6.1.9', to: '6.1.10' });
    expect(await sim.updateCore(id)).toEqual({ from: '6.1.10', to: '6.1.10' });
    expect(await sim.coreVersion(id)).toBe('6.1.10');
    expect((await sim.live(id)).wpVersion).toBe('6.1.10');
  });
});

describe('backups', () => {
  it('writes a .tar.gz with database.sql and wp-content/, and restores it', async () => {
    const id = await newSite();
    await sim.updateOptions(id, { blogname: 'Before backup' });
    await sim.activatePlugin(id, 'akismet');
    await sim.addRoles(id, [{ name: 'kept', display: 'Kept', caps: ['read'] }]);
    const archive = path.join(workDir, 'backups', `${id}.tar.gz`);
    const { sizeBytes } = await sim.backup(id, archive);
    expect(sizeBytes).toBe(statSync(archive).size);
    expect(readFileSync(archive).subarray(0, 2).toString('hex')).toBe('1f8b');
    const names: string[] = [];
    await listTar({ file: archive, onReadEntry: (e) => void names.push(e.path) });
    expect(names).toContain('database.sql');
    expect(names).toContain('wp-content/');
    expect(names).toContain('wp-content/plugins/akismet/akismet.php');

    await sim.updateOptions(id, { blogname: 'After backup', added_later: true });
    await sim.deletePlugin(id, 'akismet');
    await sim.deleteCron(id, 'wp_version_check');
    await sim.setHostnames(id, [`site${id}.example.test`, 'new.example.org'], 'new.example.org');

    await sim.restore(id, archive);
    expect(await sim.getOption(id, 'blogname')).toBe('Before backup');
    expect(await sim.getOption(id, 'added_later')).toBeNull();
    expect(await sim.listPlugins(id)).toEqual([{ slug: 'akismet', name: 'Akismet Anti-Spam', version: '5.0.2', active: true }]);
    expect((await sim.listCron(id)).some((e) => e.hook === 'wp_version_check')).toBe(true);
    expect(await sim.runCommand(id, ['role', 'exists', 'kept'])).toMatchObject({ exitCode: 0 });
    // The site keeps answering at its current primary name.
    expect(await sim.getOption(id, 'home')).toBe('http://new.example.org');
  });

  it('refuses an archive it did not write and answers gone for a missing one', async () => {
    const id = await newSite();
    const junk = path.join(workDir, 'junk.tar.gz');
    writeFileSync(junk, 'not an archive');
    await expect(sim.restore(id, junk)).rejects.toBeInstanceOf(BackendRefusedError);
    await expect(sim.restore(id, path.join(workDir, 'missing.tar.gz'))).rejects.toBeInstanceOf(BackendGoneError);
  });
});

describe('caches, CDN, mail, logs', () => {
  it('flushes the object cache, sets the CDN, logs test mail newest first', async () => {
    const id = await newSite();
    expect(await sim.flushCache(id)).toEqual(['object']);
    await sim.setCdn(id, 'https://cdn.example.test');
    await sim.setCdn(id, null);
    const since = new Date(Date.now() - 1000);
    expect(await sim.sendTestMail(id, 'a@example.test')).toEqual({ sent: false, detail: 'simulator: no mail is sent' });
    await new Promise((resolve) => setTimeout(resolve, 5));
    await sim.sendTestMail(id, 'b@example.test');
    const log = await sim.mailLog(id, since);
    expect(log.map((m) => m.to)).toEqual(['b@example.test', 'a@example.test']);
    expect(log[0]).toMatchObject({ method: 'smtp', sent: false });
    expect(log[0].subject).toEqual(expect.any(String));
    expect(await sim.mailLog(id, new Date(Date.now() + 60_000))).toEqual([]);
  });
});

/** A zip of stored entries, for installs of zips the simulator did not make. */
const zipOf = (files: Record<string, string>): Buffer => storedZip(Object.entries(files).map(([name, data]) => ({ name, data })));
