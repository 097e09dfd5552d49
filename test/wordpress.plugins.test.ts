import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compareVersions, installPlugin, zipTopFolder } from '../domain/wordpress/plugins';
import { DownloadError, downloadToFile } from '../infra/outbound-download';
import { BackendRefusedError } from '../providers/errors';
import { storedZip } from '../providers/simulator/stored-zip';
import { createAccount } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * A site's plugins on the simulator backend: the directory stand-in (akismet 5.0.2, cloud-hello
 * 1.0.0 and 1.1.0), installs by slug and from zips served by a loopback HTTP server (the stack runs
 * with ALLOW_INSECURE_TARGETS), updates, removal, and the refusals with their `param`.
 */

const pluginPhp = (name: string, version: string) => `<?php\n/**\n * Plugin Name: ${name}\n * Version: ${version}\n */\n`;
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

const MY_PLUGIN = storedZip([{ name: 'my-plugin/' }, { name: 'my-plugin/my-plugin.php', data: pluginPhp('My Plugin', '2.0.0') }]);
const TWO_FOLDERS = storedZip([
  { name: 'one/one.php', data: pluginPhp('One', '1.0') },
  { name: 'two/two.php', data: pluginPhp('Two', '1.0') },
]);
const LOOSE_FILE = storedZip([
  { name: 'loose/loose.php', data: pluginPhp('Loose', '1.0') },
  { name: 'readme.txt', data: 'hi' },
]);
const TOO_BIG = Buffer.alloc((20 << 20) + 1, 1);

let stack: Stack;
let server: http.Server;
let base: string;
const served = new Map<string, { status?: number; body?: Buffer; headers?: Record<string, string> }>([
  ['/my-plugin.zip', { body: MY_PLUGIN }],
  ['/two.zip', { body: TWO_FOLDERS }],
  ['/loose.zip', { body: LOOSE_FILE }],
  ['/empty.zip', { body: storedZip([]) }],
  ['/bad-slug.zip', { body: storedZip([{ name: 'My_Plugin/x.php', data: 'x' }]) }],
  ['/slip.zip', { body: storedZip([{ name: 'evil/../../x.php', data: 'x' }]) }],
  ['/not-a-zip.zip', { body: Buffer.from('hello, this is not a zip at all') }],
  ['/big.zip', { body: TOO_BIG }],
  ['/big-chunked.zip', { body: TOO_BIG, headers: { 'transfer-encoding': 'chunked' } }],
  ['/missing.zip', { status: 404, body: Buffer.from('no') }],
  ['/moved.zip', { status: 302, headers: { location: '/my-plugin.zip' } }],
]);
const hits: string[] = [];

let site: TestSite;
let api: ReturnType<typeof siteApi>;

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { ALLOW_INSECURE_TARGETS: '1', SIM_DELAY_SCALE: '0' } });
  server = http.createServer((req, res) => {
    hits.push(req.url ?? '');
    const route = served.get(req.url ?? '');
    if (!route) return void res.writeHead(404).end();
    const headers: Record<string, string> = { 'content-type': 'application/zip', ...(route.headers ?? {}) };
    if (route.body && !headers['transfer-encoding']) headers['content-length'] = String(route.body.length);
    res.writeHead(route.status ?? 200, headers);
    res.end(route.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  site = await createSite(stack);
  api = siteApi(stack);
});

afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  await stack?.close();
});

const plugins = (s: TestSite = site) => `/v1/wordpress/${s.id}/plugins`;

async function expectInvalid(res: { status: number; body: any; text: string }, param: string, message?: RegExp) {
  expect(res.status, res.text).toBe(400);
  expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
  if (message) expect(res.body.error.message).toMatch(message);
}

