import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installedPostgresBinDir } from '../providers/dbinstances/postgresql.engine';
import { findBinary, serverDataRoot } from '../providers/local-server';
import { reapOrphanedAccounts } from '../providers/os-accounts';
import { createTestDatabase, type TestDatabase } from './helpers/db';

/**
 * `npm start` (scripts/dev.ts) as a newcomer runs it, twice on one machine: a first checkout comes
 * up, a second one beside it comes up too (address ranges of its own, ports of its own where the
 * first holds the usual ones), and Ctrl-C (SIGINT to each run's process group) leaves nothing
 * running that the run started: no API, worker or Temporal, no balancer's HAProxy, no database
 * instance, no PowerDNS. Slow (two whole local runs); skipped only when a server binary is missing.
 */
const here = path.resolve(__dirname, '..');
const binaries = [
  path.join(here, '.tools/venv/bin/temporal'),
  findBinary('haproxy'),
  findBinary('pdns_server'),
  findBinary('mariadbd', 'mysqld'),
  (() => {
    try {
      return path.join(installedPostgresBinDir(), 'initdb');
    } catch {
      return null;
    }
  })(),
];
const missing = binaries.filter((b) => b === null || !existsSync(b));

interface Run {
  checkout: string;
  child: ChildProcess;
  output: () => string;
}

let database: TestDatabase;
const checkouts: string[] = [];
const runs: Run[] = [];

/** A copy of this checkout (the working tree as it is, without its data), node_modules and tools linked. */
function copyCheckout(open: boolean): string {
  const parent = mkdtempSync(path.join(tmpdir(), 'cloud-checkout-'));
  // mkdtemp's 0700 is a home no other account enters; `open` makes it a 0755 one.
  if (open) chmodSync(parent, 0o755);
  const checkout = path.join(parent, 'cloud');
  const skip = new Set(['node_modules', '.tools', '.data', '.git']);
  cpSync(here, checkout, { recursive: true, filter: (src) => src === here || !skip.has(path.relative(here, src).split(path.sep)[0]) });
  symlinkSync(path.join(here, 'node_modules'), path.join(checkout, 'node_modules'));
  symlinkSync(path.join(here, '.tools'), path.join(checkout, '.tools'));
  checkouts.push(parent);
  return checkout;
}

