import { z } from 'zod';
import { constantNameAllowed } from '../../providers/wordpress/site-files';
import { DomainError } from '../errors';

/**
 * Recipe manifests (`recipe/v1`, SPEC "Recipe manifest", DECISIONS "Hosted WordPress"): their one
 * validator, the `requires` check, and the allowlist of `wp` command lines. A manifest is validated
 * completely when it is registered (POST or PUT); whatever this module accepts, the apply workflow
 * can run without further checks of its shape. Every refusal is `400 recipe_invalid` with `param`
 * naming the field in dot notation, as every other error of the API (`plugins.2.sha256`,
 * `constants.DB_HOST`, `verify.0.wp`); only the first fault is reported.
 *
 * Rules beyond SPEC's table, decided here (docs/wordpress.md "Recipes"):
 * - Only `apiVersion`, `name` and `version` are required; unknown members are refused at every level.
 * - `name` `^[a-z0-9][a-z0-9-]{0,62}$`; `version` `X.Y.Z`, three decimal numbers without leading
 *   zeros (each at most 9 digits), compared numerically.
 * - No string anywhere (values and object keys, options included) may hold a single quote, a
 *   semicolon or a backslash.
 * - Version constraints (`requires.php`, `requires.wp`): see `satisfiesConstraint`.
 * - `plugins` (max 40): `slug` or `url` (or both: the zip's top folder must then be `slug`);
 *   `url` is https (http too only with ALLOW_INSECURE_TARGETS), without user or password, and needs
 *   `sha256` (64 hex digits; refused without `url`); `version` pins the plugin; `activate` defaults
 *   to true; a slug appears once.
 * - `constants` (max 100): PHP constant names (ASCII `[A-Za-z_][A-Za-z0-9_]*`), values string
 *   (no control characters), number or boolean; the platform's constants are refused
 *   (`isPlatformConstant`, compared without case: the lists here and the site configuration's own).
 * - `options` (max 200): option names `[A-Za-z0-9_][A-Za-z0-9_.:-]*` up to 191 characters, any JSON
 *   value nesting arrays and objects at most 32 deep; the options the platform owns (site URLs,
 *   active plugins, theme, roles, cron, salts, `cloud_recipe`, `cloud_*` of the platform) are
 *   refused (`PLATFORM_OPTIONS`).
 * - Nothing nests deeper than 64 levels (refused with the path where it does).
 * - `roles` (max 50): `name` (a role slug), `display`, `caps` (capability names); a name appears once.
 * - `secrets` (max 20): constant names under the same rules, once each, not also in `constants`.
 * - `verify` (max 50): each item exactly one of `wp` (a command line of `parseWpCommand`'s
 *   allowlist) or `http` (`path` from `/` in RFC 3986 characters, `method` default GET, `body` a string, not with GET or
 *   HEAD, `expect` the status, default 200).
 */

export const RECIPE_LIMITS = {
  recipesPerAccount: 20,
  versionsPerRecipe: 50,
  plugins: 40,
  constants: 100,
  options: 200,
  roles: 50,
  capsPerRole: 200,
  secrets: 20,
  verify: 50,
} as const;

export const RECIPE_NAME_RE = /^[a-z0-9][a-z0-9-]{0,62}$/;
export const RECIPE_VERSION_RE = /^(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})\.(0|[1-9]\d{0,8})$/;
const COMPARATOR = '(?:>=|<=|>|<|=)?\\d{1,6}(?:\\.\\d{1,6}){0,2}';
/** One to eight comparators separated by single spaces: `>=8.1 <9`, `>=6.0`, `=8.2`, `8.2`. */
export const CONSTRAINT_RE = new RegExp(`^${COMPARATOR}(?: ${COMPARATOR}){0,7}$`);
export const PHP_CONSTANT_RE = /^[A-Za-z_][A-Za-z0-9_]{0,99}$/;
export const PLUGIN_SLUG_RE = /^[a-z0-9][a-z0-9_-]{0,99}$/;
const PLUGIN_VERSION_RE = /^[0-9A-Za-z][0-9A-Za-z.+-]{0,49}$/;
export const OPTION_NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,190}$/;
export const ROLE_NAME_RE = /^[a-z0-9][a-z0-9_-]{0,63}$/;
const CAPABILITY_RE = /^[A-Za-z0-9_][A-Za-z0-9_-]{0,99}$/;
const SHA256_RE = /^[0-9a-fA-F]{64}$/;
/**
 * A verify check's path (and query): `/`, not `//`, then RFC 3986's path and query characters
 * (unreserved, sub-delims, `:`, `@`, `/`, `?`) or percent-encoded octets: what Node sends as it is.
 */
