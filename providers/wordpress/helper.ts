/**
 * Runs the platform's PHP helper (php/cloud-helper.php, installed as `<dataDir>/platform/cloud-helper.php`)
 * in one site: `php -d ... cloud-helper.php` as the site's OS account, cwd S, env CLOUD_WP_SITE=S,
 * one JSON request on stdin, one JSON answer on stdout. Arguments are data: nothing reaches a
 * shell or PHP code.
 *
 * Errors are providers/errors.ts's: `not_found` -> BackendGoneError, `refused` ->
 * BackendRefusedError('validation_failed', param), anything else (failed, no JSON, timeout, crash)
 * -> BackendUnavailableError whose `detail` (for logs only) carries the helper's message and the
 * tail of its stderr, with the site's secrets (database password, salts, secret constants) masked.
 */
import { spawn } from 'node:child_process';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../errors';
import { runningAsRoot } from '../local-server';
import { platformPaths, sitePaths, type SiteJson } from './site-files';

const BACKEND = 'wordpress';
export const DEFAULT_PHP_BINARY = 'php8.2';
const DEFAULT_TIMEOUT_MS = 120_000;
const MAX_OUTPUT = 32 * 1024 * 1024;

export interface HelperOptions {
  siteRoot: string;
  dataDir: string;
  /** The site's OS account (spawned as it when this process is root); null: this process's. */
  account: { uid: number; gid: number } | null;
  phpBinary?: string;
  timeoutMs?: number;
  /** More `-d` settings (they win over the defaults). */
  ini?: Record<string, string>;
  /** In the customer's words (`site svc-12`), for BackendUnavailableError's subject. */
  subject?: string;
}

export interface HelperPlugin {
  slug: string;
  name: string;
  version: string;
  active: boolean;
}

/** Each command's arguments and result (php/cloud-helper.php). */
export interface HelperCommands {
  install: {
    args: { title: string; admin_email: string; url: string; admin_user?: string };
    result: { installed: boolean; admin_user?: string; user_id?: number };
  };
  status: {
    args: Record<string, never>;
    result: { installed: boolean; wp_version: string; db_version: number | null; files_db_version: number; recipe: Record<string, unknown> | null };
  };
  'option.get': { args: { name: string }; result: { exists: boolean; value: unknown } };
  'options.update': { args: { options: Record<string, unknown> }; result: { updated: string[] } };
  'urls.set': { args: { url: string }; result: { url: string } };
  'plugins.list': { args: Record<string, never>; result: HelperPlugin[] };
  'plugin.install': { args: { slug: string; zip: string; activate: boolean }; result: HelperPlugin };
  'plugin.activate': { args: { slug: string }; result: HelperPlugin };
  'plugin.deactivate': { args: { slug: string }; result: HelperPlugin };
  'plugin.delete': { args: { slug: string }; result: { deleted: string } };
  'roles.add': { args: { roles: Array<{ name: string; display: string; caps: string[] }> }; result: { added: string[] } };
  command: { args: { argv: string[] }; result: { exit_code: number; output: string } };
  'cron.list': { args: Record<string, never>; result: Array<{ hook: string; schedule: string | null; next_run_at: string }> };
  'cron.run': { args: { hook: string }; result: { hook: string; executed_at: string; runs: number } };
  'cron.delete': { args: { hook: string }; result: { removed: number } };
  'core.upgrade_db': { args: Record<string, never>; result: { from_db_version: number; to_db_version: number; wp_version: string } };
  'autologin.arm': { args: { sha256: string; expires: number }; result: { armed: true; expires: number } };
  'cdn.set': { args: { url: string | null }; result: { url: string | null } };
  'cache.flush': { args: Record<string, never>; result: { flushed: string[]; object_cache: 'persistent' | 'none' } };
  'mail.test': { args: { to: string }; result: { sent: boolean; detail: string } };
}
export type HelperCommand = keyof HelperCommands;

interface HelperAnswer {
  ok: boolean;
  result?: unknown;
  error?: { code?: string; message?: string; param?: string; what?: string };
}

async function readSiteJson(siteRoot: string): Promise<Partial<SiteJson> | null> {
  try {
    return JSON.parse(await fs.readFile(sitePaths(siteRoot).siteJson, 'utf8')) as Partial<SiteJson>;
  } catch {
    return null;
  }
}

/**
 * The PHP settings a site's PHP needs, for the helper's `-d` and the php-fpm pool's
 * `php_admin_value[...]`: `openssl.cafile` = the database CA (site.json's db.ca_file), without
 * which mysqlnd cannot verify the database server (php/wp-config.php refuses to start otherwise).
 */
export async function sitePhpIni(siteRoot: string): Promise<Record<string, string>> {
  const site = await readSiteJson(siteRoot);
  return { 'openssl.cafile': site?.db?.ca_file ?? sitePaths(siteRoot).dbCa };
}

/** Values never to show, even in logs: the database password, the salts, the secret constants. */
async function secretsOf(siteRoot: string): Promise<string[]> {
  const values: string[] = [];
  const site = await readSiteJson(siteRoot);
  if (site?.db?.password) values.push(site.db.password);
  for (const v of Object.values(site?.salts ?? {})) if (typeof v === 'string') values.push(v);
  try {
    const secrets = JSON.parse(await fs.readFile(sitePaths(siteRoot).secretsJson, 'utf8')) as Record<string, unknown>;
    for (const v of Object.values(secrets)) if (typeof v === 'string') values.push(v);
  } catch {
    // none
  }
  return values.filter((v) => v.length >= 4);
}

