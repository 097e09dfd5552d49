import { createHash } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { DownloadError, downloadToFile } from '../../infra/outbound-download';
import type { Providers } from '../../providers';
import type { WpPlugin } from '../../providers/wordpress.provider';
import { zipTopFolder, ZipRefused } from './plugins';
import { findRecipeVersion, RECIPE_SECRETS_TTL_MS, storeRecipeSecrets } from './recipe-store';
import { parseWpCommand, type RecipeManifest, type RecipePlugin } from './recipes';
import { primaryHost } from './domains';
import { domainsOf, findSite } from './store';

/**
 * The steps of a recipe apply (SPEC "Recipes", DECISIONS "Hosted WordPress"), each idempotent:
 * the `wordpress.recipe_apply` workflow runs them in SPEC's order as activities, so a retry or a
 * worker that takes over mid-apply repeats at most the step it was in, and that step finds its work
 * done (a plugin at its pin is kept, a role that exists is accepted, options and constants are set
 * to the same values, secrets keep their values). Nothing here returns a secret's value: the
 * workflow's history (visible in the Temporal UI) never holds one.
 */
export const APPLY_STEPS = ['checksums', 'backup', 'plugins', 'constants', 'options', 'roles', 'secrets', 'verify', 'register'] as const;
export type ApplyStep = (typeof APPLY_STEPS)[number];

export interface ApplyTarget {
  operationId: string;
  serviceId: number;
  accountId: number;
  recipe: string;
  version: string;
}

export interface ApplyDeps {
  db: Knex;
  providers: Providers;
  keyring: Keyring;
  config: Config;
}

/** A step's outcome as the operation's `result.steps` shows it. */
export interface StepResult {
  name: ApplyStep;
  status: 'succeeded' | 'skipped' | 'failed' | 'not_run';
  detail: string | null;
}

export interface PluginResult {
  slug: string;
  action: 'installed' | 'updated' | 'kept';
  version: string;
  activated: boolean;
}

export interface VerifyResult {
  check: string;
  ok: boolean;
  detail: string;
}

/** A step that cannot succeed, with the operation's `error.code` and a message for the customer. */
export class ApplyStepRefused extends Error {
  constructor(
    readonly code: 'recipe_checksum_mismatch' | 'recipe_backup_failed' | 'recipe_step_failed' | 'recipe_verify_failed',
    message: string,
  ) {
    super(message);
    this.name = 'ApplyStepRefused';
  }
}

/** The recipe version the apply runs (immutable once published; read again by each step). */
async function manifestOf(deps: ApplyDeps, target: ApplyTarget): Promise<RecipeManifest> {
  const { version } = await findRecipeVersion(deps.db, target.accountId, target.recipe, target.version);
  return version.manifest as RecipeManifest;
}

/** SPEC Limits: a recipe's zip is at most 20 MB. */
const zipLimits = { maxBytes: 20 * 1024 * 1024, timeoutMs: 60_000 };

/** Downloads a plugin's zip into `dir` and checks its SHA-256; a mismatch or a failed download is refused. */
async function fetchZip(deps: ApplyDeps, plugin: RecipePlugin & { url: string }, dir: string): Promise<string> {
  const file = path.join(dir, `${createHash('sha256').update(plugin.url).digest('hex').slice(0, 16)}.zip`);
  let sha256: string;
  try {
    ({ sha256 } = await downloadToFile(plugin.url, file, { policy: { allowInsecure: deps.config.WEBHOOK_ALLOW_INSECURE_TARGETS }, ...zipLimits }));
  } catch (err) {
    // A download's own failure is written for customers; anything else (the scratch file) is not.
    if (err instanceof DownloadError)
      throw new ApplyStepRefused('recipe_checksum_mismatch', `The zip at ${plugin.url} could not be downloaded: ${err.message}`);
    throw err;
  }
  if (sha256 !== plugin.sha256?.toLowerCase()) {
    throw new ApplyStepRefused('recipe_checksum_mismatch', `The zip at ${plugin.url} has SHA-256 ${sha256}, not the manifest's ${plugin.sha256}.`);
  }
  return file;
}

function refuse(message: string): never {
  throw new ApplyStepRefused('recipe_step_failed', message);
}

async function withScratch<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(path.join(tmpdir(), 'recipe-'));
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** 1. `checksums`: every `url` zip downloaded and hashed, before anything is touched. */
export async function applyChecksums(deps: ApplyDeps, target: ApplyTarget): Promise<StepResult> {
  const manifest = await manifestOf(deps, target);
  const zips = (manifest.plugins ?? []).filter((p): p is RecipePlugin & { url: string } => typeof p.url === 'string');
  if (zips.length === 0) return { name: 'checksums', status: 'skipped', detail: 'no plugin is installed from a URL' };
  await withScratch(async (dir) => {
    for (const plugin of zips) await fetchZip(deps, plugin, dir);
  });
  return {
    name: 'checksums',
    status: 'succeeded',
    detail: `${zips.length} zip${zips.length === 1 ? '' : 's'} match${zips.length === 1 ? 'es' : ''} the manifest`,
  };
}

