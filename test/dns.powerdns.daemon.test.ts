import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freeLoopbackPort, processAlive } from '../providers/local-server';
import { accountNameFor, removeAccount } from '../providers/os-accounts';
import { PowerDnsAdapter } from '../providers/powerdns/powerdns.adapter';
import { PowerDnsServer, stopPowerDnsServer } from '../providers/powerdns/powerdns.server';
import { TEST_ZONE_DEFAULTS } from './helpers/powerdns';

/**
 * The local PowerDNS runs the way the local-server kit runs every server (providers/local-server):
 * detached, with a pidfile in its data directory, found again and re-used by a later start (a
 * restarted manager), and stopped through that pidfile.
 */
const dirs: string[] = [];
afterAll(async () => {
  for (const dir of dirs) {
    await stopPowerDnsServer(dir);
    rmSync(dir, { recursive: true, force: true });
    await removeAccount(accountNameFor('dns', dir, 'powerdns')); // made only on a machine without Debian's pdns
  }
});

function newDataDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'cloud-pdns-daemon-'));
  dirs.push(dir);
  return dir;
}

const ANY = { dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' };
/** The session id of a process (field 6 of /proc/<pid>/stat). */
const sessionOf = (pid: number) => Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[3]);
const gone = async (pid: number) => !(await processAlive(pid, ''));