const HTTP_PATH_RE = /^\/(?!\/)(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-Fa-f]{2})*$/;
/** Characters no string of a manifest may hold (SPEC): they could end a quoted PHP or shell string. */
const FORBIDDEN_CHARS = /[';\\]/;
// eslint-disable-next-line no-control-regex
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

/**
 * Constants the platform sets or depends on, refused in `constants` and `secrets`: the database
 * settings, the site's URLs, the content, plugin, language and upload paths, multisite, the
 * authentication keys and salts, the cookie names and paths (the autologin depends on them), the
 * file-system access method, the PHP memory limits (the plan's, set through the PHP settings) and
 * the names PHP itself defines. `WPLANG` is allowed: it only names the site's language.
 */
export const PLATFORM_CONSTANTS: ReadonlySet<string> = new Set([
  'ABSPATH',
  'WPINC',
  'WP_HOME',
  'WP_SITEURL',
  'RELOCATE',
  'WP_CONTENT_DIR',
  'WP_CONTENT_URL',
  'WP_PLUGIN_DIR',
  'WP_PLUGIN_URL',
  'PLUGINDIR',
  'WPMU_PLUGIN_DIR',
  'WPMU_PLUGIN_URL',
  'MUPLUGINDIR',
  'WP_LANG_DIR',
  'LANGDIR',
  'UPLOADS',
  'UPLOADBLOGSDIR',
  'BLOGUPLOADDIR',
  'WP_TEMP_DIR',
  'TEMPLATEPATH',
  'STYLESHEETPATH',
  'CUSTOM_USER_TABLE',
  'CUSTOM_USER_META_TABLE',
  'MULTISITE',
  'WP_ALLOW_MULTISITE',
  'SUBDOMAIN_INSTALL',
  'VHOST',
  'DOMAIN_CURRENT_SITE',
  'PATH_CURRENT_SITE',
  'SITE_ID_CURRENT_SITE',
  'BLOG_ID_CURRENT_SITE',
  'SUNRISE',
  'NOBLOGREDIRECT',
  // The salts (AUTH_KEY ... NONCE_SALT): the site's configuration refuses them (constantNameAllowed).
  'COOKIE_DOMAIN',
  'COOKIEPATH',
  'SITECOOKIEPATH',
  'ADMIN_COOKIE_PATH',
  'PLUGINS_COOKIE_PATH',
  'COOKIEHASH',
  'AUTH_COOKIE',
  'SECURE_AUTH_COOKIE',
  'LOGGED_IN_COOKIE',
  'USER_COOKIE',
  'PASS_COOKIE',
  'TEST_COOKIE',
  'RECOVERY_MODE_COOKIE',
  'FS_METHOD',
  'FS_CHMOD_DIR',
  'FS_CHMOD_FILE',
  'WP_MEMORY_LIMIT',
  'WP_MAX_MEMORY_LIMIT',
  'TRUE',
  'FALSE',
  'NULL',
]);
/** Prefixes of platform constants: the database (`DB_*`, `MYSQL_*`), FTP credentials, PHP's own, the platform's own (`CLOUD_*`). */
export const PLATFORM_CONSTANT_PREFIXES: readonly string[] = ['DB_', 'MYSQL_', 'FTP_', 'PHP_', 'CLOUD_', '__'];

/**
 * Whether a recipe may not set the constant: one of the lists above, or one the site's configuration
 * never takes from a recipe (providers/wordpress/site-files.ts constantNameAllowed, the names
 * php/wp-config.php defines itself or skips: `DISALLOW_FILE_EDIT`, `AUTOMATIC_UPDATER_DISABLED`,
 * `WP_AUTO_UPDATE_CORE`, `WPMU_*`, `WP_CONTENT_*`, `WP_PLUGIN_*`...), so that registration refuses
 * whatever the apply would.
 */
export function isPlatformConstant(name: string): boolean {
  const upper = name.toUpperCase();
  return PLATFORM_CONSTANTS.has(upper) || PLATFORM_CONSTANT_PREFIXES.some((p) => upper.startsWith(p)) || !constantNameAllowed(name);
}

/**
 * Options the platform owns, refused in `options`: the site's URLs (the domain endpoints rewrite
 * them), the plugin list (the plugins step), the theme (themes cannot be expressed), the roles table
 * (the roles step), the schedule, the database version, the upload paths, the salts,
 * `cloud_recipe` (the register step), and the platform's own options, which the site's helper
 * refuses to update too: every name of CLOUD_HELPER_PLATFORM_OPTIONS in
 * providers/wordpress/php/cloud-helper.php must be here (test/wordpress.recipes.test.ts checks it).
 */
export const PLATFORM_OPTIONS: ReadonlySet<string> = new Set([
  'siteurl',
  'home',
  'cloud_recipe',
  'cloud_autologin',
  'cloud_cdn_url',
  'active_plugins',
  'active_sitewide_plugins',
  'recently_activated',
  'uninstall_plugins',
  'template',
  'stylesheet',
  'current_theme',
  'cron',
  'db_version',
  'initial_db_version',
  'upload_path',
  'upload_url_path',
  'auth_key',
  'auth_salt',
  'secure_auth_key',
  'secure_auth_salt',
  'logged_in_key',
  'logged_in_salt',
  'nonce_key',
  'nonce_salt',
  'secret_key',
  'recovery_keys',
]);

export function isPlatformOption(name: string): boolean {
  const lower = name.toLowerCase();
  // `<table prefix>user_roles` holds the roles.
  return PLATFORM_OPTIONS.has(lower) || lower.endsWith('user_roles');
}

const text = (re: RegExp, what: string, max: number) =>
  z
    .string()
    .max(max)
    .regex(re, { error: `must be ${what}` });

const constraint = (what: string) =>
  z
    .string()
    .max(100)
    .regex(CONSTRAINT_RE, { error: 'must be space-separated comparators such as `>=8.1 <9` (operators >=, >, <=, <, =; versions N, N.N or N.N.N)' })
    .optional()
    .meta({ description: `${what} version constraint: space-separated comparators, all must hold (\`>=8.1 <9\`, \`>=6.0\`, \`8.2\`)`, example: '>=8.1 <9' });

const PluginSchema = z
  .strictObject({
    slug: text(PLUGIN_SLUG_RE, 'a plugin slug (lower-case letters, digits, - and _)', 100)
      .optional()
      .meta({ description: 'From the plugin directory; with `url`, the top folder of the zip', example: 'akismet' }),
    version: text(PLUGIN_VERSION_RE, 'a plugin version such as 5.0.2', 50)
      .optional()
      .meta({ description: 'The pinned version: a plugin at another version is reinstalled at this one', example: '5.0.2' }),
    activate: z.boolean().optional().meta({ description: 'Default true' }),
    url: z.string().max(2048).optional().meta({ description: 'An https URL of a plugin zip (max 20 MB), instead of the directory; needs `sha256`' }),
    sha256: text(SHA256_RE, '64 hexadecimal digits', 64).optional().meta({ description: 'SHA-256 of the zip at `url`, checked before anything is touched' }),
  })
  .meta({ description: 'A plugin: `slug` or `url`' });

const RoleSchema = z.strictObject({
  name: text(ROLE_NAME_RE, 'a role name (lower-case letters, digits, - and _)', 64).meta({ example: 'shop_manager' }),
  display: z.string().min(1).max(200).meta({ description: 'The name WordPress shows', example: 'Shop manager' }),
  caps: z
    .array(text(CAPABILITY_RE, 'a capability name (letters, digits, - and _)', 100))
    .max(RECIPE_LIMITS.capsPerRole)
    .optional()
    .meta({ description: 'Capabilities granted; an existing role is kept as it is', example: ['read', 'edit_posts'] }),
});

const HttpCheckSchema = z.strictObject({
  path: z
    .string()
    .max(2048)
    .regex(HTTP_PATH_RE, {
      error: 'must be a path on the site starting with one `/`, in the characters of a URL (RFC 3986: ASCII, no spaces; percent-encode others, `/%E6%97%A5`)',
    })
    .meta({ example: '/' }),
  method: z.enum(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']).optional().meta({ description: 'Default GET' }),
  body: z.string().max(65_536).optional().meta({ description: 'Sent as is; not with GET or HEAD' }),
  expect: z.number().int().min(100).max(599).optional().meta({ description: 'The expected status (default 200)' }),
});

const VerifySchema = z
  .strictObject({
    wp: z.string().max(300).optional().meta({
      description: 'A command line: `option get <name>`, `plugin is-active <slug>`, `plugin is-installed <slug>`, `role exists <name>` or `core version`',
      example: 'plugin is-active akismet',
    }),
    http: HttpCheckSchema.optional().meta({ description: "A request to the site's home; green when the status is `expect`" }),
  })
  .meta({ description: 'One check: exactly one of `wp` and `http`' });

/**
 * The shape of a `recipe/v1` manifest, as the OpenAPI document shows it; `parseManifest` adds the
 * rules a schema cannot say (platform names, the allowlist, uniqueness, the forbidden characters).
 */
export const RecipeManifestShape = z.strictObject({
  apiVersion: z.literal('recipe/v1'),
  name: text(RECIPE_NAME_RE, 'lower-case letters, digits and hyphens, starting with a letter or digit, at most 63 characters', 63).meta({
    description: 'Unique per account',
    example: 'shop-basics',
  }),
  version: text(RECIPE_VERSION_RE, 'X.Y.Z (three numbers without leading zeros)', 32).meta({
    description: 'X.Y.Z; a published version is immutable, a new one must be greater',
    example: '1.0.0',
  }),
  requires: z
    .strictObject({
      php: constraint('PHP'),
      wp: constraint('WordPress'),
      memory_mb: z.number().int().min(1).max(1_048_576).optional().meta({ description: "At most the site's PHP `memory_limit`, in MiB", example: 256 }),
    })
    .optional()
    .meta({ description: 'Checked before anything runs: an unmet one answers `412 recipe_requirements_unmet`' }),
  plugins: z.array(PluginSchema).max(RECIPE_LIMITS.plugins).optional(),
  constants: z
    .record(
      text(PHP_CONSTANT_RE, 'a PHP constant name', 100),
      z.union([z.string(), z.number(), z.boolean()], { error: 'must be a string, a number or a boolean' }),
    )
    .optional()
    .meta({
      description: `Written to the site configuration; at most ${RECIPE_LIMITS.constants}; platform constants (database, URLs, paths, multisite, salts, cookies) are refused`,
      example: { WP_POST_REVISIONS: 5 },
    }),
  options: z
    .record(text(OPTION_NAME_RE, 'an option name (letters, digits, _ . : -)', 191), z.unknown())
    .optional()
    .meta({ description: `Set with update_option; any JSON value; at most ${RECIPE_LIMITS.options}`, example: { blogdescription: 'Just another shop' } }),
  roles: z.array(RoleSchema).max(RECIPE_LIMITS.roles).optional(),
  secrets: z
    .array(text(PHP_CONSTANT_RE, 'a PHP constant name', 100))
    .max(RECIPE_LIMITS.secrets)
    .optional()
    .meta({
      description: 'Constant names whose values the platform generates (32 random bytes, 64 hex digits) and writes to the site configuration; claimed once',
      example: ['SHOP_API_SECRET'],
    }),
  verify: z.array(VerifySchema).max(RECIPE_LIMITS.verify).optional(),
});

export type RecipeManifest = z.infer<typeof RecipeManifestShape>;
export type RecipePlugin = NonNullable<RecipeManifest['plugins']>[number];
export type RecipeRequires = NonNullable<RecipeManifest['requires']>;
export type RecipeVerify = NonNullable<RecipeManifest['verify']>[number];

export const recipeInvalid = (param: string, message: string) => new DomainError(400, 'invalid_request_error', 'recipe_invalid', `${param}: ${message}`, param);

const paramOf = (path: readonly PropertyKey[]): string => path.map(String).join('.');

/**
 * How deep arrays and objects may nest in an option's value: the site's helper decodes its request
 * (`{command, args: {options: {<name>: <value>}}}`) with json_decode at a depth of 64.
 */
export const OPTION_VALUE_MAX_DEPTH = 32;
/** How deep arrays and objects may nest in a manifest (an option's value, two levels down, is the deepest part). */
const MANIFEST_MAX_DEPTH = 64;

/** The nesting depth of arrays and objects in a value (a scalar: 0), walked without recursion. */
function nestingDepth(value: unknown): number {
  let deepest = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [current, depth] = stack.pop()!;
    if (current === null || typeof current !== 'object') continue;
    deepest = Math.max(deepest, depth + 1);
    for (const inner of Object.values(current)) stack.push([inner, depth + 1]);
  }
  return deepest;
}

/**
 * The first fault of any string or object key (a forbidden character), or of nesting deeper than
 * MANIFEST_MAX_DEPTH, with its path; null when there is none. Walked without recursion, depth first
 * in document order, so that no input overflows the stack.
 */
function firstCharFault(input: unknown): { path: string[]; message: string } | null {
  const forbidden = 'must not contain single quotes, semicolons or backslashes';
  // `keyed`: the last part of `path` is an object's key (checked before its value, as it comes first).
  const stack: Array<{ value: unknown; path: string[]; keyed: boolean }> = [{ value: input, path: [], keyed: false }];
  while (stack.length > 0) {
    const { value, path, keyed } = stack.pop()!;
    if (keyed && FORBIDDEN_CHARS.test(path[path.length - 1])) return { path, message: forbidden };
    if (typeof value === 'string') {
      if (FORBIDDEN_CHARS.test(value)) return { path, message: forbidden };
      continue;
    }
    if (value === null || typeof value !== 'object') continue;
    if (path.length >= MANIFEST_MAX_DEPTH) return { path, message: `nests arrays and objects more than ${MANIFEST_MAX_DEPTH} levels deep` };
    const isArray = Array.isArray(value);
    const entries: Array<[string, unknown]> = isArray ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    for (let i = entries.length - 1; i >= 0; i--) stack.push({ value: entries[i][1], path: [...path, entries[i][0]], keyed: !isArray });
  }
  return null;
}

export interface ParseManifestOptions {
  /** ALLOW_INSECURE_TARGETS (tests and local runs): plugin zips may be fetched over http. */
  allowInsecureUrls?: boolean;
}

/**
 * Validates a `recipe/v1` manifest completely; the first fault is `400 recipe_invalid` with `param`.
 * Returns the manifest as given (no defaults filled in: `activate` absent means true, a check's
 * `method` absent GET and `expect` absent 200).
 */
export function parseManifest(input: unknown, options: ParseManifestOptions = {}): RecipeManifest {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) throw recipeInvalid('body', 'must be a recipe/v1 manifest (a JSON object)');
  const fault = firstCharFault(input);
  if (fault) throw recipeInvalid(paramOf(fault.path) || 'body', fault.message);
  const parsed = RecipeManifestShape.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    // An unknown member is named itself, not the object holding it.
    const path = issue.code === 'unrecognized_keys' ? [...issue.path, issue.keys[0]] : issue.path;
    const message =
      issue.code === 'unrecognized_keys'
        ? 'is not a member of a recipe/v1 manifest here'
        : issue.code === 'invalid_key'
          ? (issue.issues[0]?.message ?? issue.message)
          : issue.code === 'invalid_type' && issue.message.endsWith('received undefined')
            ? 'is required'
            : issue.message;
    throw recipeInvalid(paramOf(path) || 'body', message);
  }
  const manifest = parsed.data;
  checkPlugins(manifest.plugins ?? [], options);
  checkConstants(manifest);
  checkOptions(manifest.options ?? {});
  checkRoles(manifest.roles ?? []);
  checkSecrets(manifest);
  checkVerify(manifest.verify ?? []);
  return manifest;
}