/** 3. `plugins`: each pinned plugin installed, reinstalled to its pin, or kept; activated when asked. */
export async function applyPlugins(deps: ApplyDeps, target: ApplyTarget): Promise<{ step: StepResult; plugins: PluginResult[] }> {
  const manifest = await manifestOf(deps, target);
  const wanted = manifest.plugins ?? [];
  if (wanted.length === 0) return { step: { name: 'plugins', status: 'skipped', detail: 'the recipe names no plugin' }, plugins: [] };
  const wp = deps.providers.wordpress;
  const results: PluginResult[] = [];
  await withScratch(async (dir) => {
    for (const plugin of wanted) {
      // A plugin from a URL is its zip's top folder (the manifest may name it as well).
      const urlZip = plugin.url ? await fetchZip(deps, plugin as RecipePlugin & { url: string }, dir) : null;
      const slug = urlZip
        ? await zipTopFolder(urlZip).catch((err: unknown) => {
            if (err instanceof ZipRefused) refuse(`The zip at ${plugin.url} is not a plugin: ${err.message}`);
            throw err;
          })
        : plugin.slug!;
      if (plugin.slug && slug !== plugin.slug) refuse(`The zip at ${plugin.url} holds plugin ${slug}, not ${plugin.slug}.`);
      const installed = (await wp.listPlugins(target.serviceId)).find((p) => p.slug === slug);
      const activate = plugin.activate ?? true;
      let now: WpPlugin;
      let action: PluginResult['action'];
      if (installed && (plugin.version === undefined || installed.version === plugin.version)) {
        action = 'kept';
        now = activate && !installed.active ? await wp.activatePlugin(target.serviceId, slug) : installed;
      } else {
        let zip = urlZip;
        if (!zip) {
          const listed = await wp.directoryPlugin(slug);
          const version = plugin.version ?? listed?.latestVersion;
          if (!listed || !version || !listed.versions.includes(version))
            refuse(`Plugin ${slug}${plugin.version ? ` ${plugin.version}` : ''} is not in the plugin directory.`);
          zip = await wp.directoryZip(slug, version);
        }
        // A reinstall keeps the plugin's active state unless the recipe asks for it.
        now = await wp.installPlugin(target.serviceId, slug, zip, activate || installed?.active === true);
        action = installed ? 'updated' : 'installed';
      }
      results.push({ slug, action, version: now.version, activated: now.active });
    }
  });
  const changed = results.filter((r) => r.action !== 'kept').length;
  return { step: { name: 'plugins', status: 'succeeded', detail: `${changed} installed or updated, ${results.length - changed} kept` }, plugins: results };
}

/** 3. `constants`: written to the site's configuration (platform constants were refused at registration). */
export async function applyConstants(deps: ApplyDeps, target: ApplyTarget): Promise<StepResult> {
  const constants = (await manifestOf(deps, target)).constants ?? {};
  const names = Object.keys(constants);
  if (names.length === 0) return { name: 'constants', status: 'skipped', detail: 'the recipe sets no constant' };
  await deps.providers.wordpress.setConstants(target.serviceId, constants);
  return { name: 'constants', status: 'succeeded', detail: `${names.length} set` };
}

/** 3. `options`: through update_option with plugins loaded (their hooks fire). */
export async function applyOptions(deps: ApplyDeps, target: ApplyTarget): Promise<StepResult> {
  const options = (await manifestOf(deps, target)).options ?? {};
  const names = Object.keys(options);
  if (names.length === 0) return { name: 'options', status: 'skipped', detail: 'the recipe sets no option' };
  await deps.providers.wordpress.updateOptions(target.serviceId, options);
  return { name: 'options', status: 'succeeded', detail: `${names.length} set` };
}

/** 3. `roles`: added with add_role; an existing role is accepted as it is. */
export async function applyRoles(deps: ApplyDeps, target: ApplyTarget): Promise<StepResult> {
  const roles = (await manifestOf(deps, target)).roles ?? [];
  if (roles.length === 0) return { name: 'roles', status: 'skipped', detail: 'the recipe adds no role' };
  const added = await deps.providers.wordpress.addRoles(
    target.serviceId,
    roles.map((r) => ({ name: r.name, display: r.display, caps: r.caps ?? [] })),
  );
  return { name: 'roles', status: 'succeeded', detail: `${added.length} added, ${roles.length - added.length} existed` };
}

/** 3. `secrets`: each named constant gets 32 random bytes (64 hex digits) unless it has a value; the values stay on the site. */
export async function applySecrets(deps: ApplyDeps, target: ApplyTarget): Promise<StepResult> {
  const names = (await manifestOf(deps, target)).secrets ?? [];
  if (names.length === 0) return { name: 'secrets', status: 'skipped', detail: 'the recipe names no secret' };
  await deps.providers.wordpress.ensureSecrets(target.serviceId, names);
  return { name: 'secrets', status: 'succeeded', detail: `${names.length} in the site configuration` };
}

