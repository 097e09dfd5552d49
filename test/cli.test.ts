import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { execFileSync, spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createUser, FIXTURE_PASSWORD } from './helpers/fixtures';
import { cliHome, runCli, runCliOnTty, type CliHome } from './helpers/cli';
import { createVps, failNextTask, type TestVps } from './vps.support';
import { seedOrders } from '../db/seeds/orders.seed';

/**
 * The `cloud` bin end to end against the running stack (PostgreSQL, Temporal dev server, worker,
 * simulators), as a child process with its own HOME: what a person at a terminal and a script see.
 */
let stack: Stack;
let home: CliHome;
let vps: TestVps;
let email: string;
let ownerEnv: Record<string, string>;

const REQUEST_ID = /\(req_[0-9A-Z]{26}\)/;

async function auditEntries(query: string): Promise<any[]> {
  // The audit log is written in batches off the request path: write what is queued, then read.
  for (let i = 0; ; i++) {
    await stack.api.deps.audit.flush();
    const res = await stack.http.get(`/v1/audit-logs?limit=100&${query}`, { token: stack.owner.key });
    expect(res.status, res.text).toBe(200);
    if (res.body.data.length > 0 || i > 40) return res.body.data;
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  stack = await startStack();
  await seedOrders(stack.db);
  vps = await createVps(stack, { type: 'qemu' });
  email = (await stack.db('users').where({ id: stack.owner.userId }).first()).email;
  home = cliHome(stack.url);
  ownerEnv = { ...home.env, CLOUD_TOKEN: stack.owner.key };
});
afterAll(() => stack?.close());

describe('cloud login and profiles', () => {
  it('prompts for the password without echo, keeps the session in a 0600 profile, never prints the token', async () => {
    const password = FIXTURE_PASSWORD;
    const tty = await runCliOnTty(['login', '--email', email], { env: home.env, answers: [{ after: 'Password: ', type: `${password}\r` }] });
    expect(tty.code, tty.transcript).toBe(0);
    expect(tty.transcript).toContain('Password: ');
    expect(tty.transcript).not.toContain(password);
    expect(tty.transcript).not.toContain('cloud_sess_');
    expect(tty.transcript).toMatch(/Signed in as .* profile "default"/);

    expect(statSync(home.configFile).mode & 0o777).toBe(0o600);
    expect(statSync(path.dirname(home.configFile)).mode & 0o777).toBe(0o700);
    const config = JSON.parse(readFileSync(home.configFile, 'utf8'));
    expect(config.active).toBe('default');
    expect(config.profiles.default).toMatchObject({ api_url: stack.url, token_type: 'session', email });
    expect(config.profiles.default.token).toMatch(/^cloud_sess_/);

    // The profile is the credential now: no CLOUD_TOKEN in this environment.
    const who = await runCli(['account', 'credential', '-o', 'json'], { env: home.env });
    expect(who.code, who.stderr).toBe(0);
    expect(JSON.parse(who.stdout)).toMatchObject({ type: 'session', is_owner: true });
  });

  it('reads the password from stdin for scripts, prints the token only when asked, and switches profiles', async () => {
    const quiet = await runCli(['login', '--email', email, '--password-stdin', '--profile', 'second'], { env: home.env, input: `${FIXTURE_PASSWORD}\n` });
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout).toBe('');
    expect(quiet.stdout + quiet.stderr).not.toContain('cloud_sess_');

    const shown = await runCli(['login', '--email', email, '--password-stdin', '--profile', 'third', '--show-token'], {
      env: home.env,
      input: `${FIXTURE_PASSWORD}\n`,
    });
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout.trim()).toMatch(/^cloud_sess_\S+$/);

    const wrong = await runCli(['login', '--email', email, '--password-stdin', '--profile', 'fourth'], { env: home.env, input: 'not the password\n' });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/^authentication_error\/invalid_credentials: .+ \(req_[0-9A-Z]{26}\)$/m);

    const list = await runCli(['profile', 'list'], { env: home.env });
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/\*\s+third/);
    expect(list.stdout).not.toContain('cloud_sess_');

    expect((await runCli(['profile', 'use', 'default'], { env: home.env })).code).toBe(0);
    expect(JSON.parse(readFileSync(home.configFile, 'utf8')).active).toBe('default');
    const unknown = await runCli(['profile', 'use', 'nope'], { env: home.env });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('no profile "nope"');
    expect(statSync(home.configFile).mode & 0o777).toBe(0o600);
  });
});