function checkPlugins(plugins: readonly RecipePlugin[], options: ParseManifestOptions): void {
  const slugs = new Map<string, number>();
  plugins.forEach((plugin, i) => {
    const at = `plugins.${i}`;
    if (plugin.slug === undefined && plugin.url === undefined) throw recipeInvalid(`${at}.slug`, 'a plugin needs a `slug` or a `url`');
    if (plugin.url !== undefined) {
      let url: URL;
      try {
        url = new URL(plugin.url);
      } catch {
        throw recipeInvalid(`${at}.url`, 'must be an absolute https URL of a zip');
      }
      const schemes = options.allowInsecureUrls ? ['https:', 'http:'] : ['https:'];
      if (!schemes.includes(url.protocol) || !url.hostname) throw recipeInvalid(`${at}.url`, 'must be an https URL of a zip');
      if (url.username || url.password) throw recipeInvalid(`${at}.url`, 'must not carry a user name or password');
      if (plugin.sha256 === undefined) throw recipeInvalid(`${at}.sha256`, 'is required with `url`: the SHA-256 of the zip, 64 hexadecimal digits');
    } else if (plugin.sha256 !== undefined) {
      throw recipeInvalid(`${at}.sha256`, 'is only for a plugin given by `url`');
    }
    if (plugin.slug !== undefined) {
      if (slugs.has(plugin.slug)) throw recipeInvalid(`${at}.slug`, `is already plugins.${slugs.get(plugin.slug)}`);
      slugs.set(plugin.slug, i);
    }
  });
}