describe('the local PowerDNS as a daemon', () => {
  it('is adopted by a later start from its data directory (same pid, key and ports), and stopped by its pidfile', async () => {
    const dataDir = newDataDir();
    const first = await PowerDnsServer.start({ dataDir, ...ANY });
    expect(first.adopted).toBe(false);
    const pidfile = path.join(dataDir, 'pdns.pid');
    expect(Number(readFileSync(pidfile, 'utf8').trim())).toBe(first.pid);
    // A session of its own: a Ctrl-C sent to the starter's process group does not reach it.
    expect(sessionOf(first.pid)).toBe(first.pid);
    expect(sessionOf(first.pid)).not.toBe(sessionOf(process.pid));
    const zone = `adopt-${randomBytes(3).toString('hex')}.example`;
    await new PowerDnsAdapter({ apiUrl: first.apiUrl, apiKey: first.apiKey }).createZone(zone, TEST_ZONE_DEFAULTS);

    // The manager is gone (as a crashed one would be): nothing stopped, only what it knew remembered here.
    const { pid, apiUrl, apiKey, dnsAddress, account } = first;
    const again = await PowerDnsServer.start({ dataDir, ...ANY });
    expect(again).toMatchObject({ adopted: true, pid, apiUrl, apiKey, dnsAddress, account });
    expect((await new PowerDnsAdapter({ apiUrl: again.apiUrl, apiKey: again.apiKey }).zoneInfo(zone)).name).toBe(zone);
    // Asked for exactly its addresses, the same.
    expect((await PowerDnsServer.start({ dataDir, dnsAddress, apiAddress: new URL(apiUrl).host })).pid).toBe(pid);

    await stopPowerDnsServer(dataDir);
    expect(await gone(pid)).toBe(true);
    expect(existsSync(pidfile)).toBe(false);
    expect(await PowerDnsServer.answers(apiUrl, apiKey)).toBe(false);
    expect(await PowerDnsServer.find(dataDir)).toBeNull();
  });

  it('outlives a manager process killed outright, which a restarted one adopts', async () => {
    const dataDir = newDataDir();
    const module = path.resolve(__dirname, '../providers/powerdns/powerdns.server.ts');
    const script = `const { PowerDnsServer } = require(${JSON.stringify(module)});
PowerDnsServer.start({ dataDir: ${JSON.stringify(dataDir)}, dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' })
  .then((s) => console.log(JSON.stringify({ pid: s.pid, apiUrl: s.apiUrl })), (e) => (console.error(e), process.exit(1)));
setInterval(() => undefined, 1_000);`;
    const manager = spawn(process.execPath, ['--import', 'tsx', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const started = await new Promise<{ pid: number; apiUrl: string }>((resolve, reject) => {
      let out = '';
      manager.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('\n')) resolve(JSON.parse(out.split('\n')[0]) as { pid: number; apiUrl: string });
      });
      manager.once('exit', (code) => reject(new Error(`the manager exited (${code}) before PowerDNS answered`)));
    });
    // Node itself, not the tsx wrapper (a wrapper killed would leave its node running): the manager dies outright.
    manager.kill('SIGKILL');
    await new Promise((resolve) => (manager.exitCode !== null || manager.signalCode !== null ? resolve(null) : manager.once('exit', resolve)));

    const adopted = await PowerDnsServer.start({ dataDir, ...ANY });
    expect(adopted).toMatchObject({ adopted: true, pid: started.pid, apiUrl: started.apiUrl });
    await adopted.stop();
    expect(await gone(started.pid)).toBe(true);
  }, 60_000);

  it('starts a fresh server when the one in its pidfile is gone, and replaces one on other ports', async () => {
    const dataDir = newDataDir();
    const first = await PowerDnsServer.start({ dataDir, ...ANY });
    // Killed behind the manager's back: the pidfile stays and names a dead pid.
    process.kill(first.pid, 'SIGKILL');
    await expect.poll(() => gone(first.pid)).toBe(true);
    const second = await PowerDnsServer.start({ dataDir, ...ANY });
    expect(second.adopted).toBe(false);
    expect(second.pid).not.toBe(first.pid);
    expect(second.apiKey).toBe(first.apiKey);

    // Asked for another API port than the one it listens on: that server gives way to one that does.
    const port = await freeLoopbackPort();
    const third = await PowerDnsServer.start({ dataDir, dnsAddress: second.dnsAddress, apiAddress: `127.0.0.1:${port}` });
    expect(third.adopted).toBe(false);
    expect(third.apiUrl).toBe(`http://127.0.0.1:${port}`);
    expect(await gone(second.pid)).toBe(true);
    await third.stop();
    expect(await gone(third.pid)).toBe(true);
  });

  it('starts again when a start ends without a word, and says how one ended when the second does too', async () => {
    const dataDir = newDataDir();
    const scripts = mkdtempSync(path.join(tmpdir(), 'cloud-pdns-wrapper-'));
    dirs.push(scripts);
    // A pdns_server that ends silently on its first run, then is the real one.
    const flaky = path.join(scripts, 'flaky', 'pdns_server');
    mkdirSync(path.dirname(flaky), { mode: 0o755 });
    const marker = path.join(scripts, 'ran-once');
    writeFileSync(flaky, `#!/bin/sh\nif [ ! -e ${marker} ]; then : > ${marker}; exit 3; fi\nexec /usr/sbin/pdns_server "$@"\n`, { mode: 0o755 });
    const log: string[] = [];
    const server = await PowerDnsServer.start({ dataDir, ...ANY, binary: flaky, log: (line) => log.push(line) });
    expect(existsSync(marker)).toBe(true);
    expect(log[0]).toMatch(/^PowerDNS start 1 failed, trying again: PowerDNS did not start \(it exited with code 3\)/);
    expect(await PowerDnsServer.answers(server.apiUrl, server.apiKey)).toBe(true);
    await server.stop();

    // Always silent: three tries, and the error says how the last one ended.
    const silent = path.join(scripts, 'silent', 'pdns_server');
    mkdirSync(path.dirname(silent), { mode: 0o755 });
    writeFileSync(silent, '#!/bin/sh\nkill -KILL $$\n', { mode: 0o755 });
    const tries: string[] = [];
    await expect(PowerDnsServer.start({ dataDir: newDataDir(), ...ANY, binary: silent, log: (line) => tries.push(line) })).rejects.toThrow(
      /PowerDNS did not start \(it was killed by SIGKILL\)/,
    );
    expect(tries.filter((line) => /trying again/.test(line))).toHaveLength(2);
  });
});