describe('cloud commands from the route table', () => {
  it('lists with --all across pages, JSON on stdout', async () => {
    const created = [];
    for (let i = 0; i < 5; i++) created.push((await createService(stack.db, stack.owner.accountId, { family: 'dns' })).id);
    const since = new Date().toISOString();
    const res = await runCli(['services', 'list', '--family', 'dns', '--limit', '2', '--all', '-o', 'json'], { env: ownerEnv });
    expect(res.code, res.stderr).toBe(0);
    const body = JSON.parse(res.stdout);
    expect(body).toMatchObject({ object: 'list', has_more: false, next_cursor: null });
    expect(body.data.map((s: any) => s.id).sort()).toEqual([...created].sort());
    const pages = await auditEntries(`via=cli&created_after=${encodeURIComponent(since)}`);
    expect(pages.filter((e) => e.route === '/v1/services').length).toBe(3);
  });

  it('prints the API body byte for byte with -o json, and a table that fits the width with -o table', async () => {
    const direct = await stack.http.get(`/v1/services/${vps.id}`, { token: stack.owner.key });
    const json = await runCli(['services', 'get', vps.id, '-o', 'json'], { env: ownerEnv });
    expect(json.code, json.stderr).toBe(0);
    // Same bytes as the API sends (no reformatting, no added newline when stdout is not a terminal).
    expect(json.stdout).toBe(direct.text);

    const table = await runCli(['services', 'list', '-o', 'table'], { env: { ...ownerEnv, COLUMNS: '60' } });
    expect(table.code, table.stderr).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID\s+FAMILY\s+STATUS/);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(60);
    expect(table.stdout).toContain(vps.id);
  });

  it('runs an asynchronous command with --wait: progress lines on stderr, the final operation as JSON on stdout', async () => {
    const res = await runCli(['vps', 'power', vps.id, '--action', 'reboot', '--wait'], { env: ownerEnv });
    expect(res.code, res.stderr).toBe(0);
    const op = JSON.parse(res.stdout);
    expect(op).toMatchObject({ object: 'operation', type: 'vps.power', status: 'succeeded', progress: 100, result: { action: 'reboot' } });
    // Not a terminal: one plain line per change of status or progress.
    expect(res.stderr).toContain(`${op.id} vps.power succeeded 100%`);
    expect(
      res.stderr
        .trim()
        .split('\n')
        .every((l) => l.startsWith(`${op.id} vps.power `)),
    ).toBe(true);
    const stored = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
    expect(JSON.parse(res.stdout)).toEqual(stored.body);
  });

  it('draws a progress bar on a terminal', async () => {
    const out = path.join(home.env.HOME, 'power.json');
    const tty = await runCliOnTty(['vps', 'power', vps.id, '--action', 'reboot', '--wait'], { env: ownerEnv, redirectStdout: out });
    expect(tty.code, tty.transcript).toBe(0);
    expect(tty.transcript).toContain('\r\x1b[2K[');
    expect(tty.transcript).toMatch(/\[█+\] 100%\s+succeeded/);
    expect(JSON.parse(readFileSync(out, 'utf8'))).toMatchObject({ status: 'succeeded' });
  });

  it("ends with exit 1 and the operation's error when the operation fails", async () => {
    await failNextTask(stack, vps);
    const res = await runCli(['vps', 'power', vps.id, '--action', 'stop', '--wait'], { env: ownerEnv });
    expect(res.code).toBe(1);
    const op = JSON.parse(res.stdout);
    expect(op).toMatchObject({ status: 'failed', type: 'vps.power' });
    expect(res.stderr).toContain(`operation_failed/${op.error.code}: `);
    expect(res.stderr).toContain(`(${op.id})`);
  });

  it('ends with exit 3 when --timeout passes first, and `operations wait` picks the operation up again', async () => {
    // An order above the account's credit waits for its invoice to be paid (for ever: 1 s is enough).
    const res = await runCli(['orders', 'create', '--product', 'lb-s', '--wait', '--timeout', '1s'], { env: ownerEnv });
    expect(res.code, res.stderr).toBe(3);
    const op = JSON.parse(res.stdout);
    expect(op).toMatchObject({ type: 'orders.create', status: 'pending' });
    expect(res.stderr).toContain(`timeout: ${op.id} is still pending`);

    const order = await stack.http.get(`/v1/orders/${op.resource.id}`, { token: stack.owner.key });
    expect(order.body.invoice.status).toBe('unpaid');
    const paid = await stack.http.post(`/_dev/invoices/${order.body.invoice.id}/pay`);
    expect(paid.status, paid.text).toBe(200);
    const waited = await runCli(['operations', 'wait', op.id, '--timeout', '60s'], { env: ownerEnv });
    expect(waited.code, waited.stderr).toBe(0);
    expect(JSON.parse(waited.stdout)).toMatchObject({ id: op.id, status: 'succeeded' });
  });

  it('sends an Idempotency-Key with every mutation (orders refuse to run without one)', async () => {
    const since = new Date();
    const res = await runCli(['api', 'POST', '/v1/orders', '--data', JSON.stringify({ product: 'dns-zone', options: { zone: 'cli-test.example' } })], {
      env: ownerEnv,
    });
    expect(res.code, res.stderr).toBe(0);
    expect(JSON.parse(res.stdout)).toMatchObject({ object: 'operation', type: 'orders.create' });
    const keys = await stack.db('idempotency_keys').where({ account_id: stack.owner.accountId, path: '/v1/orders' }).where('created_at', '>=', since);
    expect(keys).toHaveLength(1);
    expect(keys[0].key).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('reports a missing scope as type/code: message (request_id) with the scope, exit 1', async () => {
    const narrow = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['services:read'] });
    const res = await runCli(['vps', 'list'], { env: { ...home.env, CLOUD_TOKEN: narrow.token } });
    expect(res.code).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toMatch(/^authorization_error\/insufficient_scope: This call needs the scope "vps:read"\. \(req_[0-9A-Z]{26}\)$/m);
    expect(res.stderr).toContain('required scope: vps:read');
    // Any credential may ask what it holds; that is how the CLI and `cloud mcp` know it.
    const who = await runCli(['account', 'credential'], { env: { ...home.env, CLOUD_TOKEN: narrow.token } });
    expect(who.code, who.stderr).toBe(0);
    expect(JSON.parse(who.stdout)).toEqual({
      object: 'credential',
      id: narrow.id,
      type: 'api_key',
      scopes: ['services:read'],
      service_allowlist: [],
      is_owner: true,
      rate_limit_tier: 'standard',
    });
    // --token wins over CLOUD_TOKEN.
    const owner = await runCli(['vps', 'list', '--token', stack.owner.key], { env: { ...home.env, CLOUD_TOKEN: narrow.token } });
    expect(owner.code, owner.stderr).toBe(0);
  });

  it('reports API validation errors with exit 1, and usage errors with exit 2', async () => {
    const invalid = await runCli(['services', 'list', '--limit', '0'], { env: ownerEnv });
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toMatch(/^invalid_request_error\/validation_failed: limit: .*\(req_/m);
    expect(invalid.stderr).toMatch(REQUEST_ID);

    // Each its own process; they do not depend on each other, so they run side by side.
    const usage = [
      ['vps', 'power'],
      ['vps', 'power', vps.id, '--action', 'explode'],
      ['vps', 'power', vps.id, 'extra'],
      ['no-such-resource'],
      ['vps'],
      ['services', 'list', '-o', 'yaml'],
      ['services', 'list', '--limit', 'many'],
      ['vps', 'power', vps.id, '--action', 'start', '--wait', '--timeout', 'soon'],
      ['api', 'FETCH', '/v1/services'],
      ['api', 'POST', '/v1/orders', '--data', '{not json'],
    ];
    const results = await Promise.all(usage.map((args) => runCli(args, { env: ownerEnv })));
    for (const [i, res] of results.entries()) {
      expect(res.code, `${usage[i].join(' ')}: ${res.stderr}`).toBe(2);
      expect(res.stderr.length).toBeGreaterThan(0);
    }
  });

  it('shows scope and marks at every level of --help', async () => {
    const top = await runCli(['--help'], { env: home.env });
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/vps\s+Virtual servers\s+\[vps:console\s+vps:power\s+vps:read\s+vps:write\]/);
    const group = await runCli(['vps', '--help'], { env: home.env });
    expect(group.stdout).toMatch(/power \[options\] <id>\s+Start, stop or reboot a virtual server\s+\[vps:power\s+·\s+R A I\]/);
    const leaf = await runCli(['vps', 'power', '--help'], { env: home.env });
    expect(leaf.stdout).toContain('Scope:   vps:power');
    expect(leaf.stdout).toContain('Marks:   R (reversible), A (asynchronous), I (idempotent)');
    expect(leaf.stdout).toMatch(/--action <value>.*choices: "start", "stop", "reboot"/s);
    expect(leaf.stdout).toContain('--wait');
  });

  it('completes commands and flag values in bash', async () => {
    const script = await runCli(['completion', 'bash'], { env: home.env });
    expect(script.code).toBe(0);
    const file = path.join(home.env.HOME, 'cloud.bash');
    writeFileSync(file, script.stdout);
    const complete = (words: string[]) =>
      execFileSync('bash', [
        '-c',
        `source "$1"; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _cloud_complete; echo "\${COMPREPLY[*]}"`,
        'bash',
        file,
      ])
        .toString()
        .trim();
    expect(complete(['cloud', 'vps', 'po'])).toBe('power');
    expect(complete(['cloud', 'vps', 'power', 'svc_1', '--action', ''])).toBe('start stop reboot');
    expect(complete(['cloud', '--api-url', 'x', 'vps', 'backups', ''])).toBe('list create delete restore');
  });

  it('sends Cloud-Channel: cli on every request, recorded as via cli in the audit log', async () => {
    const since = new Date().toISOString();
    const res = await runCli(['services', 'get', vps.id], { env: ownerEnv });
    expect(res.code, res.stderr).toBe(0);
    const entries = await auditEntries(`via=cli&created_after=${encodeURIComponent(since)}`);
    expect(entries.some((e) => e.path === `/v1/services/${vps.id}` && e.via === 'cli' && e.status === 200)).toBe(true);
  });

  it('signs out: the session ends and the profile forgets the token', async () => {
    const other = await createUser(stack.db, stack.owner.accountId, { scopes: ['services:read'], email: `cli-${Date.now()}@test.example` });
    const own = cliHome(stack.url);
    expect((await runCli(['login', '--email', other.email, '--password-stdin'], { env: own.env, input: `${FIXTURE_PASSWORD}\n` })).code).toBe(0);
    const token = JSON.parse(readFileSync(own.configFile, 'utf8')).profiles.default.token;
    const out = await runCli(['logout'], { env: own.env });
    expect(out.code, out.stderr).toBe(0);
    expect(JSON.parse(readFileSync(own.configFile, 'utf8')).profiles.default.token).toBeUndefined();
    expect((await stack.http.get('/v1/services', { token })).status).toBe(401);
    const after = await runCli(['services', 'list'], { env: own.env });
    expect(after.code).toBe(1);
    expect(after.stderr).toContain('authentication_error/authentication_required');
    expect(after.stderr).toContain('cloud login');
  });
});