function checkConstants(manifest: RecipeManifest): void {
  for (const [name, value] of Object.entries(manifest.constants ?? {})) {
    if (isPlatformConstant(name)) throw recipeInvalid(`constants.${name}`, 'is a platform constant; the platform sets it');
    if (typeof value === 'string' && CONTROL_CHARS.test(value)) throw recipeInvalid(`constants.${name}`, 'must not hold control characters');
    if (typeof value === 'string' && value.length > 4096) throw recipeInvalid(`constants.${name}`, 'must be at most 4096 characters');
  }
  if (Object.keys(manifest.constants ?? {}).length > RECIPE_LIMITS.constants) {
    throw recipeInvalid('constants', `must have at most ${RECIPE_LIMITS.constants} entries`);
  }
}

function checkOptions(options: Record<string, unknown>): void {
  const names = Object.keys(options);
  if (names.length > RECIPE_LIMITS.options) throw recipeInvalid('options', `must have at most ${RECIPE_LIMITS.options} entries`);
  for (const name of names) {
    if (isPlatformOption(name)) throw recipeInvalid(`options.${name}`, 'is an option the platform manages; it cannot be set by a recipe');
    if (nestingDepth(options[name]) > OPTION_VALUE_MAX_DEPTH)
      throw recipeInvalid(`options.${name}`, `nests arrays and objects more than ${OPTION_VALUE_MAX_DEPTH} levels deep`);
  }
}

