import { readFileSync } from 'node:fs';
import { Argument, Command, InvalidArgumentError, Option } from 'commander';
import { ApiClient, errorOf, type ApiResponse } from '../client/api-client';
import { waitForOperation, type Operation } from '../client/operations';
import { buildRequest, marksLong, matchRoute, pathParamDescription, type ClientRoute, type JsonSchema } from '../client/client-routes';
import { accessLabel, routeCommands, type CommandField, type RouteCommand } from './command-tree';
import { configPath, readConfig, resolveSettings, writeConfig, type GlobalOptions } from './config';
import { completionScript } from './completion';
import { formatTable, terminalWidth, writeBody, type OutputFormat } from './output';
import { ProgressReporter } from './progress';
import { prompt, promptHidden, readLine } from './prompt';

/**
 * The `cloud` command tree: one command per /v1 route (cli/command-tree.ts names them), plus login,
 * logout, profile, api, operations wait, completion and mcp. Exit codes (DECISIONS "CLI"): 0 success,
 * 1 API error or failed operation, 2 usage error, 3 `--wait` timed out.
 */
export const EXIT = { ok: 0, apiError: 1, usage: 2, waitTimeout: 3 } as const;

/** Ends the command with an exit code, after its output was written. */
export class CliExit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

/** A mistake in how the command was called (exit 2). */
export class UsageError extends Error {}

const DEFAULT_WAIT_TIMEOUT = '10m';

interface Io {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  env: NodeJS.ProcessEnv;
}

const io: Io = { stdout: process.stdout, stderr: process.stderr, env: process.env };

/** `90` (seconds), `90s`, `1500ms`, `5m`, `1h` -> milliseconds. */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!match) throw new InvalidArgumentError('a duration such as 90s, 5m, 1h or 1500ms');
  const unit = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[match[2] ?? 's']!;
  return Math.round(Number(match[1]) * unit);
}

function outputFormat(opts: GlobalOptions): OutputFormat {
  if (opts.output === 'json' || opts.output === 'table') return opts.output;
  return io.stdout.isTTY ? 'table' : 'json';
}

function clientFor(opts: GlobalOptions): { api: ApiClient; settings: ReturnType<typeof resolveSettings> } {
  const settings = resolveSettings(opts, io.env);
  return { api: new ApiClient({ baseUrl: settings.apiUrl, token: settings.token, channel: 'cli', userAgent: `cloud-cli/${VERSION}` }), settings };
}

/** `type/code: message (request_id)` on stderr, then the details a person needs to act on it. */
export function reportApiError(res: ApiResponse, hasToken: boolean): void {
  const error = errorOf(res);
  if (!error) {
    io.stderr.write(`http_error/${res.status}: ${res.text.slice(0, 300).trim() || 'no body'} (${res.requestId ?? 'no request id'})\n`);
    return;
  }
  io.stderr.write(`${error.type}/${error.code}: ${error.message} (${error.request_id ?? res.requestId ?? 'no request id'})\n`);
  if (typeof error.required_scope === 'string') io.stderr.write(`  required scope: ${error.required_scope}\n`);
  // One field error is the message already.
  if (Array.isArray(error.errors) && error.errors.length > 1) {
    for (const e of error.errors as Array<{ param?: string; message?: string }>) io.stderr.write(`  ${e.param}: ${e.message}\n`);
  }
  if (typeof error.retry_after === 'number') io.stderr.write(`  retry after: ${error.retry_after} s\n`);
  if (res.status === 401 && !hasToken) io.stderr.write('  no credential: run `cloud login`, or set CLOUD_TOKEN, or pass --token\n');
  else if (error.code === 'session_expired') io.stderr.write('  the session ended: run `cloud login` again\n');
}

function fail(res: ApiResponse, api: ApiClient): never {
  reportApiError(res, api.hasToken);
  throw new CliExit(EXIT.apiError);
}

/** `--data '{"a":1}'`, `--data @file.json`, `--data -` (stdin). */
async function readData(value: string): Promise<unknown> {
  let text = value;
  if (value === '-') text = await readAll();
  else if (value.startsWith('@')) {
    try {
      text = readFileSync(value.slice(1), 'utf8');
    } catch (err) {
      throw new UsageError(`--data ${value}: ${(err as Error).message}`);
    }
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new UsageError('--data must be JSON (or @file, or - for stdin)');
  }
}

