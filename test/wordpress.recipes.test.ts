import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newUlidId } from '../common/ids';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../domain/scopes';
import { purgeExpiredRecipeSecrets, storeRecipeSecrets } from '../domain/wordpress/recipe-store';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import {
  assertRequires,
  checkRequires,
  isPlatformConstant,
  isPlatformOption,
  parseManifest,
  parseWpCommand,
  satisfiesConstraint,
} from '../domain/wordpress/recipes';
import { constantNameAllowed } from '../providers/wordpress/site-files';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';

/**
 * The recipe registry (SPEC "Recipes", "Recipe manifest"; DECISIONS "Hosted WordPress"): every
 * validation rule with the `param` it answers, immutable versions and the PUT rules, the quotas of
 * 20 recipes and 50 versions, reads and lists, isolation between accounts, the one claim of an
 * apply's secrets, and the dev clean-up. No workflow runs here: the apply is tested on its own.
 */
let stack: Stack;
let other: { accountId: number; key: string };
let site: { id: string; serviceId: number };
let otherSite: { id: string; serviceId: number };

const EXAMPLE = {
  apiVersion: 'recipe/v1',
  name: 'shop-basics',
  version: '1.0.0',
  requires: { php: '>=8.1 <9', wp: '>=6.0', memory_mb: 128 },
  plugins: [
    { slug: 'akismet', version: '5.0.2', activate: true },
    { slug: 'cloud-hello', url: 'https://plugins.example.com/cloud-hello.zip', sha256: 'a'.repeat(64), activate: false },
  ],
  constants: { WP_POST_REVISIONS: 5, WP_DEBUG: false, SHOP_MODE: 'live', WPLANG: 'de_DE' },
  options: { blogdescription: 'Just another shop', posts_per_page: 12, shop_settings: { currency: 'EUR', zones: ['DE', 'AT'] } },
  roles: [{ name: 'shop_manager', display: 'Shop manager', caps: ['read', 'edit_posts'] }],
  secrets: ['SHOP_API_SECRET'],
  verify: [
    { wp: 'plugin is-active akismet' },
    { wp: 'plugin is-installed cloud-hello' },
    { wp: 'option get blogdescription' },
    { wp: 'role exists shop_manager' },
    { wp: 'core version' },
    { http: { path: '/', method: 'GET', expect: 200 } },
    { http: { path: '/wp-json/shop/v1/ping', method: 'POST', body: '{"ping":true}', expect: 201 } },
  ],
};

const minimal = (name: string, version = '1.0.0') => ({ apiVersion: 'recipe/v1', name, version });

const as = (token: string) => ({
  get: (p: string) => stack.http.get(p, { token }),
  post: (p: string, body?: unknown, headers?: Record<string, string>) => stack.http.post(p, { token, body, headers }),
  put: (p: string, body?: unknown) => stack.http.put(p, { token, body }),
});
const api = () => as(stack.owner.key);

async function wordpressService(accountId: number, status = 'active') {
  const svc = await createService(stack.db, accountId, { family: 'other', product: 'wordpress-starter', status });
  await stack.db('services').where({ id: svc.serviceId }).update({ product_family: 'wordpress' });
  return svc;
}

async function storeSecrets(serviceId: number, ttlMs?: number) {
  const operationId = newUlidId('op');
  await storeRecipeSecrets(stack.db, stack.api.deps.keyring, {
    operationId,
    serviceId,
    recipe: 'shop-basics',
    version: '1.0.0',
    secrets: { SHOP_API_SECRET: 'ab'.repeat(32) },
    ...(ttlMs === undefined ? {} : { ttlMs }),
  });
  return operationId;
}

beforeAll(async () => {
  stack = await startStack({
    temporal: 'none',
    env: {
      RATE_LIMIT_DEFAULT_PER_KEY: '100000',
      RATE_LIMIT_DEFAULT_PER_ACCOUNT: '100000',
      RATE_LIMIT_MUTATIONS_PER_KEY: '100000',
      RATE_LIMIT_MUTATIONS_PER_ACCOUNT: '100000',
    },
  });
  const { accountId } = await createAccount(stack.db);
  const { userId } = await createUser(stack.db, accountId, { isOwner: true });
  const key = await createApiKey(stack.db, accountId, userId, { scopes: ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s)) });
  other = { accountId, key: key.token };
  site = await wordpressService(stack.owner.accountId);
  otherSite = await wordpressService(stack.owner.accountId);
}, 60_000);
afterAll(() => stack?.close());