function checkRoles(roles: NonNullable<RecipeManifest['roles']>): void {
  const seen = new Map<string, number>();
  roles.forEach((role, i) => {
    if (seen.has(role.name)) throw recipeInvalid(`roles.${i}.name`, `is already roles.${seen.get(role.name)}`);
    if (CONTROL_CHARS.test(role.display)) throw recipeInvalid(`roles.${i}.display`, 'must not hold control characters');
    seen.set(role.name, i);
  });
}

function checkSecrets(manifest: RecipeManifest): void {
  const constants = new Set(Object.keys(manifest.constants ?? {}));
  const seen = new Map<string, number>();
  (manifest.secrets ?? []).forEach((name, i) => {
    if (isPlatformConstant(name)) throw recipeInvalid(`secrets.${i}`, 'is a platform constant; the platform sets it');
    if (constants.has(name)) throw recipeInvalid(`secrets.${i}`, 'is also in `constants`: a secret is generated, not given');
    if (seen.has(name)) throw recipeInvalid(`secrets.${i}`, `is already secrets.${seen.get(name)}`);
    seen.set(name, i);
  });
}

function checkVerify(checks: readonly RecipeVerify[]): void {
  checks.forEach((check, i) => {
    const at = `verify.${i}`;
    if ((check.wp === undefined) === (check.http === undefined)) throw recipeInvalid(at, 'a check has exactly one of `wp` and `http`');
    if (check.wp !== undefined && !parseWpCommand(check.wp)) {
      throw recipeInvalid(
        `${at}.wp`,
        'is not an allowed command: `option get <name>`, `plugin is-active <slug>`, `plugin is-installed <slug>`, `role exists <name>`, `core version`',
      );
    }
    if (check.http?.body !== undefined && ['GET', 'HEAD'].includes(check.http.method ?? 'GET')) {
      throw recipeInvalid(`${at}.http.body`, 'a GET or HEAD check sends no body');
    }
  });
}

