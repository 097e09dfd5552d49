import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { X509Certificate } from 'node:crypto';
import { promises as fs, mkdtempSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../common/config';
import type { DbEngine } from '../providers/dbaas.provider';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { instancePaths, type InstanceRecord } from '../providers/dbinstances/engine';
import { CommandError, readPidFile, run } from '../providers/dbinstances/system';
import { BackendUnavailableError } from '../providers/errors';
import { isolatedAccounts, lookupAccount } from '../providers/os-accounts';
import { waitForBackup } from './dbaas.support';
import { connectClient } from './dbaas.instances.support';

/**
 * The OS boundary between database instances on one machine (issue 22): each instance runs as an
 * account of its own, in a directory nobody else can enter, on a loopback address of its own named
 * by its certificate alone. The attacker is a customer who got code running inside their own
 * server (as its account): it must reach nothing of another instance, and another instance's server
 * must not pass for theirs. Only root can make accounts, so these run as root (as the suite does).
 */

const PASSWORD: Record<string, string> = { alpha: 'alpha-admin-password-1', bravo: 'bravo-admin-password-2' };
/** The engines' shared accounts, which every instance ran as before. */
const SHARED: Record<DbEngine, string> = { postgresql: 'postgres', mysql: 'mysql' };

/** Runs `command` as `account` (runuser), resolving to its exit and output instead of throwing. */
async function runAs(account: string, command: string[]): Promise<{ ok: boolean; output: string }> {
  try {
    const { stdout } = await run('runuser', ['-u', account, '--', ...command]);
    return { ok: true, output: stdout };
  } catch (err) {
    if (err instanceof CommandError) return { ok: false, output: err.detail };
    throw err;
  }
}

/** Opens a Unix socket as `account`: `EACCES`, `CONNECTED`, or another error code. */
const CONNECT_SCRIPT =
  "const s = require('net').connect(process.argv[1]); s.on('connect', () => { console.log('CONNECTED'); process.exit(0); }); s.on('error', (e) => { console.log(e.code); process.exit(1); });";

/**
 * Logs in with verify-full: the CA, and the certificate's name checked against `host`. PostgreSQL
 * through node-postgres; MariaDB through its own client (`--ssl-verify-server-cert`), as mysql2
 * cannot check an IP address. Resolves once a statement ran; rejects with the client's error.
 */
async function verifyFullLogin(engine: DbEngine, target: { host: string; port: number; ca: string }, username: string, password: string): Promise<void> {
  if (engine === 'postgresql') {
    const session = await connectClient(engine, target, username, password);
    const alive = await session.alive();
    await session.close();
    if (!alive) throw new Error('connected, but the session does not answer');
    return;
  }
  const caFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'dbaas-ca-')), 'ca.pem');
  await fs.writeFile(caFile, target.ca);
  try {
    const args = [
      '--no-defaults',
      '-h',
      target.host,
      '-P',
      String(target.port),
      '-u',
      username,
      '--ssl-verify-server-cert',
      `--ssl-ca=${caFile}`,
      '-e',
      'select 1',
    ];
    // The password in the environment, not on a command line.
    await run('mariadb', args, { env: { PATH: process.env.PATH, MYSQL_PWD: password }, timeoutMs: 15_000 });
  } finally {
    await fs.rm(path.dirname(caFile), { recursive: true, force: true });
  }
}

/** Relays TCP connections from `listen` (port chosen by the OS) to `target`: another server answering on a client's address. */
async function relay(listenHost: string, target: { host: string; port: number }): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    const outbound = net.connect(target.port, target.host);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    inbound.pipe(outbound).pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, listenHost, resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

describe('DBAAS_ADDRESS_RANGE', () => {
  it('defaults to 127.78.0.0/16 and takes only loopback ranges', () => {
    expect(loadConfig({}).DBAAS_ADDRESS_RANGE).toBe('127.78.0.0/16');
    expect(loadConfig({ DBAAS_ADDRESS_RANGE: '127.90.4.0/24' }).DBAAS_ADDRESS_RANGE).toBe('127.90.4.0/24');
    for (const bad of ['10.0.0.0/16', '127.0.0.1', '127.0.0.0/7', '127.1.1.0/31', 'localhost/16'])
      expect(() => loadConfig({ DBAAS_ADDRESS_RANGE: bad }), bad).toThrow(/DBAAS_ADDRESS_RANGE/);
  });
});