describe('the directory and the installed plugins', () => {
  it('lists the installed plugins with what the directory offers', async () => {
    const res = await api.get(plugins());
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(res.body.data).toEqual([
      {
        object: 'wordpress_plugin',
        slug: 'akismet',
        name: 'Akismet Anti-Spam',
        version: '5.0.2',
        active: false,
        update_available: false,
        latest_version: '5.0.2',
      },
    ]);
  });

  it('searches the directory, with every version, paginated', async () => {
    const hello = await api.get(`${plugins()}/search?q=hello`);
    expect(hello.status, hello.text).toBe(200);
    expect(hello.body.data).toEqual([{ slug: 'cloud-hello', name: 'Cloud Hello', latest_version: '1.1.0', versions: ['1.0.0', '1.1.0'] }]);
    const all = await api.get(`${plugins()}/search`);
    expect(all.body.data.map((p: { slug: string }) => p.slug)).toEqual(['akismet', 'cloud-hello']);
    const first = await api.get(`${plugins()}/search?limit=1`);
    expect(first.body).toMatchObject({ has_more: true, data: [{ slug: 'akismet' }] });
    const second = await api.get(`${plugins()}/search?limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`);
    expect(second.body).toMatchObject({ has_more: false, data: [{ slug: 'cloud-hello' }] });
    expect((await api.get(`${plugins()}/search?q=nothing-like-this`)).body.data).toEqual([]);
    // A cursor of the search for one query is not one for another.
    await expectInvalid(await api.get(`${plugins()}/search?q=a&limit=1&cursor=${encodeURIComponent(first.body.next_cursor)}`), 'cursor');
  });
});

