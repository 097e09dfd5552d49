import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { cliCommand, parseShowProc } from '../providers/haproxy/haproxy.process';
import { balancerAddress, type LbListener } from '../providers/lb.provider';
import { isolatedAccounts, lookupAccount, type OsAccount } from '../providers/os-accounts';
import { freePort, httpListener, testBindRange } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * Each balancer's HAProxy workers run as an operating-system account of their own (issue 22): real
 * HAProxy processes, their uids read from /proc, and file access tried as the other balancer's
 * account. Needs root, as the test machine runs; without root every balancer runs as the caller.
 */
const asRoot = isolatedAccounts();
let dataDir: string;
let backend: Backend;
const range = testBindRange();
let lb: HaproxyLbProvider;
let nextServiceId = 1;
const created: number[] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'lb-accounts-'));
  lb = new HaproxyLbProvider({ dataDir, bindAddress: range });
  backend = await startBackend('backend');
});
afterAll(async () => {
  for (const id of created) await lb.destroy(id).catch(() => undefined);
  await backend?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

const dirOf = (serviceId: number) => path.join(dataDir, `svc-${serviceId}`);

async function newBalancer(): Promise<{ serviceId: number; address: string; port: number; listeners: LbListener[] }> {
  const serviceId = nextServiceId++;
  created.push(serviceId);
  const address = balancerAddress(range, serviceId);
  const port = await freePort(address);
  const listeners = [httpListener('web', port, [{ ip: '127.0.0.1', port: backend.port }])];
  await lb.create(serviceId, listeners);
  return { serviceId, address, port, listeners };
}

/** The account balancer.json records. */
async function recordedAccount(serviceId: number): Promise<string | undefined> {
  return (JSON.parse(await readFile(path.join(dirOf(serviceId), 'balancer.json'), 'utf8')) as { account?: string }).account;
}

/** Real, effective, saved and filesystem uid and gid of each current worker, from /proc. */
async function workerIds(serviceId: number): Promise<Array<{ pid: number; uids: number[]; gids: number[] }>> {
  const proc = parseShowProc(await cliCommand(path.join(dirOf(serviceId), 'master.sock'), 'show proc'));
  expect(proc?.workers.length).toBeGreaterThan(0);
  return Promise.all(
    proc!.workers.map(async (pid) => {
      const status = await readFile(`/proc/${pid}/status`, 'utf8');
      const ids = (field: string) => new RegExp(`^${field}:\\s+(.*)$`, 'm').exec(status)![1].trim().split(/\s+/).map(Number);
      return { pid, uids: ids('Uid'), gids: ids('Gid') };
    }),
  );
}

/**
 * What `account` gets when it reads `file` and connects to each socket: `ok` or the error code.
 * Run as a child process under that account, like code inside that balancer's HAProxy would be.
 */
function tryAs(account: OsAccount, file: string, sockets: string[]): { read: string; connect: string[] } {
  const script = `
    const fs = require('node:fs'), net = require('node:net');
    let read = 'ok';
    try { fs.readFileSync(process.argv[1]); } catch (e) { read = e.code; }
    Promise.all(process.argv.slice(2).map((s) => new Promise((resolve) => {
      const c = net.createConnection(s);
      c.on('connect', () => { c.destroy(); resolve('ok'); });
      c.on('error', (e) => resolve(e.code));
    }))).then((connect) => console.log(JSON.stringify({ read, connect })));`;
  const result = spawnSync(process.execPath, ['-e', script, file, ...sockets], { uid: account.uid, gid: account.gid, encoding: 'utf8', timeout: 10_000 });
  expect(result.status, result.stderr).toBe(0);
  return JSON.parse(result.stdout) as { read: string; connect: string[] };
}

/** A port below 1024 nothing listens on at `address` (only root may bind it). */
async function freeLowPort(address: string): Promise<number> {
  for (let port = 1000; port > 900; port--) {
    const free = await new Promise<boolean>((resolve) => {
      const server = net.createServer();
      server.once('error', () => resolve(false));
      server.listen({ host: address, port, exclusive: true }, () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free port below 1024 on ${address}`);
}

describe.runIf(asRoot)('haproxy: every balancer runs as an account of its own', () => {
  it('runs the workers of two balancers under two different non-root accounts, recorded with each balancer', async () => {
    const [a, b] = [await newBalancer(), await newBalancer()];
    const [nameA, nameB] = [await recordedAccount(a.serviceId), await recordedAccount(b.serviceId)];
    expect(nameA).toMatch(/^clb-svc-\d+-[0-9a-f]{6}$/);
    expect(nameB).toMatch(/^clb-svc-\d+-[0-9a-f]{6}$/);
    expect(nameA).not.toBe(nameB);
    const [accountA, accountB] = [(await lookupAccount(nameA!))!, (await lookupAccount(nameB!))!];
    expect(accountA.uid).not.toBe(accountB.uid);
    for (const [balancer, account] of [
      [a, accountA],
      [b, accountB],
    ] as const) {
      for (const worker of await workerIds(balancer.serviceId)) {
        expect(worker.uids).toEqual([account.uid, account.uid, account.uid, account.uid]);
        expect(worker.gids).toEqual([account.gid, account.gid, account.gid, account.gid]);
      }
      expect(await get(balancer.address, balancer.port)).toBe('backend');
    }
  });

  it("keeps one balancer's account out of another's configuration and sockets, and out of its own", async () => {
    const [a, b] = [await newBalancer(), await newBalancer()];
    const accountA = (await lookupAccount((await recordedAccount(a.serviceId))!))!;
    const sockets = (id: number) => ['stats.sock', 'master.sock'].map((s) => path.join(dirOf(id), s));
    expect(tryAs(accountA, path.join(dirOf(b.serviceId), 'haproxy.cfg'), sockets(b.serviceId))).toEqual({ read: 'EACCES', connect: ['EACCES', 'EACCES'] });
    // Its own files are the control plane's too: a worker that went wrong cannot rewrite its configuration.
    expect(tryAs(accountA, path.join(dirOf(a.serviceId), 'haproxy.cfg'), sockets(a.serviceId))).toEqual({ read: 'EACCES', connect: ['EACCES', 'EACCES'] });
    const dir = await stat(dirOf(b.serviceId));
    expect([dir.uid, dir.mode & 0o777]).toEqual([0, 0o700]);
    // The control plane (root) still reads the stats of both.
    expect((await lb.stats(a.serviceId)).listeners[0].name).toBe('web');
    expect((await lb.stats(b.serviceId)).listeners[0].name).toBe('web');
  });

  it('reloads with the account kept, binding a new port below 1024 after the workers dropped root', async () => {
    const a = await newBalancer();
    const account = (await lookupAccount((await recordedAccount(a.serviceId))!))!;
    const low = await freeLowPort(a.address);
    await lb.apply(a.serviceId, [...a.listeners, httpListener('low', low, [{ ip: '127.0.0.1', port: backend.port }])]);
    expect(await get(a.address, low)).toBe('backend');
    expect(await get(a.address, a.port)).toBe('backend');
    for (const worker of await workerIds(a.serviceId)) expect(worker.uids[0]).toBe(account.uid);
    // Stopped and started again: the same account.
    await lb.stop(a.serviceId);
    await lb.start(a.serviceId);
    expect(await get(a.address, low)).toBe('backend');
    for (const worker of await workerIds(a.serviceId)) expect(worker.uids[0]).toBe(account.uid);
  });

  it('removes the account with the balancer', async () => {
    const a = await newBalancer();
    const name = (await recordedAccount(a.serviceId))!;
    const account = (await lookupAccount(name))!;
    await lb.destroy(a.serviceId);
    expect(await lookupAccount(name)).toBeNull();
    expect(spawnSync('pgrep', ['-u', String(account.uid)]).status).toBe(1); // no process left
    await expect(get(a.address, a.port, 1_000)).rejects.toThrow(/ECONNREFUSED/);
  });

  it('moves a balancer made before accounts (workers as root) to its own account when create finds it, without refusing traffic', async () => {
    const a = await newBalancer();
    const dir = dirOf(a.serviceId);
    // Made the old way: no account recorded, no user lines, workers as root.
    const meta = JSON.parse(await readFile(path.join(dir, 'balancer.json'), 'utf8')) as { account?: string };
    const name = meta.account!;
    delete meta.account;
    await writeFile(path.join(dir, 'balancer.json'), JSON.stringify(meta));
    const config = path.join(dir, 'haproxy.cfg');
    await writeFile(config, (await readFile(config, 'utf8')).replace(/^ {2}(user|group|chroot) .*\n/gm, ''));
    const master = path.join(dir, 'master.sock');
    const reloads = parseShowProc(await cliCommand(master, 'show proc'))!.reloads;
    await cliCommand(master, 'reload').catch(() => '');
    const reloaded = await eventually(
      async () => parseShowProc(await cliCommand(master, 'show proc').catch(() => '')),
      (p) => p !== null && p.reloads > reloads && p.workers.length > 0,
    );
    expect(reloaded!.reloads).toBeGreaterThan(reloads);
    for (const worker of await workerIds(a.serviceId)) expect(worker.uids[0]).toBe(0);

    // The keeper's pass (create on every balancer) adopts it.
    await lb.create(a.serviceId, a.listeners);
    expect(await recordedAccount(a.serviceId)).toBe(name);
    const account = (await lookupAccount(name))!;
    for (const worker of await workerIds(a.serviceId)) expect(worker.uids[0]).toBe(account.uid);
    expect(await get(a.address, a.port)).toBe('backend');
  });
});
