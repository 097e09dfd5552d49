/**
 * What a hosted WordPress site's PHP may connect to (its php-fpm pool and the helper run as the
 * site's own OS account, `cwp-svc-<n>-<hash>`). Without these rules tenant PHP reaches every service
 * of the control plane on this host: Temporal's frontend and UI (no authentication), PostgreSQL, the
 * API's `/_dev` routes, Redis, the PowerDNS API, SeaweedFS's admin ports, and the database instances
 * of every other site and tenant (DBAAS_ADDRESS_RANGE, a loopback range). Container apps close the
 * same hole with the CAAS-FWD/CAAS-IN chains (providers/podman/isolation.ts); PHP runs on the host,
 * so here it is the OUTPUT chain, matched on the socket's owner uid.
 *
 * Chains (iptables, and ip6tables when the machine has it and the kernel has IPv6):
 * - `CWP-OUT`: jumped to by OUTPUT's first rule. One rule per site: `-m owner --uid-owner <uid>` jumps
 *   to the site's chain; its comment `cwp-egress uid=<uid> v=<fingerprint>` finds it again.
 * - `CWP-U<uid>`, per site, in this order:
 *   1. packets of established/related connections: RETURN;
 *   2. RETURN for the site's own database instance (TCP address:port), the SMTP relay (TCP
 *      host:port, when one is set), the host's web server when given (`web`, the nginx every site is
 *      served by: a site calling itself, WordPress's loopback cron and Site Health; it serves only
 *      what the internet sees), and DNS (UDP and TCP 53) to the resolvers in /etc/resolv.conf (127.0.0.1
 *      and ::1 when it lists none, as glibc does). The resolvers are allowed because plugins resolve
 *      the APIs they call, and the usual resolvers (systemd-resolved's 127.0.0.53, a cloud network's
 *      10.x or 169.254.169.253) sit in the ranges below; only port 53 is opened on them;
 *   3. REJECT (TCP: a reset, so PHP sees "Connection refused" at once; other protocols: ICMP
 *      administratively prohibited, through the shared chain `CWP-REJECT`) to loopback, "this
 *      network", RFC 1918, CGNAT, link-local (cloud metadata), multicast and reserved IPv4; ::1,
 *      ::, unique-local, link-local, site-local, IPv4-mapped and multicast IPv6; and every address
 *      of this host's interfaces (services bound to 0.0.0.0 answer there);
 *   4. anything else falls off the chain: the public internet stays reachable, because plugins call
 *      public APIs (payment providers, licence checks, feeds, webhooks) and that is what a hosted
 *      WordPress is expected to do. Abuse of the public internet is an abuse-desk matter, not a
 *      host-isolation one.
 *   Our chains never ACCEPT: what they let through (RETURN) still meets the host's own OUTPUT
 *   rules and policy after them. They only take away.
 *
 * Applying is idempotent and cheap when nothing changed: the dispatch rule's fingerprint (a hash of
 * the site's rules, the host's addresses and resolvers included) is compared first, so the keeper's
 * repair may call it every pass; a changed site (another relay, a new host address) has its chain
 * replaced in one iptables-restore transaction per family, never leaving it without rules. Changes
 * are serialised across processes (the API and the worker) by a lock file in /run (root's only:
 * /run/lock is world-writable, and a tenant could plant the lock there). Commands get argv only; the
 * restore input holds nothing but validated addresses, ports and uids.
 *
 * Without root, or without iptables, nothing is enforced: the call returns `enforced: false` with the
 * reason and logs it once per process (a developer's unprivileged checkout, where every site runs as
 * the developer's own account anyway). After a host restart the rules are gone until the keeper's
 * repair applies them again. Unix sockets (PostgreSQL's, php-fpm's) are outside iptables: file
 * modes and peer authentication guard those.
 */
import { createHash } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import { existsSync, promises as fs, readFileSync } from 'node:fs';
import { BlockList, isIP } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createLogger } from '../../common/logger';
import { CommandError, findBinary, run, runningAsRoot, withFileLock } from '../local-server';
import { lookupAccount } from '../os-accounts';
import { sitePaths, type SiteJson } from './site-files';

export const EGRESS_CHAIN = 'CWP-OUT';
export const REJECT_CHAIN = 'CWP-REJECT';
/** The site's own chain (29 characters at most: a uid has at most 10 digits). */
export const siteChain = (uid: number): string => `CWP-U${uid}`;