/** `npm start` in `checkout`, in a process group of its own (as a terminal runs it); resolves with the API URL once the banner is printed. */
async function start(checkout: string): Promise<{ run: Run; apiUrl: string }> {
  let output = '';
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    DATABASE_URL: database.url,
    PATH: `${path.join(here, 'node_modules/.bin')}:${process.env.PATH}`,
    LOG_LEVEL: 'warn',
  };
  for (const name of [
    'PORT',
    'TEMPORAL_ADDRESS',
    'TEMPORAL_UI_URL',
    'LB_BIND_ADDRESS',
    'LB_DATA_DIR',
    'DBAAS_DATA_DIR',
    'DBAAS_ADDRESS_RANGE',
    'POWERDNS_DATA_DIR',
    'POWERDNS_API_URL',
    'DNS_SERVER_ADDRESS',
    'NODE_ENV',
  ])
    delete env[name];
  Object.assign(env, { DEMO_OWNER_PASSWORD: 'owner-password-1', DEMO_DEV_PASSWORD: 'dev-password-1', DEMO_OTHER_PASSWORD: 'other-password-1' });
  const child = spawn(path.join(checkout, 'node_modules/.bin/tsx'), ['scripts/dev.ts'], {
    cwd: checkout,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const run = { checkout, child, output: () => output };
  runs.push(run);
  const deadline = Date.now() + 240_000;
  while (!/Cloud control plane is up/.test(output)) {
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`npm start in ${checkout} did not come up:\n${output.slice(-3000)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
  const apiUrl = /API\s+(http:\/\/\S+)\/v1/.exec(output)?.[1];
  if (!apiUrl) throw new Error(`no API URL in the banner:\n${output}`);
  return { run, apiUrl };
}

/** Ctrl-C: SIGINT to the run's whole process group; resolves once the dev process exited. */
async function interrupt(run: Run): Promise<void> {
  if (run.child.exitCode === null) {
    process.kill(-(run.child.pid as number), 'SIGINT');
    await new Promise((resolve) => run.child.once('exit', resolve));
  }
  // The child is tsx's wrapper, which may exit before scripts/dev.ts under it has finished stopping
  // what it started (the API drains, HAProxy and the instances stop one by one): give the stop up to
  // 30 s on a loaded machine before looking.
  const deadline = Date.now() + 30_000;
  while (processesOf(run.checkout).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
}

/** Processes on this machine that belong to `checkout`'s run: their command line names it or its server data, or they run in it. */
function processesOf(checkout: string): string[] {
  const marks = [checkout, serverDataRoot(checkout)];
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
      const cwd = (() => {
        try {
          return readlinkSync(`/proc/${pid}/cwd`);
        } catch {
          return '';
        }
      })();
      if (marks.some((m) => cmdline.includes(m) || cwd === m || cwd.startsWith(`${m}/`))) found.push(`${pid} ${cmdline}`);
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

beforeAll(async () => {
  if (missing.length === 0) database = await createTestDatabase();
});

afterAll(async () => {
  for (const run of runs) await interrupt(run).catch(() => undefined);
  for (const run of runs) for (const line of processesOf(run.checkout)) process.kill(Number(line.split(' ')[0]), 'SIGKILL');
  for (const parent of checkouts) {
    const machineDir = serverDataRoot(path.join(parent, 'cloud'));
    if (!machineDir.startsWith(parent)) rmSync(machineDir, { recursive: true, force: true });
    rmSync(parent, { recursive: true, force: true });
  }
  await reapOrphanedAccounts();
  await database?.drop();
}, 120_000);

describe.skipIf(missing.length > 0)(`two checkouts' npm start on one machine${missing.length ? ` (missing: ${missing.join(', ')})` : ''}`, () => {
  it('both come up, and Ctrl-C leaves nothing running that each run started', async () => {
    // The first in a home no one else enters (its servers' data goes to the machine directory), the second in an open one.
    const first = await start(copyCheckout(false));
    const second = await start(copyCheckout(true));
    expect(second.apiUrl).not.toBe(first.apiUrl);
    for (const { apiUrl } of [first, second]) expect((await fetch(`${apiUrl}/readyz`)).status).toBe(200);
    // Each run's balancers and instances listen in ranges of its own.
    const range = (out: string) => /Servers\s+host \S+: balancers in (\S+), database instances in (\S+)/.exec(out)?.slice(1);
    expect(range(first.run.output())).toBeDefined();
    expect(range(first.run.output())).not.toEqual(range(second.run.output()));
    // Each run is the agent of its checkout's host, whose name the checkout keeps (.data/host-name).
    for (const { run } of [first, second]) {
      const kept = readFileSync(path.join(run.checkout, '.data/host-name'), 'utf8').trim();
      expect(run.output()).toContain(`Servers      host ${kept}: `);
    }
    // Both seeds ran their servers: HAProxy, PostgreSQL, MariaDB, PowerDNS are up for each run, and
    // each run's mail data plane its own Haraka, its serverless data planes their own Redis.
    for (const { run } of [first, second]) {
      const mine = processesOf(run.checkout).join('\n');
      expect(mine).toMatch(/redis-server /);
      // The seeded container service's app runs (built from db/seeds/caas-sample), served by its router.
      expect(run.output()).toMatch(/Apps\s+http:\/\/127\.0\.0\.1:\d+\s+\(container apps by Host: .*; running\)/);
      expect(mine).toMatch(/dataplane\/serverless\/main\.ts/);
      expect(mine).toMatch(/haproxy/);
      expect(mine).toMatch(/postgres/);
      expect(mine).toMatch(/mariadbd/);
      expect(mine).toMatch(/pdns_server/);
      expect(mine).toMatch(/haraka\/launcher\.js -c /);
    }

    for (const { run, apiUrl } of [second, first]) {
      await interrupt(run);
      expect(processesOf(run.checkout)).toEqual([]);
      await expect(fetch(`${apiUrl}/readyz`)).rejects.toThrow();
    }
  }, 600_000);
});