async function readAll(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

// ---- flags from JSON Schema -------------------------------------------------------------------

/** The one type a flag value is read as, from the field's JSON Schema. */
function flagKind(schema: JsonSchema): { kind: string; choices?: string[]; items?: JsonSchema } {
  const variants: JsonSchema[] = schema.anyOf ?? schema.oneOf ?? [schema];
  const nonNull = variants.filter((v) => v.type !== 'null');
  const s = nonNull.length === 1 ? nonNull[0] : schema;
  const type = Array.isArray(s.type) ? s.type.filter((t: string) => t !== 'null')[0] : s.type;
  if (Array.isArray(s.enum) && s.enum.every((v: unknown) => typeof v === 'string')) return { kind: 'string', choices: s.enum };
  if (type === 'string' || type === 'integer' || type === 'number' || type === 'boolean' || type === 'object') return { kind: type };
  if (type === 'array') return { kind: 'array', items: s.items ?? {} };
  return { kind: 'json' };
}

function parseScalar(kind: string, value: string, flag: string): unknown {
  switch (kind) {
    case 'integer':
    case 'number': {
      const n = Number(value);
      if (value.trim() === '' || Number.isNaN(n) || (kind === 'integer' && !Number.isInteger(n)))
        throw new InvalidArgumentError(`--${flag} takes ${kind === 'integer' ? 'an integer' : 'a number'}`);
      return n;
    }
    case 'boolean':
      if (/^(true|1|yes)$/i.test(value)) return true;
      if (/^(false|0|no)$/i.test(value)) return false;
      throw new InvalidArgumentError(`--${flag} takes true or false`);
    case 'object':
      try {
        const parsed = JSON.parse(value);
        if (parsed && typeof parsed === 'object') return parsed;
      } catch {
        // reported below
      }
      throw new InvalidArgumentError(`--${flag} takes a JSON object, e.g. '{"key":"value"}'`);
    case 'json':
      try {
        return JSON.parse(value);
      } catch {
        return value;
      }
    default:
      return value;
  }
}

function fieldOption(field: CommandField): Option {
  const { kind, choices, items } = flagKind(field.schema);
  const describe = [
    field.schema.description,
    field.required ? '(required)' : null,
    kind === 'array' ? '(comma-separated or repeated; or a JSON array)' : null,
    kind === 'object' ? '(JSON)' : null,
    field.schema.default !== undefined ? `(API default: ${JSON.stringify(field.schema.default)})` : null,
  ]
    .filter(Boolean)
    .join(' ');
  let option: Option;
  if (kind === 'boolean') {
    option = new Option(`--${field.flag} [bool]`, describe).argParser((v) => parseScalar('boolean', v, field.flag));
  } else if (kind === 'array') {
    const itemKind = flagKind(items ?? {});
    option = new Option(`--${field.flag} <values>`, describe).argParser((value: string, previous: unknown) => {
      const before = Array.isArray(previous) ? previous : [];
      if (value.trim().startsWith('[')) {
        const parsed = parseScalar('json', value, field.flag);
        if (!Array.isArray(parsed)) throw new InvalidArgumentError(`--${field.flag} takes a JSON array or comma-separated values`);
        return [...before, ...parsed];
      }
      const parts = value === '' ? [] : value.split(',').map((v) => v.trim());
      if (itemKind.choices)
        for (const p of parts)
          if (!itemKind.choices.includes(p)) throw new InvalidArgumentError(`--${field.flag}: "${p}" is not one of ${itemKind.choices.join(', ')}`);
      return [...before, ...parts.map((p) => parseScalar(itemKind.kind, p, field.flag))];
    });
  } else {
    const placeholder = kind === 'integer' || kind === 'number' ? 'n' : kind === 'object' ? 'json' : 'value';
    option = new Option(`--${field.flag} <${placeholder}>`, describe);
    if (choices) option.choices(choices);
    else option.argParser((v) => parseScalar(kind, v, field.flag));
  }
  return option;
}

// ---- route commands ---------------------------------------------------------------------------

function leafDescription(rc: RouteCommand): string {
  const r = rc.route;
  const lines = [
    r.summary,
    '',
    `Scope:   ${r.scope ?? (r.credential === 'none' ? 'none (public)' : 'none (any valid credential)')}${r.credential === 'session' ? ' (session credentials only)' : ''}`,
    `Marks:   ${marksLong(r)}`,
    `Calls:   ${r.method.toUpperCase()} ${r.path}`,
  ];
  if (r.description) lines.push('', r.description);
  if (r.returnsSecret) lines.push('', 'Returns a secret, shown once: it goes to stdout as the API sends it.');
  if (rc.async) lines.push('', 'Asynchronous: answers with an operation; --wait polls it to the end and prints the final operation.');
  return lines.join('\n');
}

async function runRoute(rc: RouteCommand, positionals: string[], opts: Record<string, unknown> & GlobalOptions, cmd: Command): Promise<void> {
  const values: Record<string, unknown> = {};
  rc.positionals.forEach((p, i) => (values[p.name] = positionals[i]));
  for (const field of rc.fields) {
    const key = cmd.options.find((o) => o.long === `--${field.flag}`)?.attributeName();
    if (key && opts[key] !== undefined) values[field.name] = opts[key];
  }
  const data = typeof opts.data === 'string' ? await readData(opts.data) : undefined;
  if (rc.wholeBody && data === undefined && rc.route.hasBody) throw new UsageError('this command takes its body with --data');
  const plan = buildRequest(rc.route, values, data);
  const { api } = clientFor(opts);
  const format = outputFormat(opts);

  if (opts.all && rc.paginated) return walkPages(api, plan.url, format);

  const res = await api.request({ method: plan.method, url: plan.url, body: plan.body, replaySafe: !rc.route.returnsSecret });
  if (!res.ok) fail(res, api);
  if (opts.wait && rc.async) {
    const op = res.json as Operation | undefined;
    if (!op || typeof op.id !== 'string') throw new UsageError('the answer is not an operation; nothing to wait for');
    return waitAndReport(api, op.id, typeof opts.timeout === 'number' ? opts.timeout : parseDuration(DEFAULT_WAIT_TIMEOUT), format);
  }
  writeBody(io.stdout, format, res.text, res.json);
}

/** `--all`: every page, joined into one list envelope. */
async function walkPages(api: ApiClient, firstUrl: string, format: OutputFormat): Promise<void> {
  const data: unknown[] = [];
  const base = new URL(firstUrl, 'http://x');
  if (!base.searchParams.has('limit')) base.searchParams.set('limit', '100');
  let cursor: string | null = null;
  for (;;) {
    const url = new URL(base);
    if (cursor) url.searchParams.set('cursor', cursor);
    const res = await api.request({ method: 'GET', url: url.pathname + url.search });
    if (!res.ok) fail(res, api);
    const page = res.json as { data?: unknown[]; has_more?: boolean; next_cursor?: string | null };
    data.push(...(page.data ?? []));
    if (!page.has_more || !page.next_cursor) break;
    cursor = page.next_cursor;
  }
  const body = { object: 'list', data, has_more: false, next_cursor: null };
  if (format === 'json') io.stdout.write(`${JSON.stringify(body)}${io.stdout.isTTY ? '\n' : ''}`);
  else io.stdout.write(formatTable(body, terminalWidth(io.stdout)));
}

/** Polls to the end with a progress bar on stderr; the final operation on stdout; exit 0, 1 (failed) or 3 (timeout). */
async function waitAndReport(api: ApiClient, id: string, timeoutMs: number, format: OutputFormat): Promise<void> {
  const progress = new ProgressReporter(io.stderr, id);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  try {
    const outcome = await waitForOperation(api, id, { timeoutMs, onState: (op) => progress.update(op), signal: stop.signal });
    if (outcome.kind === 'error') {
      progress.finish();
      fail(outcome.response, api);
    }
    if (outcome.kind === 'timeout') {
      progress.finish(
        stop.signal.aborted
          ? `interrupted: ${id} goes on; \`cloud operations wait ${id}\` picks it up again`
          : `timeout: ${id} is still ${outcome.operation?.status ?? 'unknown'} after ${Math.round(timeoutMs / 1000)} s; \`cloud operations wait ${id}\` keeps waiting`,
      );
      if (outcome.response) writeBody(io.stdout, format, outcome.response.text, outcome.response.json);
      throw new CliExit(stop.signal.aborted ? 130 : EXIT.waitTimeout);
    }
    const op = outcome.operation;
    progress.finish();
    writeBody(io.stdout, format, outcome.response.text, outcome.response.json);
    if (op.status === 'failed') {
      const code = op.error?.code ?? 'failed';
      io.stderr.write(`operation_failed/${code}: ${op.error?.message ?? `${op.type} failed`} (${op.id})\n`);
      throw new CliExit(EXIT.apiError);
    }
  } finally {
    process.off('SIGINT', onSignal);
  }
}

function addRouteCommand(parent: Command, rc: RouteCommand): Command {
  const name = rc.words[rc.words.length - 1];
  const cmd = parent
    .command(name)
    .summary(`${rc.route.summary}  [${accessLabel(rc.route)}]`)
    .description(leafDescription(rc));
  for (const p of rc.positionals) {
    const example = p.schema.example !== undefined ? `e.g. ${p.schema.example}` : null;
    cmd.argument(`<${p.name}>`, [pathParamDescription(p.schema.description), example, '(give it as is; it is sent percent-encoded)'].filter(Boolean).join(' '));
  }
  for (const field of rc.fields) cmd.addOption(fieldOption(field));
  if (rc.route.hasBody) cmd.option('--data <json>', 'the request body as JSON, @file or - (stdin); flags are laid over it');
  if (rc.paginated) cmd.option('--all', 'fetch every page and print them as one list');
  if (rc.async) {
    cmd.option('--wait', 'poll the operation to its end, with progress on stderr; prints the final operation');
    cmd.option('--timeout <duration>', `with --wait: give up after this long, exit 3 (default ${DEFAULT_WAIT_TIMEOUT})`, parseDuration);
  }
  cmd.action(async (...args: unknown[]) => {
    const command = args[args.length - 1] as Command;
    await runRoute(rc, args.slice(0, rc.positionals.length) as string[], command.optsWithGlobals(), command);
  });
  return cmd;
}

/** A top-level group is named by its routes' tag; a nested one by what is under it (`list, create, delete, restore`). */
function groupSummary(commands: RouteCommand[], depth: number): string {
  const scopes = [...new Set(commands.map((c) => c.route.scope).filter((s): s is string => s !== null))].sort();
  const what = depth === 1 ? [...new Set(commands.map((c) => c.route.tag))].join(', ') : [...new Set(commands.map((c) => c.words[depth]))].join(', ');
  return `${what}  [${scopes.length ? scopes.join(' ') : 'any credential'}]`;
}

/** Adds one command per route under nested group commands (`vps`, `vps backups`, ...). */
function addRouteCommands(program: Command, routes: ClientRoute[]): Map<string, Command> {
  const commands = routeCommands(routes);
  const groups = new Map<string, Command>([['', program]]);
  const groupOf = (words: string[]): Command => {
    const key = words.join(' ');
    const existing = groups.get(key);
    if (existing) return existing;
    const parent = groupOf(words.slice(0, -1));
    const under = commands.filter((c) => c.words.length > words.length && c.words.slice(0, words.length).join(' ') === key);
    const summary = groupSummary(under, words.length);
    const group = parent.command(words[words.length - 1]).summary(summary);
    group.description(`${summary}\n\nEach command shows [scope · marks]: R reversible, D destructive, A asynchronous, I idempotent.`);
    groups.set(key, group);
    return group;
  };
  for (const rc of commands) addRouteCommand(groupOf(rc.words.slice(0, -1)), rc);
  return groups;
}

// ---- built-in commands ------------------------------------------------------------------------

function addLogin(program: Command): void {
  program
    .command('login')
    .summary('Sign in with email and password and keep the session in a profile')
    .description(
      `Signs in (POST /v1/sessions) and saves the session token in the profile (--profile, default the active one) of ${configPath(io.env)} (mode 0600), then makes that profile the active one.\nThe password is prompted without echo; --password-stdin reads it from stdin. --with-token stores an API key read from stdin instead.\nThe token is not printed unless --show-token is given.`,
    )
    .option('--email <email>', "the account user's email (prompted when absent)")
    .option('--password-stdin', 'read the password from the first line of stdin')
    .option('--with-token', 'read an API key (cloud_live_...) or session token from stdin and store it')
    .option('--show-token', 'print the token on stdout')
    .action(async (_opts, command: Command) => {
      const opts = command.optsWithGlobals();
      const config = readConfig(configPath(io.env));
      const name = opts.profile ?? io.env.CLOUD_PROFILE ?? config.active;
      const apiUrl = opts.apiUrl ?? io.env.CLOUD_API_URL ?? config.profiles[name]?.api_url ?? resolveSettings({}, io.env).apiUrl;
      const api = new ApiClient({ baseUrl: apiUrl, channel: 'cli', userAgent: `cloud-cli/${VERSION}` });
      let token: string;
      let profile;
      if (opts.withToken) {
        token = (await readLine()).trim();
        if (!token) throw new UsageError('--with-token: no token on stdin');
        const check = await new ApiClient({ baseUrl: apiUrl, token, channel: 'cli' }).request({ method: 'GET', url: '/v1/account/credential' });
        if (!check.ok) fail(check, api);
        const credential = check.json as { type: 'api_key' | 'session' };
        profile = { api_url: apiUrl, token, token_type: credential.type };
        io.stderr.write(`Stored a ${credential.type === 'api_key' ? 'n API key' : ' session'} in profile "${name}" (${configPath(io.env)}).\n`);
      } else {
        const email = opts.email ?? (await prompt('Email: ', io.stderr)).trim();
        if (!email) throw new UsageError('an email is required');
        const password = opts.passwordStdin ? await readLine() : await promptHidden('Password: ', io.stderr);
        const res = await api.request({ method: 'POST', url: '/v1/sessions', body: { email, password }, replaySafe: false });
        if (!res.ok) fail(res, api);
        const session = res.json as { token: string; expires_at: string; user: { email: string; is_owner: boolean } };
        token = session.token;
        profile = { api_url: apiUrl, token, token_type: 'session' as const, email: session.user.email, expires_at: session.expires_at };
        io.stderr.write(
          `Signed in as ${session.user.email}${session.user.is_owner ? ' (owner)' : ''} until ${session.expires_at}; profile "${name}" saved in ${configPath(io.env)}.\n`,
        );
      }
      config.profiles[name] = profile;
      config.active = name;
      writeConfig(config, configPath(io.env));
      if (opts.showToken) io.stdout.write(`${token}\n`);
    });

  program
    .command('logout')
    .summary("End the profile's session and forget its token")
    .action(async (_opts, command: Command) => {
      const opts = command.optsWithGlobals();
      const config = readConfig(configPath(io.env));
      const name = opts.profile ?? io.env.CLOUD_PROFILE ?? config.active;
      const profile = config.profiles[name];
      if (!profile?.token) throw new UsageError(`profile "${name}" holds no token`);
      if (profile.token_type !== 'api_key') {
        const api = new ApiClient({ baseUrl: profile.api_url, token: profile.token, channel: 'cli' });
        const res = await api.request({ method: 'DELETE', url: '/v1/sessions/current' });
        if (!res.ok && res.status !== 401) fail(res, api);
      }
      delete profile.token;
      delete profile.token_type;
      delete profile.expires_at;
      writeConfig(config, configPath(io.env));
      io.stderr.write(`Signed out; profile "${name}" holds no token now.\n`);
    });
}

function addProfile(program: Command): void {
  const profile = program.command('profile').summary('Choose and list the profiles of the config file');
  profile
    .command('use <name>')
    .summary('Make a profile the active one')
    .action((name: string) => {
      const config = readConfig(configPath(io.env));
      if (!config.profiles[name]) {
        const known = Object.keys(config.profiles);
        throw new UsageError(`no profile "${name}"${known.length ? `; known: ${known.join(', ')}` : '; `cloud login --profile NAME` creates one'}`);
      }
      config.active = name;
      writeConfig(config, configPath(io.env));
      io.stderr.write(`Active profile: ${name} (${config.profiles[name].api_url}).\n`);
    });
  profile
    .command('list')
    .summary('List the profiles (never their tokens)')
    .action(() => {
      const config = readConfig(configPath(io.env));
      const rows = Object.entries(config.profiles).map(([name, p]) => ({
        active: name === config.active ? '*' : '',
        name,
        api_url: p.api_url,
        credential: p.token ? (p.token_type ?? 'token') : 'none',
        email: p.email ?? null,
        expires_at: p.expires_at ?? null,
      }));
      io.stdout.write(formatTable({ object: 'list', data: rows }, terminalWidth(io.stdout)));
    });
  profile
    .command('token [name]')
    .summary('Print the token of a profile (the active one by default)')
    .action((name: string | undefined) => {
      const config = readConfig(configPath(io.env));
      const p = config.profiles[name ?? config.active];
      if (!p?.token) throw new UsageError(`profile "${name ?? config.active}" holds no token`);
      io.stdout.write(`${p.token}\n`);
    });
}

function addApi(program: Command, routes: ClientRoute[]): void {
  program
    .command('api <method> <path>')
    .summary('Call any path of the API: cloud api GET /v1/services')
    .description(
      "Sends one request with the CLI's credential and headers (Cloud-Channel: cli, an Idempotency-Key on mutations) and prints the answer like the other commands.",
    )
    .option('--data <json>', 'the request body as JSON, @file or - (stdin)')
    .action(async (method: string, path: string, _opts, command: Command) => {
      const opts = command.optsWithGlobals();
      const verb = method.toUpperCase();
      if (!['GET', 'POST', 'PUT', 'PATCH', 'DELETE'].includes(verb)) throw new UsageError(`method must be GET, POST, PUT, PATCH or DELETE, not ${method}`);
      if (!path.startsWith('/')) throw new UsageError('path must start with /, e.g. /v1/services');
      const body = typeof opts.data === 'string' ? await readData(opts.data) : undefined;
      const route = matchRoute(routes, verb, path.split('?')[0]);
      const { api } = clientFor(opts);
      const res = await api.request({ method: verb, url: path, body, replaySafe: verb === 'GET' || (route ? !route.returnsSecret : false) });
      if (!res.ok) fail(res, api);
      writeBody(io.stdout, outputFormat(opts), res.text, res.json);
    });
}

function addOperationsWait(groups: Map<string, Command>, program: Command): void {
  const operations = groups.get('operations') ?? program.command('operations');
  operations
    .command('wait <id>')
    .summary('Wait for an operation started elsewhere; progress on stderr  [operations:read]')
    .option('--timeout <duration>', `give up after this long, exit 3 (default ${DEFAULT_WAIT_TIMEOUT})`, parseDuration)
    .action(async (id: string, _opts, command: Command) => {
      const opts = command.optsWithGlobals();
      const { api } = clientFor(opts);
      await waitAndReport(api, id, typeof opts.timeout === 'number' ? opts.timeout : parseDuration(DEFAULT_WAIT_TIMEOUT), outputFormat(opts));
    });
}

function addCompletion(program: Command): void {
  program
    .command('completion')
    .summary('Print a shell completion script: source <(cloud completion bash)')
    .addArgument(new Argument('<shell>', 'bash or zsh').choices(['bash', 'zsh']))
    .action((shell: string) => {
      io.stdout.write(completionScript(program, shell as 'bash' | 'zsh'));
    });
}

function addMcp(program: Command, routes: ClientRoute[]): void {
  program
    .command('mcp')
    .summary("Serve the API as MCP tools on stdin/stdout, with this CLI's credential")
    .option('--read-only', 'offer only the tools that read (GET routes)')
    .action(async (_opts, command: Command) => {
      const opts = command.optsWithGlobals();
      const settings = resolveSettings(opts, io.env);
      if (!settings.token) throw new UsageError('cloud mcp needs a credential: `cloud login`, CLOUD_TOKEN or --token');
      // Loaded here: the MCP SDK is only needed by this command.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const { runStdioServer } = require('../mcp/stdio') as typeof import('../mcp/stdio');
      const api = new ApiClient({ baseUrl: settings.apiUrl, token: settings.token, channel: 'mcp', userAgent: `cloud-mcp/${VERSION}` });
      await runStdioServer({ routes, api, readOnly: Boolean(opts.readOnly), version: VERSION });
    });
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
export const VERSION: string = require('../package.json').version;

export function buildProgram(routes: ClientRoute[]): Command {
  const program = new Command('cloud')
    .description(
      'The command line of the Cloud control-plane API. Every /v1 route is a command: cloud <resource> <verb> [ids] [--field value].\nEach command shows [scope · marks]: R reversible, D destructive, A asynchronous, I idempotent.\nCredential: --token, CLOUD_TOKEN, or the profile written by `cloud login`. API: --api-url, CLOUD_API_URL, the profile, or http://127.0.0.1:3000.\nExit codes: 0 success, 1 API error or failed operation, 2 usage error, 3 --wait timed out.',
    )
    .version(VERSION, '--version')
    .addOption(new Option('-o, --output <format>', 'table (default on a terminal) or json (the API body, unchanged)').choices(['table', 'json']))
    .option('--api-url <url>', 'the API base URL (else CLOUD_API_URL, the profile, http://127.0.0.1:3000)')
    .option('--token <token>', 'the credential (else CLOUD_TOKEN, the profile)')
    .option('--profile <name>', 'the profile to use (else CLOUD_PROFILE, the active one)')
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureHelp({ sortSubcommands: true, showGlobalOptions: true })
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) });

  addLogin(program);
  addProfile(program);
  addApi(program, routes);
  const groups = addRouteCommands(program, routes);
  addOperationsWait(groups, program);
  addCompletion(program);
  addMcp(program, routes);
  return program;
}
