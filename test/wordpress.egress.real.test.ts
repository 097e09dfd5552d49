import { execFile, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net, { BlockList, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findBinary } from '../providers/local-server';
import { accountNameFor, ensureAccount, removeAccount, type OsAccount } from '../providers/os-accounts';
import {
  applySiteEgress,
  applySiteEgressFor,
  EGRESS_CHAIN,
  removeSiteEgress,
  removeSiteEgressFor,
  resolvers,
  siteChain,
  siteEgressUids,
} from '../providers/wordpress/egress';

/**
 * The egress rules of hosted WordPress sites (providers/wordpress/egress.ts) in the kernel's real
 * tables: PHP run as a throwaway site account reaches its database and nothing else on the host,
 * and the public internet is not refused by our chain. Root with iptables only.
 */
const PHP = findBinary('php8.2', 'php8.3', 'php');
const IPTABLES = findBinary('iptables');
const enabled = process.getuid?.() === 0 && !!IPTABLES && !!PHP;

/** A TEST-NET-3 address (not this host's, which may sit in TEST-NET-1): public as far as our rules go. */
const PUBLIC = '203.0.113.7';

const CONNECT = `$r = @fsockopen($argv[1], (int) $argv[2], $no, $str, (float) $argv[3]);
echo $r ? 'connected' : ($no === 110 || $no === 0 ? 'timeout' : "failed $no $str");`;

let dir: string;
let account: OsAccount;
const servers: net.Server[] = [];
const ports: Record<'database' | 'control' | 'relay', number> = { database: 0, control: 0, relay: 0 };

async function listen(): Promise<number> {
  const server = net.createServer((socket) => {
    socket.on('error', () => undefined); // the PHP client closes at once
    socket.end('hello\n');
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Connects from the site's account (PHP, as the site's code would) and says how it went, with the time taken. */
function connectAs(as: { uid: number; gid: number } | null, host: string, port: number, timeoutS = 2): Promise<{ result: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    execFile(PHP!, ['-n', '-r', CONNECT, host, String(port), String(timeoutS)], { ...(as ?? {}), cwd: '/', timeout: 10_000 }, (err, stdout) => {
      if (err) reject(err);
      else resolve({ result: stdout.trim(), ms: Date.now() - started });
    });
  });
}

const rules = (chain: string) => execFileSync(IPTABLES!, ['-w', '-S', chain], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).split('\n');

describe.runIf(enabled)('WordPress site egress rules (iptables, as root)', () => {
  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'cloud-egress-'));
    account = await ensureAccount(accountNameFor('wp', dir, 'egress-test'), { purpose: 'WordPress egress test', dataDir: dir });
    ports.database = await listen();
    ports.control = await listen();
    ports.relay = await listen();
  });

  afterAll(async () => {
    if (account) await removeSiteEgress(account.uid);
    if (account) await removeAccount(account.name);
    for (const server of servers) await new Promise((resolve) => server.close(resolve));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('lets the site reach its database and refuses every other local port at once', async () => {
    const status = await applySiteEgress({ uid: account.uid, database: { host: '127.0.0.1', port: ports.database }, relay: null });
    expect(status.enforced).toBe(true);
    expect(status.families).toContain('ipv4');
    expect(status.changed).toBe(true);
    // Idempotent: the same rules again change nothing.
    expect((await applySiteEgress({ uid: account.uid, database: { host: '127.0.0.1', port: ports.database }, relay: null })).changed).toBe(false);
    expect(await siteEgressUids()).toContain(account.uid);
    expect(rules('OUTPUT').find((l) => l.startsWith('-A '))).toBe(`-A OUTPUT -j ${EGRESS_CHAIN}`);

    expect((await connectAs(account, '127.0.0.1', ports.database)).result).toBe('connected');
    const control = await connectAs(account, '127.0.0.1', ports.control);
    expect(control.result).toBe('failed 111 Connection refused');
    expect(control.ms).toBeLessThan(1_500);
    // Another loopback address (a database instance of another tenant) is refused too.
    expect((await connectAs(account, '127.115.0.9', ports.database)).result).toMatch(/^failed 111/);
    // Only the site's account is concerned: root still reaches the control plane.
    expect((await connectAs(null, '127.0.0.1', ports.control)).result).toBe('connected');
  });

  it('leaves the public internet and the resolvers alone', async () => {
    const chain = rules(siteChain(account.uid));
    const rejected = new BlockList();
    for (const line of chain.filter((l) => l.includes('-j CWP-REJECT'))) {
      const [net4, bits] = /-d (\S+)/.exec(line)![1].split('/');
      rejected.addSubnet(net4, Number(bits), 'ipv4');
    }
    for (const address of [PUBLIC, '8.8.8.8', '1.1.1.1']) expect(rejected.check(address, 'ipv4'), address).toBe(false);
    for (const address of ['127.0.0.1', '127.115.0.9', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1']) {
      expect(rejected.check(address, 'ipv4'), address).toBe(true);
    }
    // DNS to the configured resolvers passes (UDP and TCP 53), before any reject.
    for (const resolver of resolvers().filter((r) => net.isIPv4(r))) {
      expect(chain.some((l) => l.includes(`-d ${resolver}/32 -p udp`) && l.includes('--dport 53') && l.endsWith('-j RETURN'))).toBe(true);
    }
    // A public address is not refused: it connects, or (no way out of this machine) times out.
    const outside = await connectAs(account, PUBLIC, 80, 1.5);
    expect(['connected', 'timeout']).toContain(outside.result);
  });

  it('replaces the rules when the site changes (a relay set, then removed)', async () => {
    // From the site's own configuration, as the adapter applies them (config/site.json).
    mkdirSync(path.join(dir, 'config'), { recursive: true });
    const site = { db: { host: '127.0.0.1', port: ports.database }, smtp: { host: 'localhost', port: ports.relay } };
    writeFileSync(path.join(dir, 'config', 'site.json'), JSON.stringify(site));
    const withRelay = await applySiteEgressFor(account.uid, dir, null);
    expect(withRelay.changed).toBe(true);
    expect((await connectAs(account, '127.0.0.1', ports.relay)).result).toBe('connected');
    expect((await connectAs(account, '127.0.0.1', ports.control)).result).toMatch(/^failed 111/);
    await applySiteEgress({ uid: account.uid, database: { host: '127.0.0.1', port: ports.database }, relay: null });
    expect((await connectAs(account, '127.0.0.1', ports.relay)).result).toMatch(/^failed 111/);
    // One dispatch rule per site, however often it was applied.
    expect(rules(EGRESS_CHAIN).filter((l) => l.includes(`uid=${account.uid} `))).toHaveLength(1);
  });

  it('removes the rules: the account reaches the port again and nothing of the site is left', async () => {
    expect((await removeSiteEgressFor(account.name)).changed).toBe(true);
    expect((await connectAs(account, '127.0.0.1', ports.control)).result).toBe('connected');
    expect(await siteEgressUids()).not.toContain(account.uid);
    expect(() => rules(siteChain(account.uid))).toThrow();
    expect((await removeSiteEgress(account.uid)).changed).toBe(false);
  });

  it('goes with the account: a removed account leaves no rule for the next account its uid is given to', async () => {
    const spare = await ensureAccount(accountNameFor('wp', dir, 'egress-spare'), { purpose: 'WordPress egress test', dataDir: dir });
    await applySiteEgress({ uid: spare.uid, database: { host: '127.0.0.1', port: ports.database }, relay: null });
    expect(await siteEgressUids()).toContain(spare.uid);
    await removeAccount(spare.name);
    expect(await siteEgressUids()).not.toContain(spare.uid);
  });
});