/** A command line of the `wp` allowlist (DECISIONS "Hosted WordPress"), parsed. */
export type WpCommand =
  | { command: 'option get'; name: string }
  | { command: 'plugin is-active'; slug: string }
  | { command: 'plugin is-installed'; slug: string }
  | { command: 'role exists'; name: string }
  | { command: 'core version' };

/**
 * The `wp` allowlist, shared with the site's command-line endpoint: `option get <name>`,
 * `plugin is-active|is-installed <slug>`, `role exists <name>`, `core version`; words separated by
 * white space, the argument under the same rules as option names, plugin slugs and role names.
 * Anything else (another command, another argument, a leading `wp`) is null.
 */
export function parseWpCommand(line: string): WpCommand | null {
  if (line.length > 300 || FORBIDDEN_CHARS.test(line)) return null;
  const words = line.trim().split(/\s+/);
  const [group, action, arg, ...rest] = words;
  if (rest.length > 0) return null;
  if (group === 'core' && action === 'version' && arg === undefined) return { command: 'core version' };
  if (arg === undefined) return null;
  if (group === 'option' && action === 'get' && OPTION_NAME_RE.test(arg)) return { command: 'option get', name: arg };
  if (group === 'plugin' && (action === 'is-active' || action === 'is-installed') && PLUGIN_SLUG_RE.test(arg)) {
    return { command: `plugin ${action}`, slug: arg };
  }
  if (group === 'role' && action === 'exists' && ROLE_NAME_RE.test(arg)) return { command: 'role exists', name: arg };
  return null;
}