function redact(text: string, secrets: string[]): string {
  let out = text;
  for (const s of secrets) out = out.split(s).join('[redacted]');
  return out;
}

function tail(text: string, lines = 8, chars = 2000): string {
  return text.trim().split('\n').slice(-lines).join(' | ').slice(-chars);
}

function parseAnswer(stdout: string): HelperAnswer | null {
  const candidates = [stdout.trim(), ...stdout.trim().split('\n').reverse()];
  for (const text of candidates) {
    if (!text.startsWith('{')) continue;
    try {
      const parsed = JSON.parse(text) as HelperAnswer;
      if (parsed && typeof parsed === 'object' && typeof parsed.ok === 'boolean') return parsed;
    } catch {
      // next
    }
  }
  return null;
}

const INI_KEY = /^[A-Za-z0-9_.]+$/;

/** Runs one helper command in one site; see the top of this file for errors. */
export function runHelper<C extends HelperCommand>(opts: HelperOptions, command: C, args: HelperCommands[C]['args']): Promise<HelperCommands[C]['result']>;
/** The same, untyped: the caller names the result's type. */
export function runHelper<T = unknown>(opts: HelperOptions, command: string, args?: Record<string, unknown>): Promise<T>;
export async function runHelper(opts: HelperOptions, command: string, args: Record<string, unknown> = {}): Promise<unknown> {
  const siteRoot = path.resolve(opts.siteRoot);
  const helper = platformPaths(opts.dataDir).helper;
  const ini: Record<string, string> = {
    display_errors: 'stderr',
    log_errors: '0',
    html_errors: '0',
    memory_limit: '512M',
    max_execution_time: '0',
    'zend.exception_ignore_args': '1',
    ...(await sitePhpIni(siteRoot)),
    ...(opts.ini ?? {}),
  };
  const argv: string[] = [];
  for (const [key, value] of Object.entries(ini)) {
    if (!INI_KEY.test(key) || /[\n\r\0]/.test(value)) throw new Error(`invalid PHP setting ${key}`);
    argv.push('-d', `${key}=${value}`);
  }
  argv.push(helper);
  const php = opts.phpBinary ?? DEFAULT_PHP_BINARY;
  const asAccount = opts.account && runningAsRoot() && opts.account.uid !== 0 ? { uid: opts.account.uid, gid: opts.account.gid } : {};
  const unavailable = async (what: string, stderr: string) =>
    new BackendUnavailableError(
      BACKEND,
      redact(`helper ${command}: ${what}${stderr.trim() ? `; stderr: ${tail(stderr)}` : ''}`, await secretsOf(siteRoot)),
      opts.subject,
    );

  const { code, signal, stdout, stderr, timedOut, spawnError } = await new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
    timedOut: boolean;
    spawnError: string | null;
  }>((resolve) => {
    const child = spawn(php, argv, {
      ...asAccount,
      cwd: siteRoot,
      // Nothing of this process's environment (it may hold the platform's credentials).
      env: { PATH: '/usr/local/bin:/usr/bin:/bin', CLOUD_WP_SITE: siteRoot, LANG: 'C.UTF-8', HOME: siteRoot },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let outSize = 0;
    let errSize = 0;
    let timedOut = false;
    let spawnError: string | null = null;
    child.stdout.on('data', (chunk: Buffer) => {
      outSize += chunk.length;
      if (outSize <= MAX_OUTPUT) out.push(chunk);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      errSize += chunk.length;
      // Keep the end: what went wrong is last.
      err.push(chunk);
      while (errSize > 256 * 1024 && err.length > 1) errSize -= (err.shift() as Buffer).length;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, opts.timeoutMs ?? DEFAULT_TIMEOUT_MS);
    child.once('error', (e) => {
      spawnError = e.message;
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8'), timedOut, spawnError });
    });
    child.stdin.on('error', () => undefined); // a helper that died early closes its end: its exit says why
    child.stdin.end(JSON.stringify({ command, args }));
  });

  if (spawnError) throw await unavailable(`cannot start ${php}: ${spawnError}`, stderr);
  if (timedOut) throw await unavailable(`timed out after ${opts.timeoutMs ?? DEFAULT_TIMEOUT_MS} ms`, stderr);
  const answer = parseAnswer(stdout);
  if (!answer) throw await unavailable(`no answer (exit ${code ?? signal}); stdout: ${tail(stdout, 4, 500) || 'empty'}`, stderr);
  if (answer.ok) return answer.result;
  const error = answer.error ?? {};
  const message = typeof error.message === 'string' && error.message ? error.message : 'the helper gave no reason';
  if (error.code === 'not_found') throw new BackendGoneError(BACKEND, error.what ?? command, message);
  if (error.code === 'refused') throw new BackendRefusedError(BACKEND, message, 'validation_failed', error.param ?? null);
  throw await unavailable(`failed: ${message} (exit ${code ?? signal})`, stderr);
}