describe('installs from the directory', () => {
  it('installs a version, active by default; shows the update; updates it keeping it active; then answers unchanged', async () => {
    const s = await createSite(stack);
    const made = await api.post(plugins(s), { slug: 'cloud-hello', version: '1.0.0' });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toEqual({
      object: 'wordpress_plugin',
      slug: 'cloud-hello',
      name: 'Cloud Hello',
      version: '1.0.0',
      active: true,
      update_available: true,
      latest_version: '1.1.0',
    });
    const updated = await api.post(`${plugins(s)}/cloud-hello/update`);
    expect(updated.status, updated.text).toBe(200);
    expect(updated.body).toMatchObject({ slug: 'cloud-hello', version: '1.1.0', active: true, update_available: false, latest_version: '1.1.0' });
    const again = await api.post(`${plugins(s)}/cloud-hello/update`);
    expect(again.status).toBe(200);
    expect(again.body).toEqual(updated.body);
    // A version of an installed slug reinstalls it (a pin back).
    const pinned = await api.post(plugins(s), { slug: 'cloud-hello', version: '1.0.0' });
    expect(pinned.status).toBe(201);
    expect(pinned.body).toMatchObject({ version: '1.0.0', update_available: true });
    const list = await api.get(plugins(s));
    expect(list.body.data.map((p: { slug: string; version: string }) => `${p.slug}@${p.version}`)).toEqual(['akismet@5.0.2', 'cloud-hello@1.0.0']);
  });

  it('installs the latest without a version, inactive when asked', async () => {
    const s = await createSite(stack);
    const made = await api.post(plugins(s), { slug: 'cloud-hello', activate: false });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toMatchObject({ version: '1.1.0', active: false, update_available: false });
  });

  it('refuses an unknown slug or version, and malformed bodies, with the param at fault', async () => {
    await expectInvalid(await api.post(plugins(), { slug: 'no-such-plugin' }), 'slug', /no plugin "no-such-plugin"/);
    await expectInvalid(await api.post(plugins(), { slug: 'cloud-hello', version: '9.9.9' }), 'version', /has no version 9\.9\.9; it has 1\.0\.0, 1\.1\.0/);
    await expectInvalid(await api.post(plugins(), { slug: 'Not A Slug' }), 'slug');
    await expectInvalid(await api.post(plugins(), {}), 'slug', /required/);
    await expectInvalid(await api.post(plugins(), { slug: 'akismet', url: `${base}/my-plugin.zip` }), 'url', /not both/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/my-plugin.zip`, version: '1.0.0' }), 'version');
    await expectInvalid(await api.post(plugins(), { slug: 'akismet', sha256: 'a'.repeat(64) }), 'sha256');
    await expectInvalid(await api.post(plugins(), { url: `${base}/my-plugin.zip`, sha256: 'xyz' }), 'sha256');
    await expectInvalid(await api.post(plugins(), { slug: 7 }), 'slug');
    await expectInvalid(await api.post(plugins(), { slug: 'akismet', activate: 'yes' }), 'activate');
  });
});

describe('installs from a zip URL', () => {
  it('downloads the zip, takes its top folder as the slug, checks a given SHA-256', async () => {
    const s = await createSite(stack);
    const made = await api.post(plugins(s), { url: `${base}/my-plugin.zip`, sha256: sha(MY_PLUGIN).toUpperCase() });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toEqual({
      object: 'wordpress_plugin',
      slug: 'my-plugin',
      name: 'My Plugin',
      version: '2.0.0',
      active: true,
      update_available: false,
      latest_version: null,
    });
    // Not in the directory: nothing to update from (409), and update-all leaves it.
    const update = await api.post(`${plugins(s)}/my-plugin/update`);
    expect(update.status, update.text).toBe(409);
    expect(update.body.error).toMatchObject({ code: 'conflict', message: expect.stringMatching(/not in the plugin directory/) });
    const all = await api.post(`${plugins(s)}/update-all`);
    expect(all.body).toEqual({ object: 'wordpress_plugin_updates', updated: [] });
    // No temporary zip is left behind.
    expect((await readdir(tmpdir())).filter((n) => n.startsWith('wp-plugin-zip-'))).toEqual([]);
  });

  it('refuses a SHA-256 mismatch before installing anything', async () => {
    const s = await createSite(stack);
    await expectInvalid(await api.post(plugins(s), { url: `${base}/my-plugin.zip`, sha256: '0'.repeat(64) }), 'sha256', new RegExp(sha(MY_PLUGIN)));
    expect((await api.get(plugins(s))).body.data.map((p: { slug: string }) => p.slug)).toEqual(['akismet']);
  });

  it('refuses zips that are not one plugin folder', async () => {
    await expectInvalid(await api.post(plugins(), { url: `${base}/two.zip` }), 'url', /2 top folders \("one", "two"\)/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/loose.zip` }), 'url', /files outside a top folder \("readme.txt"\)/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/empty.zip` }), 'url', /holds no folder/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/bad-slug.zip` }), 'url', /top folder "My_Plugin" is not a plugin slug/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/slip.zip` }), 'url', /unsafe path/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/not-a-zip.zip` }), 'url', /not a zip archive/);
  });

  it('refuses a zip over 20 MiB, declared or streamed', async () => {
    await expectInvalid(await api.post(plugins(), { url: `${base}/big.zip` }), 'url', /the plugin zip is larger than 20 MiB/);
    await expectInvalid(await api.post(plugins(), { url: `${base}/big-chunked.zip` }), 'url', /the plugin zip is larger than 20 MiB/);
  });

  it('refuses what the URL rules refuse, and what the server does not serve', async () => {
    await expectInvalid(await api.post(plugins(), { url: `${base}/missing.zip` }), 'url', /answered HTTP 404/);
    hits.length = 0;
    await expectInvalid(await api.post(plugins(), { url: `${base}/moved.zip` }), 'url', /redirect \(302\); redirects are not followed/);
    expect(hits).toEqual(['/moved.zip']);
    await expectInvalid(await api.post(plugins(), { url: 'http://10.1.2.3/x.zip' }), 'url', /private address; plugin zips must be publicly reachable/);
    await expectInvalid(await api.post(plugins(), { url: 'ftp://example.com/x.zip' }), 'url', /must use https/);
    await expectInvalid(await api.post(plugins(), { url: 'http://user:pw@127.0.0.1/x.zip' }), 'url', /credentials/);
    await expectInvalid(await api.post(plugins(), { url: 'not a url' }), 'url', /absolute URL/);
    // The API's own port is the control plane's, even on loopback.
    await expectInvalid(await api.post(plugins(), { url: `${stack.url}/v1/capabilities` }), 'url', /belongs to the control plane/);
  });
});