describe('registering and reading', () => {
  it('registers a complete manifest: 201 wordpress_recipe_version with its Location, then reads it back', async () => {
    const made = await api().post('/v1/wordpress/recipes', EXAMPLE);
    expect(made.status, made.text).toBe(201);
    expect(made.headers.get('location')).toBe('/v1/wordpress/recipes/shop-basics/versions/1.0.0');
    expect(made.body).toEqual({ object: 'wordpress_recipe_version', name: 'shop-basics', version: '1.0.0', manifest: EXAMPLE, created_at: expect.any(String) });

    const recipe = await api().get('/v1/wordpress/recipes/shop-basics');
    expect(recipe.status, recipe.text).toBe(200);
    expect(recipe.body).toEqual({
      object: 'wordpress_recipe',
      name: 'shop-basics',
      latest_version: '1.0.0',
      versions: ['1.0.0'],
      manifest: EXAMPLE,
      created_at: expect.any(String),
    });
    const version = await api().get('/v1/wordpress/recipes/shop-basics/versions/1.0.0');
    expect(version.status, version.text).toBe(200);
    expect(version.body).toEqual(made.body);

    const list = await api().get('/v1/wordpress/recipes');
    expect(list.status, list.text).toBe(200);
    expect(list.body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(list.body.data.map((r: { name: string }) => r.name)).toContain('shop-basics');
  });

  it('accepts the smallest manifest: apiVersion, name and version', async () => {
    const made = await api().post('/v1/wordpress/recipes', minimal('tiny'));
    expect(made.status, made.text).toBe(201);
    expect(made.body.manifest).toEqual(minimal('tiny'));
  });

  it('answers 404 for an unknown recipe or version', async () => {
    for (const path of [
      '/v1/wordpress/recipes/no-such-recipe',
      '/v1/wordpress/recipes/shop-basics/versions/9.9.9',
      '/v1/wordpress/recipes/no-such/versions/1.0.0',
    ]) {
      const res = await api().get(path);
      expect(res.status, path).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
  });

  it('paginates the list with opaque cursors, newest first', async () => {
    for (const n of [1, 2, 3]) expect((await api().post('/v1/wordpress/recipes', minimal(`paged-${n}`))).status).toBe(201);
    const names: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { body: { data: Array<{ name: string }>; next_cursor: string | null; has_more: boolean } } = await api().get(
        `/v1/wordpress/recipes?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
      );
      expect(page.body.data.length).toBeLessThanOrEqual(2);
      names.push(...page.body.data.map((r) => r.name));
      cursor = page.body.has_more ? page.body.next_cursor : null;
    } while (cursor);
    expect(names.slice(0, 3)).toEqual(['paged-3', 'paged-2', 'paged-1']);
    expect(new Set(names).size).toBe(names.length);
    expect((await api().get('/v1/wordpress/recipes?cursor=forged.cursor')).body.error).toMatchObject({ code: 'validation_failed', param: 'cursor' });
  });

  it('replays a registration sent again with the same Idempotency-Key', async () => {
    const headers = { 'idempotency-key': newUlidId('idem') };
    const first = await api().post('/v1/wordpress/recipes', minimal('replayed'), headers);
    const again = await api().post('/v1/wordpress/recipes', minimal('replayed'), headers);
    expect(first.status, first.text).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);
    // Without the key, the name is taken.
    expect((await api().post('/v1/wordpress/recipes', minimal('replayed'))).status).toBe(409);
  });
});

/** `leaf` inside `depth` nested arrays (`[[...[leaf]...]]`). */
function nested(depth: number, leaf: unknown): unknown {
  let value = leaf;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
}

/** A manifest with one change: `edit` receives a deep copy of EXAMPLE (named `invalid`) and changes it. */
function variant(edit: (m: any) => void): unknown {
  const m = structuredClone({ ...EXAMPLE, name: 'invalid' }) as any;
  edit(m);
  return m;
}

const INVALID: Array<[string, unknown, string]> = [
  ['a body that is not an object', ['recipe/v1'], 'body'],
  ['no apiVersion', variant((m) => delete m.apiVersion), 'apiVersion'],
  ['another apiVersion', variant((m) => (m.apiVersion = 'recipe/v2')), 'apiVersion'],
  ['no name', variant((m) => delete m.name), 'name'],
  ['an upper-case name', variant((m) => (m.name = 'Shop')), 'name'],
  ['a name starting with a hyphen', variant((m) => (m.name = '-shop')), 'name'],
  ['a name of 64 characters', variant((m) => (m.name = 'a'.repeat(64))), 'name'],
  ['no version', variant((m) => delete m.version), 'version'],
  ['a version of two parts', variant((m) => (m.version = '1.0')), 'version'],
  ['a version with a leading zero', variant((m) => (m.version = '1.01.0')), 'version'],
  ['a version with a v', variant((m) => (m.version = 'v1.0.0')), 'version'],
  ['an unknown member', variant((m) => (m.description = 'x')), 'description'],
  ['a php constraint with a space after the operator', variant((m) => (m.requires.php = '>= 8.1')), 'requires.php'],
  ['a wp constraint with a tilde', variant((m) => (m.requires.wp = '~6.0')), 'requires.wp'],
  ['a constraint that is a word', variant((m) => (m.requires.php = 'latest')), 'requires.php'],
  ['memory_mb as a string', variant((m) => (m.requires.memory_mb = '256')), 'requires.memory_mb'],
  ['memory_mb not an integer', variant((m) => (m.requires.memory_mb = 1.5)), 'requires.memory_mb'],
  ['an unknown requirement', variant((m) => (m.requires.mysql = '>=8')), 'requires.mysql'],
  ['41 plugins', variant((m) => (m.plugins = Array.from({ length: 41 }, (_, i) => ({ slug: `p${i}` })))), 'plugins'],
  ['a plugin without slug or url', variant((m) => (m.plugins[0] = { version: '1.0.0' })), 'plugins.0.slug'],
  ['a url without sha256', variant((m) => m.plugins.push({ url: 'https://x.example.com/p.zip' })), 'plugins.2.sha256'],
  ['a sha256 that is not 64 hex digits', variant((m) => (m.plugins[1].sha256 = 'abc')), 'plugins.1.sha256'],
  ['a sha256 without url', variant((m) => (m.plugins[0].sha256 = 'b'.repeat(64))), 'plugins.0.sha256'],
  ['a plugin url on ftp', variant((m) => (m.plugins[1].url = 'ftp://x.example.com/p.zip')), 'plugins.1.url'],
  ['a plugin url with a password', variant((m) => (m.plugins[1].url = 'https://u:p@x.example.com/p.zip')), 'plugins.1.url'],
  ['a plugin url that is not a URL', variant((m) => (m.plugins[1].url = 'plugin.zip')), 'plugins.1.url'],
  ['a plugin slug with a space', variant((m) => (m.plugins[0].slug = 'my plugin')), 'plugins.0.slug'],
  ['activate as a string', variant((m) => (m.plugins[0].activate = 'yes')), 'plugins.0.activate'],
  ['a plugin twice', variant((m) => (m.plugins[1].slug = 'akismet')), 'plugins.1.slug'],
  ['an unknown plugin member', variant((m) => (m.plugins[0].zip = 'x')), 'plugins.0.zip'],
  ['DB_HOST', variant((m) => (m.constants.DB_HOST = 'db.example.com')), 'constants.DB_HOST'],
  ['DB_NAME', variant((m) => (m.constants.DB_NAME = 'other')), 'constants.DB_NAME'],
  ['db_password (case)', variant((m) => (m.constants.db_password = 'x')), 'constants.db_password'],
  ['WP_HOME', variant((m) => (m.constants.WP_HOME = 'https://x.example.com')), 'constants.WP_HOME'],
  ['WP_SITEURL', variant((m) => (m.constants.WP_SITEURL = 'https://x.example.com')), 'constants.WP_SITEURL'],
  ['WP_CONTENT_DIR', variant((m) => (m.constants.WP_CONTENT_DIR = '/tmp')), 'constants.WP_CONTENT_DIR'],
  ['WP_PLUGIN_URL', variant((m) => (m.constants.WP_PLUGIN_URL = 'https://x.example.com')), 'constants.WP_PLUGIN_URL'],
  ['WPMU_PLUGIN_DIR', variant((m) => (m.constants.WPMU_PLUGIN_DIR = '/tmp')), 'constants.WPMU_PLUGIN_DIR'],
  ['MULTISITE', variant((m) => (m.constants.MULTISITE = true)), 'constants.MULTISITE'],
  ['WP_ALLOW_MULTISITE', variant((m) => (m.constants.WP_ALLOW_MULTISITE = true)), 'constants.WP_ALLOW_MULTISITE'],
  ['DOMAIN_CURRENT_SITE', variant((m) => (m.constants.DOMAIN_CURRENT_SITE = 'x')), 'constants.DOMAIN_CURRENT_SITE'],
  ['ABSPATH', variant((m) => (m.constants.ABSPATH = '/')), 'constants.ABSPATH'],
  ['NONCE_SALT', variant((m) => (m.constants.NONCE_SALT = 'x')), 'constants.NONCE_SALT'],
  ['COOKIE_DOMAIN', variant((m) => (m.constants.COOKIE_DOMAIN = 'x')), 'constants.COOKIE_DOMAIN'],
  ['a CLOUD_ constant', variant((m) => (m.constants.CLOUD_AUTOLOGIN = 'x')), 'constants.CLOUD_AUTOLOGIN'],
  ['a constant name starting with a digit', variant((m) => (m.constants['1BAD'] = 'x')), 'constants.1BAD'],
  ['a constant name with a hyphen', variant((m) => (m.constants['MY-CONST'] = 'x')), 'constants.MY-CONST'],
  ['a constant that is an object', variant((m) => (m.constants.SHOP_MODE = { a: 1 })), 'constants.SHOP_MODE'],
  ['a constant that is null', variant((m) => (m.constants.SHOP_MODE = null)), 'constants.SHOP_MODE'],
  ['a constant with a newline', variant((m) => (m.constants.SHOP_MODE = 'a\nb')), 'constants.SHOP_MODE'],
  ['201 options', variant((m) => (m.options = Object.fromEntries(Array.from({ length: 201 }, (_, i) => [`opt_${i}`, i])))), 'options'],
  ['the siteurl option', variant((m) => (m.options.siteurl = 'https://x.example.com')), 'options.siteurl'],
  ['the active_plugins option', variant((m) => (m.options.active_plugins = [])), 'options.active_plugins'],
  ['the roles option', variant((m) => (m.options.wp_user_roles = {})), 'options.wp_user_roles'],
  ['the cloud_recipe option', variant((m) => (m.options.cloud_recipe = {})), 'options.cloud_recipe'],
  ['an option name with a space', variant((m) => (m.options['my option'] = 1)), 'options.my option'],
  ['a role without display', variant((m) => delete m.roles[0].display), 'roles.0.display'],
  ['a role with caps as a string', variant((m) => (m.roles[0].caps = 'read')), 'roles.0.caps'],
  ['a role name with a space', variant((m) => (m.roles[0].name = 'shop manager')), 'roles.0.name'],
  ['a role twice', variant((m) => m.roles.push({ name: 'shop_manager', display: 'Again' })), 'roles.1.name'],
  ['an unknown role member', variant((m) => (m.roles[0].color = 'red')), 'roles.0.color'],
  ['a platform secret', variant((m) => (m.secrets = ['AUTH_SALT'])), 'secrets.0'],
  ['a secret named like a database setting', variant((m) => (m.secrets = ['OK_ONE', 'DB_PASSWORD'])), 'secrets.1'],
  ['a secret name with a hyphen', variant((m) => (m.secrets = ['my-secret'])), 'secrets.0'],
  ['a secret twice', variant((m) => (m.secrets = ['SHOP_API_SECRET', 'SHOP_API_SECRET'])), 'secrets.1'],
  ['a secret also in constants', variant((m) => (m.secrets = ['SHOP_MODE'])), 'secrets.0'],
  ['secrets as a string', variant((m) => (m.secrets = 'SHOP_API_SECRET')), 'secrets'],
  ['a wp command outside the allowlist', variant((m) => (m.verify[0] = { wp: 'eval phpinfo()' })), 'verify.0.wp'],
  ['option update', variant((m) => (m.verify[0] = { wp: 'option update blogname x' })), 'verify.0.wp'],
  ['plugin activate', variant((m) => (m.verify[0] = { wp: 'plugin activate akismet' })), 'verify.0.wp'],
  ['a leading wp', variant((m) => (m.verify[0] = { wp: 'wp core version' })), 'verify.0.wp'],
  ['an extra argument', variant((m) => (m.verify[0] = { wp: 'core version --extra' })), 'verify.0.wp'],
  ['a check with wp and http', variant((m) => (m.verify[0] = { wp: 'core version', http: { path: '/' } })), 'verify.0'],
  ['an empty check', variant((m) => (m.verify[0] = {})), 'verify.0'],
  ['an http path without a slash', variant((m) => (m.verify[5].http.path = 'index.php')), 'verify.5.http.path'],
  ['an http path to another host', variant((m) => (m.verify[5].http.path = '//evil.example.com/')), 'verify.5.http.path'],
  ['an unknown http method', variant((m) => (m.verify[5].http.method = 'TRACE')), 'verify.5.http.method'],
  ['expect as a string', variant((m) => (m.verify[5].http.expect = 'ok')), 'verify.5.http.expect'],
  ['a GET with a body', variant((m) => (m.verify[5].http.body = 'x')), 'verify.5.http.body'],
  ['DISALLOW_FILE_EDIT', variant((m) => (m.constants.DISALLOW_FILE_EDIT = false)), 'constants.DISALLOW_FILE_EDIT'],
  ['AUTOMATIC_UPDATER_DISABLED', variant((m) => (m.constants.AUTOMATIC_UPDATER_DISABLED = false)), 'constants.AUTOMATIC_UPDATER_DISABLED'],
  ['WP_AUTO_UPDATE_CORE', variant((m) => (m.constants.WP_AUTO_UPDATE_CORE = true)), 'constants.WP_AUTO_UPDATE_CORE'],
  ['a WPMU_ constant', variant((m) => (m.constants.WPMU_ACCEL_REDIRECT = true)), 'constants.WPMU_ACCEL_REDIRECT'],
  ['a WP_CONTENT_ constant', variant((m) => (m.constants.wp_content_extra = 'x')), 'constants.wp_content_extra'],
  ['a WP_PLUGIN_ constant', variant((m) => (m.constants.WP_PLUGIN_EXTRA = 'x')), 'constants.WP_PLUGIN_EXTRA'],
  ['a WP_CONTENT_ secret', variant((m) => (m.secrets = ['WP_CONTENT_KEY'])), 'secrets.0'],
  ['the cloud_autologin option', variant((m) => (m.options.cloud_autologin = [])), 'options.cloud_autologin'],
  ['the cloud_cdn_url option', variant((m) => (m.options.CLOUD_CDN_URL = 'https://cdn.example.com')), 'options.CLOUD_CDN_URL'],
  ['an option value nested 33 deep', variant((m) => (m.options.deep = nested(33, 'x'))), 'options.deep'],
  ['an http path with non-ASCII characters', variant((m) => (m.verify[5].http.path = '/日本')), 'verify.5.http.path'],
  ['an http path with a control character', variant((m) => (m.verify[5].http.path = '/a\u0001b')), 'verify.5.http.path'],
  ['an http path with a bad percent-encoding', variant((m) => (m.verify[5].http.path = '/%zz')), 'verify.5.http.path'],
  ['an http path with a fragment', variant((m) => (m.verify[5].http.path = '/#top')), 'verify.5.http.path'],
  ['a single quote in an option', variant((m) => (m.options.blogdescription = "Bob's shop")), 'options.blogdescription'],
  ['a semicolon deep in an option', variant((m) => (m.options.shop_settings.zones[1] = 'AT;DROP')), 'options.shop_settings.zones.1'],
  ['a semicolon in an option key', variant((m) => (m.options.shop_settings['a;b'] = 1)), 'options.shop_settings.a;b'],
  ['a backslash in a constant', variant((m) => (m.constants.SHOP_MODE = 'C:\\shop')), 'constants.SHOP_MODE'],
  ['a quote in a role', variant((m) => (m.roles[0].display = "Shop's manager")), 'roles.0.display'],
  ['a semicolon in a verify command', variant((m) => (m.verify[4].wp = 'core version; rm -rf /')), 'verify.4.wp'],
  ['a quote in a plugin url', variant((m) => (m.plugins[1].url = "https://x.example.com/p'.zip")), 'plugins.1.url'],
];

describe('validation: a fault answers 400 recipe_invalid with param naming the field, and registers nothing', () => {
  it.each(INVALID)('%s -> %s', async (_what, manifest, param) => {
    const res = await api().post('/v1/wordpress/recipes', manifest);
    expect(res.status, res.text).toBe(400);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'recipe_invalid', param });
    expect(res.body.error.message).toContain(param);
    expect(await stack.db('wordpress_recipes').where({ name: 'invalid' }).first()).toBeUndefined();
  });

  it('the same rules hold for a PUT', async () => {
    const res = await api().put(
      '/v1/wordpress/recipes/shop-basics',
      variant((m) => {
        m.name = 'shop-basics';
        m.version = '9.0.0';
        m.constants.DB_HOST = 'x';
      }),
    );
    expect(res.body.error).toMatchObject({ code: 'recipe_invalid', param: 'constants.DB_HOST' });
  });

  it('accepts what the rules allow at their limits: an option 32 deep, percent-encoded and query paths', async () => {
    const manifest = variant((m) => {
      m.name = 'at-the-limits';
      m.options.deep = nested(31, { leaf: 1 });
      m.verify[5].http.path = '/%E6%97%A5%E6%9C%AC?p=1&q=a+b,c:d@e~f(g)*!$';
    });
    const res = await api().post('/v1/wordpress/recipes', manifest);
    expect(res.status, res.text).toBe(201);
  });

  it('a manifest nested 20,000 deep is refused with 400, never a 500; the validator answers recipe_invalid at the depth where it goes too far', async () => {
    // Sent as text: JSON.stringify itself cannot write it.
    const arrays = (depth: number, leaf: string) => `${'['.repeat(depth)}${leaf}${']'.repeat(depth)}`;
    const head = '"apiVersion":"recipe/v1","name":"invalid","version":"1.0.0"';
    const post = (rawBody: string) =>
      stack.http.post('/v1/wordpress/recipes', { token: stack.owner.key, rawBody, headers: { 'content-type': 'application/json' } });
    // Over HTTP the API's own guard (api/app.ts MAX_JSON_DEPTH, 64) answers first, before the body is parsed.
    for (const rawBody of [`{${head},"options":{"deep":${arrays(20_000, '1')}}}`, `{${head},"plugins":${arrays(20_000, 'null')}}`, arrays(20_000, '"x"')]) {
      const res = await post(rawBody);
      expect(res.status, res.text.slice(0, 300)).toBe(400);
      expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'body' });
    }
    // Within it, the validator's own limit for option values.
    const within = await post(`{${head},"options":{"deep":${arrays(60, '1')}}}`);
    expect(within.body.error).toMatchObject({ code: 'recipe_invalid', param: 'options.deep' });
    // The validator itself (seeds, PUT, anything that is not this route) walks without recursion.
    const zeros = (n: number) => Array<string>(n).fill('0');
    for (const [manifest, param] of [
      [{ ...minimal('invalid'), options: { deep: nested(20_000, 1) } }, ['options', 'deep', ...zeros(62)].join('.')],
      [{ ...minimal('invalid'), plugins: nested(20_000, null) }, ['plugins', ...zeros(63)].join('.')],
      [{ ...minimal('invalid'), roles: [{ name: 'x', display: 'x', caps: nested(20_000, 'read') }] }, ['roles', '0', 'caps', ...zeros(61)].join('.')],
    ] as const) {
      expect(() => parseManifest(manifest)).toThrow(expect.objectContaining({ code: 'recipe_invalid', param }));
    }
  });

  it('refuses every option the site helper refuses to update (CLOUD_HELPER_PLATFORM_OPTIONS)', async () => {
    const php = await readFile(path.join(__dirname, '../providers/wordpress/php/cloud-helper.php'), 'utf8');
    const list = /const CLOUD_HELPER_PLATFORM_OPTIONS = array\(([^)]*)\);/.exec(php);
    expect(list).not.toBeNull();
    const names = [...list![1].matchAll(/'([^']+)'/g)].map((m) => m[1]);
    expect(names.length).toBeGreaterThan(0);
    for (const name of names) expect(isPlatformOption(name), name).toBe(true);
  });

  it('refuses every constant the site configuration refuses to take (site-files constantNameAllowed)', () => {
    for (const name of ['DISALLOW_FILE_EDIT', 'WPMU_X', 'WP_CONTENT_X', 'WP_PLUGIN_X', 'MYSQL_X', 'DB_X', 'CLOUD_X', 'NONCE_SALT']) {
      expect(constantNameAllowed(name), name).toBe(false);
      expect(isPlatformConstant(name), name).toBe(true);
    }
    expect(isPlatformConstant('WP_POST_REVISIONS')).toBe(false);
  });

  it('http plugin URLs pass only with ALLOW_INSECURE_TARGETS (this stack has it; production does not)', () => {
    const manifest = variant((m) => (m.plugins[1].url = 'http://127.0.0.1:9/p.zip'));
    expect(() => parseManifest(manifest)).toThrow(expect.objectContaining({ code: 'recipe_invalid', param: 'plugins.1.url' }));
    expect(parseManifest(manifest, { allowInsecureUrls: true }).plugins?.[1].url).toBe('http://127.0.0.1:9/p.zip');
  });

  it('parses the wp allowlist and nothing else', () => {
    expect(parseWpCommand('option get blogname')).toEqual({ command: 'option get', name: 'blogname' });
    expect(parseWpCommand(' plugin  is-installed akismet ')).toEqual({ command: 'plugin is-installed', slug: 'akismet' });
    expect(parseWpCommand('role exists editor')).toEqual({ command: 'role exists', name: 'editor' });
    expect(parseWpCommand('core version')).toEqual({ command: 'core version' });
    for (const line of ['core update', 'option get', 'option get a b', 'role create x', 'plugin is-active Bad/Slug', 'db query x', ''])
      expect(parseWpCommand(line), line).toBeNull();
  });
});

describe('publishing versions (PUT)', () => {
  it('publishes a greater version; the older stays as it was', async () => {
    const next = { ...EXAMPLE, version: '1.1.0', options: { blogdescription: 'A better shop' } };
    const res = await api().put('/v1/wordpress/recipes/shop-basics', next);
    expect(res.status, res.text).toBe(201);
    expect(res.headers.get('location')).toBe('/v1/wordpress/recipes/shop-basics/versions/1.1.0');
    expect(res.body).toMatchObject({ object: 'wordpress_recipe_version', name: 'shop-basics', version: '1.1.0', manifest: next });
    const recipe = await api().get('/v1/wordpress/recipes/shop-basics');
    expect(recipe.body).toMatchObject({ latest_version: '1.1.0', versions: ['1.1.0', '1.0.0'], manifest: next });
    expect((await api().get('/v1/wordpress/recipes/shop-basics/versions/1.0.0')).body.manifest).toEqual(EXAMPLE);
  });

  it('compares versions numerically: 1.10.0 is above 1.9.0', async () => {
    expect((await api().put('/v1/wordpress/recipes/shop-basics', { ...EXAMPLE, version: '1.9.0' })).status).toBe(201);
    expect((await api().put('/v1/wordpress/recipes/shop-basics', { ...EXAMPLE, version: '1.10.0' })).status).toBe(201);
    expect((await api().get('/v1/wordpress/recipes/shop-basics')).body.versions).toEqual(['1.10.0', '1.9.0', '1.1.0', '1.0.0']);
  });

  it('refuses a version not above the latest with 409 conflict: published versions are immutable', async () => {
    for (const version of ['1.10.0', '1.9.0', '0.1.0']) {
      const res = await api().put('/v1/wordpress/recipes/shop-basics', { ...EXAMPLE, version, options: { blogdescription: 'Changed' } });
      expect(res.status, version).toBe(409);
      expect(res.body.error.code).toBe('conflict');
    }
    expect((await api().get('/v1/wordpress/recipes/shop-basics/versions/1.9.0')).body.manifest).toEqual({ ...EXAMPLE, version: '1.9.0' });
  });

  it("refuses a manifest whose name is not the path's (400 recipe_invalid, param name), and an unknown recipe (404)", async () => {
    const renamed = await api().put('/v1/wordpress/recipes/shop-basics', { ...EXAMPLE, name: 'tiny', version: '5.0.0' });
    expect(renamed.status).toBe(400);
    expect(renamed.body.error).toMatchObject({ code: 'recipe_invalid', param: 'name' });
    const unknown = await api().put('/v1/wordpress/recipes/never-registered', minimal('never-registered', '2.0.0'));
    expect(unknown.status).toBe(404);
    expect(unknown.body.error.code).toBe('not_found');
  });

  it('refuses a second registration of a name with 409 already_exists (param name)', async () => {
    const res = await api().post('/v1/wordpress/recipes', { ...EXAMPLE, version: '7.0.0' });
    expect(res.status).toBe(409);
    expect(res.body.error).toMatchObject({ code: 'already_exists', param: 'name' });
  });

  it('two registrations of one name at once: one 201, one 409', async () => {
    const results = await Promise.all([1, 2, 3].map(() => api().post('/v1/wordpress/recipes', minimal('raced'))));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409, 409]);
    expect(await stack.db('wordpress_recipes').where({ account_id: stack.owner.accountId, name: 'raced' })).toHaveLength(1);
  });

  it('two publications of one version at once: one 201, one 409', async () => {
    const results = await Promise.all([1, 2].map(() => api().put('/v1/wordpress/recipes/raced', minimal('raced', '2.0.0'))));
    expect(results.map((r) => r.status).sort()).toEqual([201, 409]);
  });
});

describe('quotas', () => {
  it('20 recipes per account: the 21st is 429 quota_exceeded', async () => {
    const { accountId } = await createAccount(stack.db);
    const { userId } = await createUser(stack.db, accountId, { isOwner: true });
    const { token } = await createApiKey(stack.db, accountId, userId, { scopes: ['wordpress:read', 'wordpress:write'] });
    const first = await as(token).post('/v1/wordpress/recipes', minimal('quota-0'));
    expect(first.status, first.text).toBe(201);
    await stack.db('wordpress_recipes').insert(Array.from({ length: 19 }, (_, i) => ({ account_id: accountId, name: `filler-${i}` })));
    const over = await as(token).post('/v1/wordpress/recipes', minimal('quota-21'));
    expect(over.status, over.text).toBe(429);
    expect(over.body.error).toMatchObject({ type: 'rate_limit_error', code: 'quota_exceeded' });
    // An existing name is still answered as such.
    expect((await as(token).post('/v1/wordpress/recipes', minimal('quota-0'))).body.error.code).toBe('already_exists');
    // Versions of an existing recipe do not count against it.
    expect((await as(token).put('/v1/wordpress/recipes/quota-0', minimal('quota-0', '1.1.0'))).status).toBe(201);
    // Another account is not affected.
    expect((await as(other.key).post('/v1/wordpress/recipes', minimal('quota-21'))).status).toBe(201);
  });

  it('50 versions per recipe: the 51st is 429 quota_exceeded', async () => {
    expect((await api().post('/v1/wordpress/recipes', minimal('many-versions', '0.0.0'))).status).toBe(201);
    const recipe = await stack.db('wordpress_recipes').where({ account_id: stack.owner.accountId, name: 'many-versions' }).first();
    await stack.db('wordpress_recipe_versions').insert(
      Array.from({ length: 49 }, (_, i) => ({
        recipe_id: recipe.id,
        version: `0.0.${i + 1}`,
        version_parts: [0, 0, i + 1],
        manifest: JSON.stringify(minimal('many-versions', `0.0.${i + 1}`)),
      })),
    );
    const over = await api().put('/v1/wordpress/recipes/many-versions', minimal('many-versions', '1.0.0'));
    expect(over.status, over.text).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    const recipeView = await api().get('/v1/wordpress/recipes/many-versions');
    expect(recipeView.body.versions).toHaveLength(50);
    expect(recipeView.body.latest_version).toBe('0.0.49');
  });
});

describe('isolation between accounts', () => {
  it("another account cannot read, list or publish this account's recipe, and may register the same name", async () => {
    const them = as(other.key);
    for (const path of ['/v1/wordpress/recipes/shop-basics', '/v1/wordpress/recipes/shop-basics/versions/1.0.0']) {
      const res = await them.get(path);
      expect(res.status, path).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    expect((await them.get('/v1/wordpress/recipes?limit=100')).body.data.map((r: { name: string }) => r.name)).not.toContain('shop-basics');
    expect((await them.put('/v1/wordpress/recipes/shop-basics', { ...EXAMPLE, version: '9.0.0' })).status).toBe(404);
    const theirs = await them.post('/v1/wordpress/recipes', { ...EXAMPLE, version: '3.0.0' });
    expect(theirs.status, theirs.text).toBe(201);
    expect((await api().get('/v1/wordpress/recipes/shop-basics')).body.latest_version).toBe('1.10.0');
  });
});

describe('claiming secrets', () => {
  it('claims once: the values, then 404; never replayed by Idempotency-Key, never cached', async () => {
    const operation = await storeSecrets(site.serviceId);
    const headers = { 'idempotency-key': newUlidId('idem') };
    const claim = await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation }, headers);
    expect(claim.status, claim.text).toBe(200);
    expect(claim.body).toEqual({ object: 'recipe_secrets', operation, recipe: 'shop-basics', version: '1.0.0', secrets: { SHOP_API_SECRET: 'ab'.repeat(32) } });
    expect(claim.headers.get('cache-control')).toBe('no-store');
    const again = await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation }, headers);
    expect(again.status).toBe(404);
    expect(again.body.error.code).toBe('not_found');
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: operation }).first()).toBeUndefined();
  });

  it('the values are sealed at rest', async () => {
    const operation = await storeSecrets(site.serviceId);
    const row = await stack.db('wordpress_recipe_secrets').where({ operation_id: operation }).first();
    expect(row.secrets_sealed).not.toContain('abab');
    expect(row.expires_at.getTime()).toBeGreaterThan(Date.now() + 23 * 3_600_000);
  });

  it('an operation id without its prefix, in lower case, claims the same', async () => {
    const operation = await storeSecrets(site.serviceId);
    const claim = await api().post(`/v1/wordpress/${site.serviceId}/recipes/secrets`, { operation: operation.slice(3).toLowerCase() });
    expect(claim.status, claim.text).toBe(200);
    expect(claim.body.operation).toBe(operation);
  });

  it('two claims at once: one gets the values, the other 404', async () => {
    const operation = await storeSecrets(site.serviceId);
    const results = await Promise.all([1, 2].map(() => api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation })));
    expect(results.map((r) => r.status).sort()).toEqual([200, 404]);
  });

  it('an expired claim is 404 and its row is deleted', async () => {
    const operation = await storeSecrets(site.serviceId, -1_000);
    const claim = await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation });
    expect(claim.status).toBe(404);
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: operation }).first()).toBeUndefined();
  });

  it("another site's operation, an unknown or malformed operation: 404, and the row stays", async () => {
    const operation = await storeSecrets(site.serviceId);
    expect((await api().post(`/v1/wordpress/${otherSite.id}/recipes/secrets`, { operation })).status).toBe(404);
    expect((await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation: newUlidId('op') })).status).toBe(404);
    expect((await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation: 'not-an-operation' })).status).toBe(404);
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: operation }).first()).toBeDefined();
  });

  it('another account, a key whose allowlist leaves the site out, or a service that is no site: 404', async () => {
    const operation = await storeSecrets(site.serviceId);
    const theirs = await as(other.key).post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation });
    expect(theirs.status).toBe(404);
    const narrow = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['wordpress:write'], allowlist: [otherSite.serviceId] });
    expect((await as(narrow.token).post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation })).status).toBe(404);
    const vps = await createService(stack.db, stack.owner.accountId, { family: 'vps' });
    expect((await api().post(`/v1/wordpress/${vps.id}/recipes/secrets`, { operation })).status).toBe(404);
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: operation }).first()).toBeDefined();
    // The owner still claims them.
    expect((await api().post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation })).status).toBe(200);
  });

  it('a suspended site refuses the claim with 409 conflict', async () => {
    const suspended = await wordpressService(stack.owner.accountId, 'suspended');
    const operation = await storeSecrets(suspended.serviceId);
    const res = await api().post(`/v1/wordpress/${suspended.id}/recipes/secrets`, { operation });
    expect(res.status).toBe(409);
    expect(res.body.error.message).toContain('this service is suspended');
  });

  it('needs wordpress:write', async () => {
    const reader = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['wordpress:read'] });
    const res = await as(reader.token).post(`/v1/wordpress/${site.id}/recipes/secrets`, { operation: newUlidId('op') });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'wordpress:write' });
  });

  it('the purge deletes expired rows only', async () => {
    const expired = await storeSecrets(site.serviceId, -1_000);
    const live = await storeSecrets(site.serviceId);
    expect(await purgeExpiredRecipeSecrets(stack.db)).toBeGreaterThanOrEqual(1);
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: expired }).first()).toBeUndefined();
    expect(await stack.db('wordpress_recipe_secrets').where({ operation_id: live }).first()).toBeDefined();
  });
});

describe('requires', () => {
  const site82 = { phpVersion: '8.2', wpVersion: '6.1.1', memoryLimit: '256M' };

  it('reads constraints at the precision they are written', () => {
    const cases: Array<[string, string, boolean]> = [
      ['>=8.1 <9', '8.2', true],
      ['>=8.1 <9', '9.0.1', false],
      ['>=8.3', '8.2.26', false],
      ['8.2', '8.2.26', true],
      ['=8.2', '8.3', false],
      ['<=8.2', '8.2.9', true],
      ['>8.2', '8.2.9', false],
      ['>8.2', '8.3', true],
      ['>=6.0', '6.1.1', true],
      ['<6.1', '6.1.1', false],
      ['>=6.1.2', '6.1.1', false],
      ['>=6.0', 'unknown', false],
    ];
    for (const [constraint, running, ok] of cases) expect(satisfiesConstraint(constraint, running), `${constraint} on ${running}`).toBe(ok);
  });

  it('lists the unmet keys and answers 412 recipe_requirements_unmet naming the first', () => {
    expect(checkRequires(undefined, site82)).toEqual([]);
    expect(checkRequires({ php: '>=8.1 <9', wp: '>=6.0', memory_mb: 256 }, site82)).toEqual([]);
    expect(checkRequires({ php: '>=8.3', wp: '>=6.2', memory_mb: 512 }, site82)).toEqual(['php', 'wp', 'memory_mb']);
    expect(checkRequires({ memory_mb: 1024 }, { ...site82, memoryLimit: '1G' })).toEqual([]);
    expect(checkRequires({ memory_mb: 4096 }, { ...site82, memoryLimit: '-1' })).toEqual([]);
    expect(checkRequires({ memory_mb: 300 }, { ...site82, memoryLimit: '262144K' })).toEqual(['memory_mb']);
    expect(() => assertRequires({ wp: '>=6.2', memory_mb: 512 }, site82)).toThrow(
      expect.objectContaining({ status: 412, code: 'recipe_requirements_unmet', param: 'requires.wp', message: expect.stringContaining('6.1.1') }),
    );
  });
});

describe('the dev clean-up', () => {
  it("drops every account's recipe of that name with its versions; a second call drops nothing", async () => {
    const gone = await stack.http.delete('/_dev/wordpress/recipes/shop-basics');
    expect(gone.status, gone.text).toBe(200);
    expect(gone.body).toEqual({ object: 'dev_wordpress_recipes_deleted', name: 'shop-basics', deleted: 2 });
    expect((await api().get('/v1/wordpress/recipes/shop-basics')).status).toBe(404);
    expect((await as(other.key).get('/v1/wordpress/recipes/shop-basics')).status).toBe(404);
    expect((await stack.http.delete('/_dev/wordpress/recipes/shop-basics')).body.deleted).toBe(0);
    // The name is free again.
    expect((await api().post('/v1/wordpress/recipes', EXAMPLE)).status).toBe(201);
  });
});