describe.skipIf(!isolatedAccounts()).each<DbEngine>(['postgresql', 'mysql'])(
  '%s instances: one OS account, directory, address and certificate each',
  (engine) => {
    let root: string;
    let provider: DbInstancesAdapter;
    const record = async (name: string): Promise<InstanceRecord> => JSON.parse(await fs.readFile(instancePaths(root, name).record, 'utf8'));
    /** The account the instance's server runs as (the engine's shared one for an instance without its own). */
    const accountOf = async (name: string): Promise<string> => (await record(name)).account ?? SHARED[engine];
    const socketOf = async (name: string) =>
      engine === 'postgresql'
        ? path.join(instancePaths(root, name).run, `.s.PGSQL.${(await record(name)).port}`)
        : path.join(instancePaths(root, name).run, 'mariadbd.sock');
    const logOf = (name: string) => path.join(instancePaths(root, name).log, engine === 'postgresql' ? 'postgresql.log' : 'mariadb.log');
    const pidOf = async (name: string) => {
      const paths = instancePaths(root, name);
      return readPidFile(engine === 'postgresql' ? path.join(paths.data, 'postmaster.pid') : path.join(paths.run, 'mariadbd.pid'));
    };

    beforeAll(async () => {
      root = mkdtempSync(path.join(os.tmpdir(), `dbaas-isolation-${engine}-`));
      provider = new DbInstancesAdapter({ rootDir: root, pollIntervalMs: 100 });
      // At once: the address lock must still give them different addresses.
      await Promise.all(
        ['alpha', 'bravo'].map((name, i) => provider.createInstance({ name, serviceId: i + 1, engine, adminUsername: 'admin', adminPassword: PASSWORD[name] })),
      );
    });
    afterAll(async () => {
      if (!provider) return;
      for (const name of await provider.instanceNames()) await provider.destroyInstance(name).catch(() => undefined);
      await fs.rm(root, { recursive: true, force: true });
    });

    it('runs each instance as its own account, on its own loopback address, both recorded', async () => {
      const [a, b] = [await record('alpha'), await record('bravo')];
      expect(a.account).toMatch(/^cdb-alpha-[0-9a-f]{6}$/);
      expect(b.account).toMatch(/^cdb-bravo-[0-9a-f]{6}$/);
      for (const rec of [a, b]) {
        const account = await lookupAccount(rec.account as string);
        expect(account).not.toBeNull();
        // The server process itself runs as it.
        const status = await fs.readFile(`/proc/${await pidOf(rec.name)}/status`, 'utf8');
        expect(/^Uid:\s+(\d+)/m.exec(status)?.[1]).toBe(String(account?.uid));
      }
      expect(a.address).toMatch(/^127\.78\.\d+\.\d+$/);
      expect(b.address).toMatch(/^127\.78\.\d+\.\d+$/);
      expect(a.address).not.toBe(b.address);
      for (const rec of [a, b]) {
        expect((await provider.connectionInfo(rec.name)).host).toBe(rec.address);
        expect((await provider.status(rec.name)).host).toBe(rec.address);
      }
    });

    it("keeps the instance's directory to its account: root's and its group's (0710), the rest 0700 its own", async () => {
      const rec = await record('alpha');
      const account = await lookupAccount(rec.account as string);
      const paths = instancePaths(root, 'alpha');
      for (const dir of [root, path.join(root, 'instances')]) expect((await fs.stat(dir)).mode & 0o777).toBe(0o711);
      const dir = await fs.stat(paths.dir);
      expect({ uid: dir.uid, gid: dir.gid, mode: dir.mode & 0o777 }).toEqual({ uid: 0, gid: account?.gid, mode: 0o710 });
      const owned = [paths.data, paths.run, paths.tls, paths.log, paths.backups, ...(engine === 'mysql' ? [path.join(paths.dir, 'files')] : [])];
      for (const sub of owned) {
        const st = await fs.stat(sub);
        expect({ sub, uid: st.uid, mode: st.mode & 0o777 }).toEqual({ sub, uid: account?.uid, mode: 0o700 });
      }
    });

    it("gives one instance's account nothing of another's: data, log, backups, key, record and socket all EACCES", async () => {
      const backup = await provider.startBackup('bravo', 'isolation');
      expect((await waitForBackup(provider, 'bravo', backup.id)).status).toBe('completed');
      const attacker = await accountOf('alpha');
      const victim = instancePaths(root, 'bravo');
      const reads = [
        ['ls', victim.data],
        ['cat', logOf('bravo')],
        ['ls', victim.backups],
        ['cat', provider.backupFile('bravo', backup.id)],
        ['cat', path.join(victim.tls, 'server.key')],
        ['cat', victim.record],
        ['touch', path.join(victim.data, 'planted')],
      ];
      for (const command of reads) {
        const result = await runAs(attacker, command);
        expect({ command, ok: result.ok }).toEqual({ command, ok: false });
        expect(result.output).toMatch(/Permission denied/);
      }
      const socket = await runAs(attacker, [process.execPath, '-e', CONNECT_SCRIPT, await socketOf('bravo')]);
      expect(socket.output.trim()).toBe('EACCES');
      // The same account reaches its own instance's files: the refusals above are the boundary, not a broken runuser.
      expect((await runAs(attacker, ['cat', logOf('alpha')])).ok).toBe(true);
      expect((await runAs(attacker, [process.execPath, '-e', CONNECT_SCRIPT, await socketOf('alpha')])).output.trim()).toBe('CONNECTED');
    });

    it("names only the instance's own address in its certificate: a verify-full client refuses another instance's server on its address", async () => {
      const a = await provider.connectionInfo('alpha');
      const b = await provider.connectionInfo('bravo');
      // Its own server: accepted.
      await verifyFullLogin(engine, { host: a.host, port: a.port, ca: a.caCertificate }, 'admin', PASSWORD.alpha);

      // Bravo's server answering on alpha's address (what bravo's tenant would arrange to catch
      // alpha's clients): the client, checking the name it connected to, refuses the certificate
      // before it sends a password.
      const impostor = await relay(a.host, { host: b.host, port: b.port });
      try {
        await expect(verifyFullLogin(engine, { host: a.host, port: impostor.port, ca: a.caCertificate }, 'admin', PASSWORD.bravo)).rejects.toThrow(
          engine === 'postgresql' ? /Hostname\/IP does not match certificate's altnames/ : /Validation of SSL server certificate failed/,
        );
      } finally {
        await impostor.close();
      }
      // Because its certificate names its own address and nothing else (no 127.0.0.1, no localhost).
      const cert = new X509Certificate(await fs.readFile(path.join(instancePaths(root, 'bravo').tls, 'server.crt')));
      expect(cert.subjectAltName).toBe(`IP Address:${b.host}`);
    });

    it("does not read another instance's log for an account that put a link in place of its own", async () => {
      const attacker = await accountOf('alpha');
      const own = logOf('alpha');
      await fs.rename(own, `${own}.kept`);
      try {
        // What code running as alpha's server could do in its own log directory.
        const linked = await runAs(attacker, ['ln', '-s', logOf('bravo'), own]);
        expect(linked.ok).toBe(true);
        const entries = await provider.logs('alpha', 1000);
        const bravoLog = await fs.readFile(logOf('bravo'), 'utf8');
        // Root (the API) must not read bravo's log on alpha's behalf: through a link it reads nothing.
        expect(entries).toEqual([]);
        expect(bravoLog.length).toBeGreaterThan(0);
      } finally {
        await fs.rm(own, { force: true });
        await fs.rename(`${own}.kept`, own);
      }
    });

    it("does not take another instance's server for its own through a forged pidfile, nor stop it", async () => {
      if (engine !== 'mysql') return; // PostgreSQL is stopped by pg_ctl, run as the instance's own account
      const pidfile = path.join(instancePaths(root, 'alpha').run, 'mariadbd.pid');
      const own = await fs.readFile(pidfile, 'utf8');
      const bravo = (await pidOf('bravo'))!;
      // What code running as alpha's server could write in its own run directory.
      const forged = await runAs(await accountOf('alpha'), ['sh', '-c', `echo ${bravo} > ${pidfile}`]);
      expect(forged.ok).toBe(true);
      try {
        await provider.stopInstance('alpha');
        expect(process.kill(bravo, 0)).toBe(true);
        expect((await provider.status('bravo')).state).toBe('running');
      } finally {
        await fs.writeFile(pidfile, own);
        await provider.startInstance('alpha');
      }
    });

    it('runs a server only as its own account: a record naming another account is refused', async () => {
      const file = instancePaths(root, 'alpha').record;
      const original = await fs.readFile(file, 'utf8');
      try {
        await fs.writeFile(file, JSON.stringify({ ...JSON.parse(original), account: 'root' }));
        await expect(provider.restartInstance('alpha')).rejects.toBeInstanceOf(BackendUnavailableError);
        await expect(provider.status('alpha')).rejects.toThrow(/not its own/);
      } finally {
        await fs.writeFile(file, original);
      }
      expect((await provider.status('alpha')).state).toBe('running');
    });

    it('removes the account with the instance, and nothing of it keeps running', async () => {
      await provider.createInstance({ name: 'charlie', serviceId: 3, engine, adminUsername: 'admin', adminPassword: 'charlie-admin-password' });
      const rec = await record('charlie');
      const account = await lookupAccount(rec.account as string);
      expect(account).not.toBeNull();
      await provider.destroyInstance('charlie');
      expect(await lookupAccount(rec.account as string)).toBeNull();
      const leftovers = await run('pgrep', ['-u', String(account?.uid)]).then(
        (r) => r.stdout.trim(),
        () => '',
      );
      expect(leftovers).toBe('');
      expect(await provider.instanceNames()).toEqual(['alpha', 'bravo']);
    });
  },
);