describe('activation, removal, update-all', () => {
  it('deactivates and activates; 404 for a plugin that is not installed; 400 for a bad slug', async () => {
    const s = await createSite(stack);
    const on = await api.post(`${plugins(s)}/akismet/activate`);
    expect(on.status, on.text).toBe(200);
    expect(on.body).toMatchObject({ slug: 'akismet', active: true });
    expect((await api.post(`${plugins(s)}/akismet/activate`)).body.active).toBe(true);
    const off = await api.post(`${plugins(s)}/akismet/deactivate`);
    expect(off.body).toMatchObject({ slug: 'akismet', active: false });
    for (const verb of ['activate', 'deactivate', 'update']) {
      const res = await api.post(`${plugins(s)}/not-installed/${verb}`);
      expect(res.status, `${verb}: ${res.text}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    await expectInvalid(await api.post(`${plugins(s)}/Bad%20Slug/activate`), 'slug');
    await expectInvalid(await api.del(`${plugins(s)}/-dash-first`), 'slug');
  });

  it('removes a plugin (204), then 404', async () => {
    const s = await createSite(stack);
    const gone = await api.del(`${plugins(s)}/akismet`);
    expect(gone.status, gone.text).toBe(204);
    expect((await api.get(plugins(s))).body.data).toEqual([]);
    const again = await api.del(`${plugins(s)}/akismet`);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
  });

  it('update-all updates what the directory has newer, keeping each active state', async () => {
    const s = await createSite(stack);
    expect((await api.post(plugins(s), { slug: 'cloud-hello', version: '1.0.0', activate: false })).status).toBe(201);
    const res = await api.post(`${plugins(s)}/update-all`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toEqual({ object: 'wordpress_plugin_updates', updated: [{ slug: 'cloud-hello', from_version: '1.0.0', to_version: '1.1.0' }] });
    const list = (await api.get(plugins(s))).body.data;
    expect(list.find((p: { slug: string }) => p.slug === 'cloud-hello')).toMatchObject({ version: '1.1.0', active: false });
    expect((await api.post(`${plugins(s)}/update-all`)).body.updated).toEqual([]);
  });
});

describe('who may', () => {
  it("answers 404 for another account's site, on reads and changes", async () => {
    const { accountId } = await createAccount(stack.db);
    const theirs = await createSite(stack, { accountId });
    for (const res of [
      await api.get(plugins(theirs)),
      await api.get(`${plugins(theirs)}/search`),
      await api.post(plugins(theirs), { slug: 'akismet' }),
      await api.post(`${plugins(theirs)}/akismet/activate`),
      await api.del(`${plugins(theirs)}/akismet`),
      await api.post(`${plugins(theirs)}/update-all`),
    ]) {
      expect(res.status, res.text).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });

  it('refuses changes on a suspended site (409), not reads; a site without the capability is 400', async () => {
    const suspended = await createSite(stack);
    await stack.db('services').where({ id: suspended.serviceId }).update({ status: 'suspended' });
    const res = await api.post(plugins(suspended), { slug: 'akismet' });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('conflict');
    expect((await api.get(plugins(suspended))).status).toBe(200);
    const without = await createSite(stack, { capabilities: { plugins: false } });
    const refused = await api.get(plugins(without));
    expect(refused.status).toBe(400);
    expect(refused.body.error.code).toBe('unsupported_for_product');
  });

  it('answers 503 backend_unavailable while the backend is down', async () => {
    await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: true } });
    try {
      for (const res of [await api.get(plugins()), await api.post(plugins(), { slug: 'akismet' }), await api.post(`${plugins()}/akismet/activate`)]) {
        expect(res.status, res.text).toBe(503);
        expect(res.body.error.code).toBe('backend_unavailable');
      }
    } finally {
      await stack.http.post('/_dev/backends/wordpress/outage', { body: { down: false } });
    }
    expect((await api.get(plugins())).status).toBe(200);
  });
});

describe('the pieces', () => {
  it('compares versions as WordPress does', () => {
    expect(compareVersions('1.1.0', '1.0.0')).toBeGreaterThan(0);
    expect(compareVersions('1.10', '1.9')).toBeGreaterThan(0);
    expect(compareVersions('6.1.10', '6.1.9')).toBeGreaterThan(0);
    expect(compareVersions('1.0', '1.0.0')).toBeLessThan(0);
    expect(compareVersions('1.0.0-rc1', '1.0.0')).toBeLessThan(0);
    expect(compareVersions('1.0.0-beta', '1.0.0-rc1')).toBeLessThan(0);
    expect(compareVersions('2.0', '2.0')).toBe(0);
  });

  it("reads real zips' central directories (deflated, __MACOSX ignored, ZIP64)", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wp-zip-test-'));
    try {
      await mkdir(path.join(dir, 'real-plugin', 'inc'), { recursive: true });
      await writeFile(path.join(dir, 'real-plugin', 'real-plugin.php'), pluginPhp('Real', '1.0').repeat(50));
      await writeFile(path.join(dir, 'real-plugin', 'inc', 'a.php'), '<?php');
      await mkdir(path.join(dir, '__MACOSX', 'real-plugin'), { recursive: true });
      await writeFile(path.join(dir, '__MACOSX', 'real-plugin', '._real-plugin.php'), 'x');
      execFileSync('zip', ['-qr', 'real.zip', 'real-plugin', '__MACOSX'], { cwd: dir });
      expect(await zipTopFolder(path.join(dir, 'real.zip'))).toBe('real-plugin');
      // A ZIP64 archive (`-fz`: the end record points at the ZIP64 records).
      execFileSync('zip', ['-qr', '-fz', 'z64.zip', 'real-plugin'], { cwd: dir });
      expect(await zipTopFolder(path.join(dir, 'z64.zip'))).toBe('real-plugin');
      // A zip with a comment after the end record.
      execFileSync('sh', ['-c', 'echo "a comment" | zip -qz real.zip'], { cwd: dir });
      expect(await zipTopFolder(path.join(dir, 'real.zip'))).toBe('real-plugin');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('takes a macOS zip’s top folder past its `./` and `__MACOSX/` entries', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'wp-zip-test-'));
    try {
      const file = path.join(dir, 'mac.zip');
      await writeFile(
        file,
        storedZip([
          { name: './' },
          { name: './mac-made/' },
          { name: './mac-made/mac-made.php', data: pluginPhp('Mac Made', '1.0.0') },
          { name: '__MACOSX/' },
          { name: '__MACOSX/mac-made/._mac-made.php', data: 'x' },
        ]),
      );
      expect(await zipTopFolder(file)).toBe('mac-made');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a zip the site refuses answers with the request’s field: `url` for a zip URL, `slug` from the directory', async () => {
    const real = stack.api.deps.providers.wordpress;
    const refusing = Object.create(real) as typeof real;
    for (const param of ['zip', 'slug']) {
      refusing.installPlugin = async () => {
        throw new BackendRefusedError('wordpress', 'The zip holds a symbolic link.', 'validation_failed', param);
      };
      const byUrl = await installPlugin(
        { wp: refusing, policy: { allowInsecure: true } },
        site.serviceId,
        { kind: 'url', url: `${base}/my-plugin.zip` },
        true,
      ).catch((e: unknown) => e);
      expect(byUrl, param).toMatchObject({ name: 'BackendRefusedError', message: 'The zip holds a symbolic link.', code: 'validation_failed', param: 'url' });
      const byDirectory = await installPlugin(
        { wp: refusing, policy: { allowInsecure: true } },
        site.serviceId,
        { kind: 'directory', slug: 'cloud-hello' },
        true,
      ).catch((e: unknown) => e);
      expect(byDirectory, param).toMatchObject({ name: 'BackendRefusedError', param: 'slug' });
    }
    // Another param (or none) goes up as it is.
    refusing.installPlugin = async () => {
      throw new BackendRefusedError('wordpress', 'No.', 'refused', null);
    };
    expect(
      await installPlugin({ wp: refusing, policy: { allowInsecure: true } }, site.serviceId, { kind: 'url', url: `${base}/my-plugin.zip` }, true).catch(
        (e: unknown) => e,
      ),
    ).toMatchObject({ param: null });
  });

  it('downloads with a deadline and a typed, customer-safe error', async () => {
    const stall = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.write('x');
    });
    await new Promise<void>((resolve) => stall.listen(0, '127.0.0.1', resolve));
    const dir = await mkdtemp(path.join(tmpdir(), 'wp-dl-test-'));
    try {
      const url = `http://localhost:${(stall.address() as AddressInfo).port}/secret-token-in-path.zip?sig=abc`;
      const err = await downloadToFile(url, path.join(dir, 'f'), { policy: { allowInsecure: true }, maxBytes: 10_000, timeoutMs: 300 }).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(DownloadError);
      expect(err).toMatchObject({ reason: 'timeout', message: 'the file did not arrive within 0.3 s' });
      const refused = await downloadToFile(url, path.join(dir, 'g'), { policy: { allowInsecure: false }, maxBytes: 10, timeoutMs: 300 }).catch(
        (e: unknown) => e,
      );
      expect(refused).toMatchObject({ reason: 'refused', message: 'the URL is refused: must use https' });
      expect(String((refused as Error).message)).not.toContain('secret-token');
    } finally {
      stall.closeAllConnections();
      await new Promise((resolve) => stall.close(resolve));
      await rm(dir, { recursive: true, force: true });
    }
  });
});