/**
 * One `{http: ...}` check through the site's web server, by the host `home` names (an apex custom
 * domain's `www.` form). A request Node refuses to send (a path registration should have refused)
 * is a red check, never a step that fails and retries.
 */
async function httpCheck(
  deps: ApplyDeps,
  target: ApplyTarget,
  check: { path: string; method?: string; body?: unknown; expect?: number },
): Promise<VerifyResult> {
  const site = await findSite(deps.db, target.serviceId);
  const primary = site ? primaryHost(site, await domainsOf(deps.db, target.serviceId)) : null;
  const method = (check.method ?? 'GET').toUpperCase();
  const expect = check.expect ?? 200;
  const label = `http ${method} ${check.path}`;
  if (!site?.ip || !site.http_port || !primary) return { check: label, ok: false, detail: 'the site has no address yet' };
  const body = check.body === undefined ? null : typeof check.body === 'string' ? check.body : JSON.stringify(check.body);
  const status = await new Promise<number | string>((resolve) => {
    let req: http.ClientRequest;
    try {
      req = http.request(
        {
          host: site.ip!,
          port: site.http_port!,
          method,
          path: check.path,
          headers: { host: primary, ...(body !== null ? { 'content-type': typeof check.body === 'string' ? 'text/plain' : 'application/json' } : {}) },
          timeout: 30_000,
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
    } catch (err) {
      resolve(`the request could not be sent: ${(err as Error).message}`);
      return;
    }
    req.on('timeout', () => req.destroy(new Error('no answer within 30 s')));
    req.on('error', (err) => resolve(err.message));
    req.end(body ?? undefined);
  });
  return typeof status === 'number'
    ? { check: label, ok: status === expect, detail: `answered ${status}${status === expect ? '' : `, expected ${expect}`}` }
    : { check: label, ok: false, detail: `no answer: ${status}` };
}

/** 4. `verify`: every check, green or red (the workflow fails the apply on a red one). */
export async function applyVerify(deps: ApplyDeps, target: ApplyTarget): Promise<{ step: StepResult; verify: VerifyResult[] }> {
  const checks = (await manifestOf(deps, target)).verify ?? [];
  if (checks.length === 0) return { step: { name: 'verify', status: 'skipped', detail: 'the recipe has no check' }, verify: [] };
  const results: VerifyResult[] = [];
  for (const check of checks) {
    if ('wp' in check && typeof check.wp === 'string') {
      const parsed = parseWpCommand(check.wp);
      if (!parsed) {
        results.push({ check: `wp ${check.wp}`, ok: false, detail: 'not an allowed command' });
        continue;
      }
      const { exitCode, output } = await deps.providers.wordpress.runCommand(target.serviceId, check.wp.trim().split(/\s+/));
      results.push({ check: `wp ${check.wp}`, ok: exitCode === 0, detail: `exit ${exitCode}${output ? `: ${output.trim().slice(0, 200)}` : ''}` });
    } else if ('http' in check && check.http) {
      results.push(await httpCheck(deps, target, check.http as { path: string; method?: string; body?: unknown; expect?: number }));
    }
  }
  const red = results.filter((r) => !r.ok).length;
  return {
    step: {
      name: 'verify',
      status: red ? 'failed' : 'succeeded',
      detail: red ? `${red} of ${results.length} checks failed` : `${results.length} checks passed`,
    },
    verify: results,
  };
}

/**
 * 5. `register`: the option `cloud_recipe` = `{name, version, applied_at}`; then the generated
 * secrets (read back from the site) are sealed for one claim within 24 hours (RECIPE_SECRETS_TTL_MS).
 */
export async function applyRegister(deps: ApplyDeps, target: ApplyTarget, appliedAt: string): Promise<{ step: StepResult; secrets: string[] }> {
  const manifest = await manifestOf(deps, target);
  await deps.providers.wordpress.updateOptions(target.serviceId, { cloud_recipe: { name: target.recipe, version: target.version, applied_at: appliedAt } });
  const names = manifest.secrets ?? [];
  if (names.length > 0) {
    const values = await deps.providers.wordpress.ensureSecrets(target.serviceId, names);
    const picked = Object.fromEntries(names.map((n) => [n, values[n]]));
    await storeRecipeSecrets(deps.db, deps.keyring, {
      operationId: target.operationId,
      serviceId: target.serviceId,
      recipe: target.recipe,
      version: target.version,
      secrets: picked,
      ttlMs: RECIPE_SECRETS_TTL_MS,
    });
  }
  return { step: { name: 'register', status: 'succeeded', detail: `cloud_recipe = ${target.recipe}@${target.version}` }, secrets: names };
}

/** Drops what a failed apply sealed (nothing is claimable unless the apply succeeded). */
export async function dropApplySecrets(db: Knex, operationId: string): Promise<void> {
  await db('wordpress_recipe_secrets').where({ operation_id: operationId }).delete();
}