/** `1.2.3` -> [1, 2, 3] (a registered version, RECIPE_VERSION_RE). */
export function recipeVersionParts(version: string): number[] {
  return version.split('.').map(Number);
}

/** Negative, zero or positive as `a` is below, equal to or above `b` (numerically, part by part; missing parts are 0). */
export function compareVersionParts(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** The leading numbers of a running version (`8.2.26`, `6.1.1`, `6.4-RC1` -> [6, 4]), or null. */
export function runningVersionParts(version: string): number[] | null {
  const m = /^\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?/.exec(version);
  return m
    ? m
        .slice(1)
        .filter((p) => p !== undefined)
        .map(Number)
    : null;
}

/**
 * Whether a running version satisfies a constraint (CONSTRAINT_RE). Every comparator must hold.
 * A comparator compares at its own precision: the running version is cut (or padded with zeros) to
 * as many parts as the comparator's version has, so `8.2` and `=8.2` accept 8.2.x, `<9` refuses
 * 9.0.1, `<=8.2` accepts 8.2.9 and `>8.2` needs 8.3 or later (npm's X-range reading). A comparator
 * without an operator means `=`. A version that cannot be read satisfies nothing.
 */
export function satisfiesConstraint(constraint: string, running: string): boolean {
  const have = runningVersionParts(running);
  if (!have || !CONSTRAINT_RE.test(constraint)) return false;
  return constraint.split(' ').every((token) => {
    const [, op = '=', version] = /^(>=|<=|>|<|=)?(.+)$/.exec(token)!;
    const want = version.split('.').map(Number);
    const cut = want.map((_, i) => have[i] ?? 0);
    const d = compareVersionParts(cut, want);
    return op === '>=' ? d >= 0 : op === '>' ? d > 0 : op === '<=' ? d <= 0 : op === '<' ? d < 0 : d === 0;
  });
}

/** PHP's `memory_limit` shorthand (`256M`, `1G`, `524288K`, bytes, `-1` for none) in MiB; null when unreadable, Infinity for none. */
export function memoryLimitMb(limit: string): number | null {
  const m = /^\s*(-?\d+)\s*([KMG])?\s*$/i.exec(limit);
  if (!m) return null;
  const n = Number(m[1]);
  if (n < 0) return Infinity;
  const unit = (m[2] ?? '').toUpperCase();
  return unit === 'G' ? n * 1024 : unit === 'M' ? n : unit === 'K' ? n / 1024 : n / (1024 * 1024);
}

/** What `requires` is checked against: the site as it runs. */
export interface SiteFacts {
  /** `8.2` or `8.2.26`. */
  phpVersion: string;
  /** `6.1.1`. */
  wpVersion: string;
  /** PHP `memory_limit`, `256M`. */
  memoryLimit: string;
}

export type RequirementKey = 'php' | 'wp' | 'memory_mb';

/** The keys of `requires` the site does not meet, in the order php, wp, memory_mb (empty when all hold). */
export function checkRequires(requires: RecipeRequires | undefined, site: SiteFacts): RequirementKey[] {
  const unmet: RequirementKey[] = [];
  if (!requires) return unmet;
  if (requires.php !== undefined && !satisfiesConstraint(requires.php, site.phpVersion)) unmet.push('php');
  if (requires.wp !== undefined && !satisfiesConstraint(requires.wp, site.wpVersion)) unmet.push('wp');
  if (requires.memory_mb !== undefined) {
    const limit = memoryLimitMb(site.memoryLimit);
    if (limit === null || limit < requires.memory_mb) unmet.push('memory_mb');
  }
  return unmet;
}

/** `412 recipe_requirements_unmet`, `param` `requires.<first unmet key>`, the message says each requirement and what the site has. */
export function recipeRequirementsUnmet(unmet: readonly RequirementKey[], requires: RecipeRequires, site: SiteFacts): DomainError {
  const why = unmet.map((key) =>
    key === 'php'
      ? `PHP ${requires.php} (the site runs ${site.phpVersion})`
      : key === 'wp'
        ? `WordPress ${requires.wp} (the site runs ${site.wpVersion})`
        : `${requires.memory_mb} MiB of memory (the site's PHP memory_limit is ${site.memoryLimit})`,
  );
  return new DomainError(
    412,
    'invalid_request_error',
    'recipe_requirements_unmet',
    `The site does not meet the recipe's requirements: ${why.join('; ')}. Nothing was changed.`,
    `requires.${unmet[0]}`,
  );
}

/** Throws `412 recipe_requirements_unmet` when the site does not meet `requires`. */
export function assertRequires(requires: RecipeRequires | undefined, site: SiteFacts): void {
  const unmet = checkRequires(requires, site);
  if (unmet.length > 0) throw recipeRequirementsUnmet(unmet, requires!, site);
}
