import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promises as dnsPromises } from 'node:dns';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BackendGoneError } from '../providers/errors';
import { PowerDnsAdapter } from '../providers/powerdns/powerdns.adapter';
import { PDNS_SQLITE_SCHEMA, PowerDnsServer } from '../providers/powerdns/powerdns.server';
import { accountNameFor, isolatedAccounts, lookupAccount, removeAccount, type OsAccount } from '../providers/os-accounts';
import { TEST_ZONE_DEFAULTS } from './helpers/powerdns';

/**
 * The local PowerDNS drops root once it has bound its ports (issue 22): the process's uids read
 * from /proc, the files tried as its account, a second server beside it, and a data directory of
 * the layout before this change. Needs root, as the test machine runs.
 */
const dirs: string[] = [];
const servers: PowerDnsServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.stop();
  for (const dir of dirs) {
    rmSync(dir, { recursive: true, force: true });
    await removeAccount(accountNameFor('dns', dir, 'powerdns')); // made only on a machine without Debian's pdns
  }
});

function newDataDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'cloud-pdns-priv-'));
  dirs.push(dir);
  return dir;
}

async function start(dataDir: string): Promise<{ server: PowerDnsServer; adapter: PowerDnsAdapter }> {
  const server = await PowerDnsServer.start({ dataDir, dnsAddress: '127.0.0.1:0', apiAddress: '127.0.0.1:0' });
  servers.push(server);
  return { server, adapter: new PowerDnsAdapter({ apiUrl: server.apiUrl, apiKey: server.apiKey, timeoutMs: 5_000 }) };
}

/** Real, effective, saved and filesystem ids of a process. */
function idsOf(pid: number): { uids: number[]; gids: number[] } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const ids = (field: string) => new RegExp(`^${field}:\\s+(.*)$`, 'm').exec(status)![1].trim().split(/\s+/).map(Number);
  return { uids: ids('Uid'), gids: ids('Gid') };
}

/** What `account` gets reading `file`: `ok` or the error code (a child process under that account). */
function readAs(account: OsAccount, file: string): string {
  const script = `try { require('node:fs').readFileSync(process.argv[1]); console.log('ok'); } catch (e) { console.log(e.code); }`;
  const result = spawnSync(process.execPath, ['-e', script, file], { uid: account.uid, gid: account.gid, encoding: 'utf8', timeout: 10_000 });
  expect(result.status, result.stderr).toBe(0);
  return result.stdout.trim();
}

/** Creates a zone with an A record and reads it back over UDP. */
async function servesAZone(server: PowerDnsServer, adapter: PowerDnsAdapter, ip: string): Promise<string> {
  const zone = `priv-${randomBytes(3).toString('hex')}.example`;
  await adapter.createZone(zone, TEST_ZONE_DEFAULTS);
  await adapter.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 60, values: [ip] });
  const resolver = new dnsPromises.Resolver({ timeout: 2_000, tries: 1 });
  resolver.setServers([server.dnsAddress]);
  expect(await resolver.resolve4(`www.${zone}`)).toEqual([ip]);
  return zone;
}

describe.runIf(isolatedAccounts())('the local PowerDNS without root', () => {
  it("runs as an unprivileged account (Debian's pdns here) and still answers its API and queries", async () => {
    const dataDir = newDataDir();
    const { server, adapter } = await start(dataDir);
    const expected = (await lookupAccount('pdns')) ?? (await lookupAccount(accountNameFor('dns', dataDir, 'powerdns')));
    expect(expected).not.toBeNull();
    expect(server.account).toEqual(expected);
    const { uids, gids } = idsOf(server.pid!);
    expect(uids).toEqual([expected!.uid, expected!.uid, expected!.uid, expected!.uid]);
    expect(gids).toEqual([expected!.gid, expected!.gid, expected!.gid, expected!.gid]);
    expect(uids).not.toContain(0);
    await servesAZone(server, adapter, '192.0.2.41');

    // Its database directory is its own; the configuration and the API key stay root's and out of reach.
    const db = statSync(path.join(dataDir, 'db'));
    expect([db.uid, db.mode & 0o777]).toEqual([expected!.uid, 0o700]);
    const top = statSync(dataDir);
    expect([top.uid, top.gid, top.mode & 0o777]).toEqual([0, expected!.gid, 0o710]);
    expect(readAs(expected!, path.join(dataDir, 'api-key'))).toBe('EACCES');
    expect(readAs(expected!, path.join(dataDir, 'pdns.conf'))).toBe('EACCES');
  });

  it('keeps working after root changed the database (pdnsutil) while it was stopped', async () => {
    const dataDir = newDataDir();
    let { server, adapter } = await start(dataDir);
    const zone = await servesAZone(server, adapter, '192.0.2.42');
    await server.stop();
    const edit = spawnSync('pdnsutil', [`--config-dir=${dataDir}`, 'replace-rrset', zone, 'www', 'A', '60', '192.0.2.43'], { encoding: 'utf8' });
    expect(edit.status, edit.stderr).toBe(0);
    ({ server, adapter } = await start(dataDir));
    expect((await adapter.getRRset(zone, `www.${zone}`, 'A'))!.values).toEqual(['192.0.2.43']);
    await adapter.replaceRRset(zone, { name: `www.${zone}`, type: 'A', ttl: 60, values: ['192.0.2.44'] });
    expect((await adapter.getRRset(zone, `www.${zone}`, 'A'))!.values).toEqual(['192.0.2.44']);
  });

  it("runs a second checkout's server (a data directory of its own) beside the first, each with its own data", async () => {
    const [one, two] = [await start(newDataDir()), await start(newDataDir())];
    const zone = await servesAZone(one.server, one.adapter, '192.0.2.45');
    await servesAZone(two.server, two.adapter, '192.0.2.46');
    await expect(two.adapter.zoneInfo(zone)).rejects.toBeInstanceOf(BackendGoneError);
    for (const { server } of [one, two]) expect(idsOf(server.pid!).uids).not.toContain(0);
  });

  it('takes over a data directory of the layout before (the database beside the configuration, made by root)', async () => {
    const dataDir = newDataDir();
    const old = path.join(dataDir, 'pdns.sqlite3');
    const made = spawnSync('sqlite3', [old], { input: readFileSync(PDNS_SQLITE_SCHEMA), stdio: ['pipe', 'ignore', 'pipe'] });
    expect(made.status).toBe(0);
    const { server, adapter } = await start(dataDir);
    expect(existsSync(old)).toBe(false);
    expect(statSync(path.join(dataDir, 'db', 'pdns.sqlite3')).uid).toBe(server.account!.uid);
    await servesAZone(server, adapter, '192.0.2.47');
  });
});