export interface Endpoint {
  /** An IP address, or a name resolved (all its addresses) when the rules are applied. */
  host: string;
  port: number;
}

export interface SiteEgressSpec {
  /** The site's OS account's uid (providers/os-accounts.ts). */
  uid: number;
  /** The site's own database instance. */
  database: Endpoint;
  /** The host's SMTP relay (WORDPRESS_SMTP_RELAY), or null when the site cannot send mail. */
  relay: Endpoint | null;
  /** The web server every site is served by (WORDPRESS_BIND_ADDRESS and its port), so a site can call itself. */
  web?: Endpoint | null;
}

export type Family = 'ipv4' | 'ipv6';

export interface EgressStatus {
  /** Whether rules are in force for the site (false: not root, or no iptables). */
  enforced: boolean;
  /** The families the rules were written for. */
  families: Family[];
  /** Whether this call changed the kernel's rules (false: they were already as wanted). */
  changed: boolean;
  /** Why nothing is enforced, or what is left out (no IPv6). */
  note?: string;
}

const COMMENT = 'cwp-egress';
const TIMEOUT_MS = 30_000;
const LOCK_FILE = path.join(existsSync('/run') ? '/run' : os.tmpdir(), 'cloud-wp-egress.lock');
const log = createLogger(undefined, 'wordpress-egress');

interface FamilyTools {
  family: Family;
  iptables: string;
  restore: string;
  blocked: string[];
  rejectOther: string;
}

const V4_BLOCKED = [
  '0.0.0.0/8',
  '127.0.0.0/8',
  '10.0.0.0/8',
  '172.16.0.0/12',
  '192.168.0.0/16',
  '100.64.0.0/10',
  '169.254.0.0/16',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
const V6_BLOCKED = ['::1/128', '::/128', '::ffff:0:0/96', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8'];

function blockList(family: Family, ranges: string[]): BlockList {
  const list = new BlockList();
  for (const range of ranges) {
    const [net, bits] = range.split('/');
    list.addSubnet(net, Number(bits), family);
  }
  return list;
}
const COVERED = { ipv4: blockList('ipv4', V4_BLOCKED), ipv6: blockList('ipv6', V6_BLOCKED) };

// ---------------------------------------------------------------------------------------------
// What the machine has

async function works(binary: string): Promise<boolean> {
  return run(binary, ['-w', '-S', 'OUTPUT'], { timeoutMs: TIMEOUT_MS }).then(
    () => true,
    () => false,
  );
}

let toolsFound: Promise<FamilyTools[]> | null = null;

/** iptables, and ip6tables when present and the kernel has IPv6 (looked up once per process). */
function tools(): Promise<FamilyTools[]> {
  toolsFound ??= (async () => {
    const found: FamilyTools[] = [];
    for (const [family, names, blocked, rejectOther] of [
      ['ipv4', ['iptables', 'iptables-restore'], V4_BLOCKED, 'icmp-admin-prohibited'],
      ['ipv6', ['ip6tables', 'ip6tables-restore'], V6_BLOCKED, 'icmp6-adm-prohibited'],
    ] as const) {
      const iptables = findBinary(names[0]);
      const restore = findBinary(names[1]);
      if (iptables && restore && (await works(iptables))) found.push({ family, iptables, restore, blocked: [...blocked], rejectOther });
    }
    return found;
  })();
  return toolsFound;
}

const reported = new Set<string>();
function notEnforced(note: string): EgressStatus {
  if (!reported.has(note)) {
    reported.add(note);
    log.warn({ note }, 'WordPress site egress rules are not enforced');
  }
  return { enforced: false, families: [], changed: false, note };
}

/** Why rules cannot be written here, or null when they can (root with iptables). */
async function unavailable(): Promise<string | null> {
  if (!runningAsRoot()) return 'not root: site PHP may connect to every service of this host (no egress rules)';
  if (!(await tools()).length) return 'iptables is missing or unusable: site PHP may connect to every service of this host (no egress rules)';
  return null;
}

/** IP literals of the resolvers in /etc/resolv.conf (127.0.0.1 and ::1 when it names none, as glibc). */
export function resolvers(file = '/etc/resolv.conf'): string[] {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    // no file: glibc's default
  }
  const found = text.split('\n').flatMap((line) => {
    const m = /^\s*nameserver\s+(\S+)/.exec(line);
    const address = m?.[1].split('%')[0];
    return address && isIP(address) ? [address] : [];
  });
  return found.length ? [...new Set(found)] : ['127.0.0.1', '::1'];
}

/** This host's own addresses (every interface), scope ids dropped. */
function hostAddresses(): string[] {
  const all = Object.values(os.networkInterfaces()).flatMap((list) => (list ?? []).map((a) => a.address.split('%')[0]));
  return [...new Set(all.filter((a) => isIP(a)))];
}

async function addressesOf(host: string): Promise<string[]> {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  if (isIP(bare)) return [bare];
  if (!/^[A-Za-z0-9.-]{1,253}$/.test(bare)) throw new Error(`egress: "${host}" is neither an address nor a host name`);
  return [...new Set((await lookup(bare, { all: true })).map((a) => a.address))];
}

function checkPort(port: number, what: string): void {
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`egress: bad ${what} port ${port}`);
}

