import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { ensureReachable, findBinary, freeLoopbackPort, LocalServerError, serverDataRoot, traversalBlocker } from '../providers/local-server';
import { reapOrphanedAccounts } from '../providers/os-accounts';
import { PowerDnsServer } from '../providers/powerdns/powerdns.server';
import { installedPostgresBinDir } from '../providers/dbinstances/postgresql.engine';

/**
 * A checkout in a home other accounts cannot enter (mode 0700, as root's and Debian 12's homes are):
 * every server runs as an account of its own, so its data goes where that account can get to it (a
 * machine directory keyed by the checkout), and a data directory it cannot reach is refused with an
 * error naming the directory, the account and the fix (not some line of initdb's output).
 * Only as root: without root every server runs as the caller, who can reach its own checkout.
 */
const root = process.getuid?.() === 0;
const postgres = (() => {
  try {
    return existsSync(path.join(installedPostgresBinDir(), 'initdb'));
  } catch {
    return false;
  }
})();
const haproxy = findBinary('haproxy') !== null;
const powerdns = existsSync('/usr/sbin/pdns_server');

const scratch = mkdtempSync(path.join(tmpdir(), 'cloud-home-'));
chmodSync(scratch, 0o755);
/** Stands in for /root: the checkout inside cannot be entered by any other account. */
const home = path.join(scratch, 'home');
const checkout = path.join(home, 'cloud');
mkdirSync(checkout, { recursive: true });
chmodSync(home, 0o700);
/** Stands in for /var/lib/cloud-dev. */
const machineBase = path.join(scratch, 'machine');

afterAll(async () => {
  for (const stop of cleanups.reverse()) await stop().catch(() => undefined);
  rmSync(scratch, { recursive: true, force: true });
  await reapOrphanedAccounts();
});
const cleanups: Array<() => Promise<void>> = [];

describe('server data of a checkout in a 0700 home', () => {
  it.skipIf(!root)('goes to a machine directory keyed by the checkout, which every account can pass through', () => {
    expect(traversalBlocker(path.join(checkout, '.data'), 'others')).toMatchObject({ dir: home, mode: 0o700 });
    const dataRoot = serverDataRoot(checkout, machineBase);
    expect(path.dirname(dataRoot)).toBe(machineBase);
    expect(path.basename(dataRoot)).toMatch(/^[0-9a-f]{12}$/);
    // Another checkout gets another directory; a checkout others can reach keeps its own .data.
    expect(serverDataRoot(path.join(home, 'other'), machineBase)).not.toBe(dataRoot);
    const open = path.join(scratch, 'open-checkout');
    expect(serverDataRoot(open, machineBase)).toBe(path.join(open, '.data'));
  });

  it.skipIf(!root || !postgres || !haproxy || !powerdns)(
    'runs a database instance, a balancer and PowerDNS there',
    async () => {
      const dataRoot = serverDataRoot(checkout, machineBase);

      const dbaas = new DbInstancesAdapter({ rootDir: path.join(dataRoot, 'dbaas'), addressRange: '127.78.200.0/24' });
      cleanups.push(() => dbaas.destroyInstance('pg-home'));
      const instance = await dbaas.createInstance({
        name: 'pg-home',
        serviceId: 1,
        engine: 'postgresql',
        adminUsername: 'admin',
        adminPassword: 'home-admin-password',
      });
      expect(instance.state).toBe('running');
      expect((await dbaas.createDatabase('pg-home', { name: 'app' })).name).toBe('app');

      const lb = new HaproxyLbProvider({ dataDir: path.join(dataRoot, 'lb'), bindAddress: '127.79.200.0/24' });
      cleanups.push(() => lb.destroyAll());
      const port = await freeLoopbackPort('127.79.200.1');
      const balancer = await lb.create(1, [
        { name: 'web', protocol: 'tcp', port, algorithm: 'roundrobin', health_check: null, backends: [{ ip: '127.0.0.1', port: 9, weight: 1 }] },
      ]);
      expect(balancer.state).toBe('running');

      const pdns = await PowerDnsServer.start({ dataDir: path.join(dataRoot, 'powerdns'), dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' });
      cleanups.push(() => pdns.stop());
      expect(await PowerDnsServer.answers(pdns.apiUrl, pdns.apiKey)).toBe(true);

      // The way from / to the data is open; the home itself stays closed.
      expect(traversalBlocker(dataRoot, 'others')).toBeNull();
      expect(statSync(home).mode & 0o777).toBe(0o700);
    },
    180_000,
  );

  it.skipIf(!root || !postgres)(
    'refuses a data directory in it, naming the directory, the account and the fix',
    async () => {
      const rootDir = path.join(checkout, '.data', 'dbaas');
      const dbaas = new DbInstancesAdapter({ rootDir, addressRange: '127.78.201.0/24' });
      const failure = await dbaas
        .createInstance({ name: 'pg-closed', serviceId: 2, engine: 'postgresql', adminUsername: 'admin', adminPassword: 'closed-admin-password' })
        .then(
          () => null,
          (err: Error) => err.message,
        );
      expect(failure).toMatch(/account cdb-pg-closed-[0-9a-f]{6}/);
      expect(failure).toContain(`cannot enter ${home} (mode 0700, owner root)`);
      expect(failure).toContain(`${rootDir}/instances/pg-closed`);
      expect(failure).toContain('set DBAAS_DATA_DIR');
      expect(failure).toContain(`chmod o+x ${home}`);
      // Nothing is left of the attempt: no directory, and (reaped) no account.
      expect(existsSync(path.join(rootDir, 'instances', 'pg-closed'))).toBe(false);
      expect(() => execFileSync('getent', ['passwd', 'cdb-pg-closed'])).toThrow();
    },
    60_000,
  );

  it.skipIf(!root || !powerdns)('refuses a PowerDNS directory there too', async () => {
    const failure = await PowerDnsServer.start({
      dataDir: path.join(checkout, '.data', 'powerdns'),
      dnsAddress: '127.0.0.1:0',
      apiAddress: '127.0.0.1:0',
    }).then(
      async (server) => {
        await server.stop();
        return null;
      },
      (err: Error) => err,
    );
    expect(failure).toBeInstanceOf(LocalServerError);
    expect(failure?.message).toContain(`cannot enter ${home}`);
    expect(failure?.message).toContain('set POWERDNS_DATA_DIR');
  });

  it('names the blocking directory and its mode in the error', () => {
    const account = { name: 'nobody', uid: 65534, gid: 65534 };
    expect(() => ensureReachable(path.join(home, 'x'), account, { server: 'A test server', setting: 'TEST_DATA_DIR' })).toThrow(
      root ? /A test server runs as account nobody, which cannot enter .*home \(mode 0700, owner root\).*Fix: set TEST_DATA_DIR/ : /./,
    );
  });
});