/** A `node` older than the project's 24 on this machine (Debian 12's is 20), or null. */
const OLD_NODE = ['/usr/bin/node', '/bin/node'].find(
  (bin) => existsSync(bin) && Number(execFileSync(bin, ['-p', 'process.versions.node']).toString().split('.')[0]) < 24,
);
const ROOT = path.resolve(__dirname, '..');

describe.skipIf(!OLD_NODE)('cloud from a shell whose node is older than 24', () => {
  it('`npx cloud` prints only what the CLI prints: no npm engine warning, even on the first call with a fresh npx cache', () => {
    // A fresh npm cache: npx links the package into it, which is when npm checks `engines` (see .npmrc).
    const cache = mkdtempSync(path.join(tmpdir(), 'cloud-npx-'));
    try {
      for (const args of [['--version'], ['--version'], ['nosuch']]) {
        const run = spawnSync('npx', ['cloud', ...args], {
          cwd: ROOT,
          env: { PATH: `${path.dirname(OLD_NODE!)}:/usr/bin:/bin`, HOME: cache, npm_config_cache: cache, npm_config_update_notifier: 'false', NO_COLOR: '1' },
          encoding: 'utf8',
          timeout: 60_000,
        });
        if (args[0] === '--version') {
          expect(run.stderr).toBe('');
          expect(run.stdout).toBe(`${JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version}\n`);
          expect(run.status).toBe(0);
        } else {
          // The CLI's own answer and exit status come through; npm adds nothing.
          expect(run.stderr).not.toMatch(/npm (warn|WARN)|EBADENGINE/);
          expect(run.status).toBe(2);
        }
      }
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  });

  it('the bin starts again on the Node 24 of node_modules/.bin, with the same arguments and exit status', () => {
    // Every Node process started reports its version (NODE_OPTIONS reaches the re-exec too).
    const dir = mkdtempSync(path.join(tmpdir(), 'cloud-bin-'));
    try {
      const log = path.join(dir, 'versions');
      const report = path.join(dir, 'report.js');
      writeFileSync(report, `require('node:fs').appendFileSync(${JSON.stringify(log)}, process.versions.node.split('.')[0] + '\\n');\n`);
      const env = { PATH: '/usr/bin:/bin', HOME: dir, NODE_OPTIONS: `--require ${report}` };
      const ok = spawnSync(OLD_NODE!, [path.join(ROOT, 'cli/bin/cloud.js'), '--version'], { env, encoding: 'utf8', timeout: 60_000 });
      expect(ok.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
      expect(ok.status).toBe(0);
      const majors = readFileSync(log, 'utf8').trim().split('\n').map(Number);
      expect(majors[0]).toBeLessThan(24);
      expect(majors[majors.length - 1]).toBeGreaterThanOrEqual(24);
      const bad = spawnSync(OLD_NODE!, [path.join(ROOT, 'cli/bin/cloud.js'), 'nosuch'], { env, encoding: 'utf8', timeout: 60_000 });
      expect(bad.status).toBe(2);
      expect(bad.stderr).toContain('nosuch');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