// ---------------------------------------------------------------------------------------------
// The rules

const familyOf = (address: string): Family => (isIP(address) === 6 ? 'ipv6' : 'ipv4');
const hostRange = (address: string) => `${address}/${familyOf(address) === 'ipv6' ? 128 : 32}`;

interface Resolved {
  uid: number;
  tcp: { address: string; port: number }[];
  dns: string[];
  own: string[];
}

async function resolve(spec: SiteEgressSpec): Promise<Resolved> {
  if (!Number.isInteger(spec.uid) || spec.uid <= 0 || spec.uid > 0xfffffffe) throw new Error(`egress: bad uid ${spec.uid}`);
  const endpoints = [
    ['database', spec.database],
    ['relay', spec.relay],
    ['web', spec.web ?? null],
  ] as const;
  const tcp: Resolved['tcp'] = [];
  for (const [what, endpoint] of endpoints) {
    if (!endpoint) continue;
    checkPort(endpoint.port, what);
    for (const address of await addressesOf(endpoint.host)) tcp.push({ address, port: endpoint.port });
  }
  return { uid: spec.uid, tcp, dns: resolvers(), own: hostAddresses() };
}

/** The site chain's rules of one family, as iptables-restore lines (`-A CWP-U<uid> ...`). */
export function siteRules(r: Resolved, t: Pick<FamilyTools, 'family' | 'blocked'>): string[] {
  const chain = siteChain(r.uid);
  const comment = ['-m', 'comment', '--comment', `"${COMMENT} uid=${r.uid}"`];
  const rule = (...spec: string[]) => ['-A', chain, ...spec, ...comment].join(' ');
  const mine = (address: string) => familyOf(address) === t.family;
  const lines = [rule('-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'RETURN')];
  for (const { address, port } of r.tcp.filter((e) => mine(e.address))) {
    lines.push(rule('-d', hostRange(address), '-p', 'tcp', '--dport', String(port), '-j', 'RETURN'));
  }
  for (const address of r.dns.filter(mine)) {
    for (const proto of ['udp', 'tcp']) lines.push(rule('-d', hostRange(address), '-p', proto, '--dport', '53', '-j', 'RETURN'));
  }
  const own = r.own.filter((a) => mine(a) && !COVERED[t.family].check(a, t.family)).map(hostRange);
  for (const range of [...t.blocked, ...own]) lines.push(rule('-d', range, '-j', REJECT_CHAIN));
  return lines;
}

function fingerprint(r: Resolved, all: FamilyTools[]): string {
  const text = all.map((t) => siteRules(r, t).join('\n')).join('\n--\n');
  return createHash('sha256').update(text).digest('hex').slice(0, 12);
}

const dispatchComment = (uid: number, version: string) => `${COMMENT} uid=${uid} v=${version}`;
/** Matches the `-S` listing of any rule of ours for `uid` (the comment, quoted or not). */
const ofUid = (uid: number) => new RegExp(`--comment "?${COMMENT} uid=${uid}[ "]|--comment "?${COMMENT} uid=${uid}$`);

async function ipt(t: FamilyTools, args: string[]): Promise<string> {
  try {
    return (await run(t.iptables, ['-w', ...args], { timeoutMs: TIMEOUT_MS })).stdout;
  } catch (err) {
    throw new Error(`${path.basename(t.iptables)} ${args.join(' ')}: ${err instanceof CommandError ? err.detail : String(err)}`);
  }
}

async function restore(t: FamilyTools, input: string): Promise<void> {
  const feed = (async function* () {
    yield Buffer.from(input);
  })();
  try {
    await run(t.restore, ['-w', '--noflush'], { timeoutMs: TIMEOUT_MS, input: feed });
  } catch (err) {
    throw new Error(`${path.basename(t.restore)}: ${err instanceof CommandError ? err.detail : String(err)}`);
  }
}

async function chainExists(t: FamilyTools, chain: string): Promise<boolean> {
  return ipt(t, ['-S', chain]).then(
    () => true,
    () => false,
  );
}

/** The `-A` lines of `chain` (1-based position = index + 1). */
async function listRules(t: FamilyTools, chain: string): Promise<string[]> {
  return (await ipt(t, ['-S', chain])).split('\n').filter((l) => l.startsWith('-A '));
}

/** Makes OUTPUT's first rule the jump to CWP-OUT, and the only one. */
async function jumpFirst(t: FamilyTools): Promise<boolean> {
  const rules = await listRules(t, 'OUTPUT');
  const positions = rules.flatMap((rule, i) => (rule === `-A OUTPUT -j ${EGRESS_CHAIN}` ? [i + 1] : []));
  if (positions.length === 1 && positions[0] === 1) return false;
  await ipt(t, ['-I', 'OUTPUT', '1', '-j', EGRESS_CHAIN]);
  for (const position of positions.reverse()) await ipt(t, ['-D', 'OUTPUT', String(position + 1)]);
  return true;
}

async function applyFamily(t: FamilyTools, r: Resolved, version: string): Promise<boolean> {
  let dispatch = await listRules(t, EGRESS_CHAIN).catch(() => null);
  if (!dispatch) {
    await ipt(t, ['-N', EGRESS_CHAIN]);
    dispatch = [];
  }
  const jumped = await jumpFirst(t);
  const wanted = dispatchComment(r.uid, version);
  const current = dispatch.flatMap((rule, i) => (ofUid(r.uid).test(rule) ? [{ rule, position: i + 1 }] : []));
  if (current.length === 1 && current[0].rule.includes(wanted) && (await chainExists(t, siteChain(r.uid)))) return jumped;

  // One transaction: the reject chain and the site's chain are declared (so emptied) and refilled,
  // the old dispatch rules deleted (highest position first) and the new one appended.
  const [tcpReject, otherReject] = [
    ['-A', REJECT_CHAIN, '-p', 'tcp', '-j', 'REJECT', '--reject-with', 'tcp-reset'],
    ['-A', REJECT_CHAIN, '-j', 'REJECT', '--reject-with', t.rejectOther],
  ].map((a) => a.join(' '));
  const input = [
    '*filter',
    `:${REJECT_CHAIN} - [0:0]`,
    `:${siteChain(r.uid)} - [0:0]`,
    tcpReject,
    otherReject,
    ...siteRules(r, t),
    ...current.reverse().map(({ position }) => `-D ${EGRESS_CHAIN} ${position}`),
    ['-A', EGRESS_CHAIN, '-m', 'owner', '--uid-owner', String(r.uid), '-m', 'comment', '--comment', `"${wanted}"`, '-j', siteChain(r.uid)].join(' '),
    'COMMIT',
    '',
  ].join('\n');
  await restore(t, input);
  return true;
}

/**
 * Puts the site's egress rules in force (see the module comment), replacing any it had; does nothing
 * when they already are as wanted. Not root or no iptables: `enforced: false`, logged once.
 */
export async function applySiteEgress(spec: SiteEgressSpec): Promise<EgressStatus> {
  const reason = await unavailable();
  if (reason) return notEnforced(reason);
  const all = await tools();
  const r = await resolve(spec);
  const version = fingerprint(r, all);
  return withFileLock(LOCK_FILE, async () => {
    let changed = false;
    for (const t of all) if (await applyFamily(t, r, version)) changed = true;
    const families = all.map((t) => t.family);
    return { enforced: true, families, changed, ...(families.includes('ipv6') ? {} : { note: 'no usable ip6tables: IPv6 is not filtered' }) };
  });
}

/** Removes the site's rules (its dispatch rule and chain); absent is fine. CWP-OUT goes with the last site. */
export async function removeSiteEgress(uid: number): Promise<EgressStatus> {
  const reason = await unavailable();
  if (reason) return notEnforced(reason);
  if (!Number.isInteger(uid) || uid <= 0) throw new Error(`egress: bad uid ${uid}`);
  const all = await tools();
  return withFileLock(LOCK_FILE, async () => {
    let changed = false;
    for (const t of all) {
      let left = 0;
      if (await chainExists(t, EGRESS_CHAIN)) {
        const rules = await listRules(t, EGRESS_CHAIN);
        const positions = rules.flatMap((rule, i) => (ofUid(uid).test(rule) ? [i + 1] : []));
        for (const position of positions.reverse()) await ipt(t, ['-D', EGRESS_CHAIN, String(position)]);
        changed ||= positions.length > 0;
        left = rules.length - positions.length;
      }
      if (await chainExists(t, siteChain(uid))) {
        await ipt(t, ['-F', siteChain(uid)]);
        await ipt(t, ['-X', siteChain(uid)]);
        changed = true;
      }
      if (left === 0) await removeChains(t);
    }
    return { enforced: true, families: all.map((t) => t.family), changed };
  });
}

/**
 * No site left in CWP-OUT: OUTPUT's jump, CWP-OUT and CWP-REJECT go. A chain something still
 * refers to (a site chain left without its dispatch rule) stays; the next apply reuses it.
 */
async function removeChains(t: FamilyTools): Promise<void> {
  const rules = await listRules(t, 'OUTPUT');
  const positions = rules.flatMap((rule, i) => (rule === `-A OUTPUT -j ${EGRESS_CHAIN}` ? [i + 1] : []));
  for (const position of positions.reverse()) await ipt(t, ['-D', 'OUTPUT', String(position)]);
  for (const chain of [EGRESS_CHAIN, REJECT_CHAIN]) {
    if (!(await chainExists(t, chain))) continue;
    // Emptied only when nothing jumps to it: an empty CWP-REJECT would let through what it rejects.
    const header = (await ipt(t, ['-L', chain, '-n'])).split('\n')[0];
    if (!/\(0 references\)/.test(header)) continue;
    await ipt(t, ['-F', chain]);
    await ipt(t, ['-X', chain]);
  }
}

/**
 * `applySiteEgress` for the site whose directory is `siteRoot`, from what its PHP itself uses: the
 * database and relay of its `config/site.json` (site-files.ts), and the web server's settings
 * (`WordpressNginx.settings()`, null before its first start: then allowed from the next apply on).
 */
export async function applySiteEgressFor(uid: number, siteRoot: string, web: { bindAddress: string; port: number } | null): Promise<EgressStatus> {
  const reason = await unavailable();
  if (reason) return notEnforced(reason);
  const site = JSON.parse(await fs.readFile(sitePaths(siteRoot).siteJson, 'utf8')) as Pick<SiteJson, 'db' | 'smtp'>;
  return applySiteEgress({
    uid,
    database: { host: site.db.host, port: site.db.port },
    relay: site.smtp ? { host: site.smtp.host, port: site.smtp.port } : null,
    web: web ? { host: web.bindAddress, port: web.port } : null,
  });
}

/** `removeSiteEgress` for the account called `accountName` (before the account is removed: its uid goes with it). */
export async function removeSiteEgressFor(accountName: string): Promise<EgressStatus> {
  const reason = await unavailable();
  if (reason) return notEnforced(reason);
  const account = await lookupAccount(accountName);
  return account ? removeSiteEgress(account.uid) : { enforced: true, families: (await tools()).map((t) => t.family), changed: false };
}

/** The uids that have rules in CWP-OUT (the keeper's check for rules whose site is gone). */
export async function siteEgressUids(): Promise<number[]> {
  if (await unavailable()) return [];
  const uids = new Set<number>();
  for (const t of await tools()) {
    if (!(await chainExists(t, EGRESS_CHAIN))) continue;
    for (const rule of await listRules(t, EGRESS_CHAIN)) {
      const m = new RegExp(`--comment "?${COMMENT} uid=(\\d+)`).exec(rule);
      if (m) uids.add(Number(m[1]));
    }
  }
  return [...uids].sort((a, b) => a - b);
}
