import { promises as dns } from 'node:dns';
import { BlockList, isIP } from 'node:net';

/**
 * Which webhook targets may be called (SPEC Events "Delivery rules" 1; DECISIONS "Local development
 * stand-ins"). A target is checked at registration and again before every attempt, after DNS
 * resolution; the delivery client then connects to the address that was checked (no rebinding).
 *
 * - https only, and every resolved address public.
 * - With WEBHOOK_ALLOW_INSECURE_TARGETS=1 (tests, local runs): plain http and loopback are accepted
 *   too; private, link-local, unique-local, CGNAT, multicast, unspecified and reserved stay rejected.
 */
export type AddressClass = 'public' | 'loopback' | 'private' | 'link-local' | 'unique-local' | 'cgnat' | 'multicast' | 'unspecified' | 'reserved';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export type LookupFn = (hostname: string) => Promise<ResolvedAddress[]>;

const systemLookup: LookupFn = async (hostname) =>
  (await dns.lookup(hostname, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

/**
 * The resolver every target check uses. Tests replace `lookup` (a name that resolves to a private
 * address, without depending on real DNS) and restore it with `resetResolver()`.
 */
export const targetResolver: { lookup: LookupFn } = { lookup: systemLookup };
export function resetResolver(): void {
  targetResolver.lookup = systemLookup;
}

const RESOLVE_TIMEOUT_MS = 5_000;

function ranges(type: 'ipv4' | 'ipv6', list: Array<[string, number]>): BlockList {
  const block = new BlockList();
  for (const [net, prefix] of list) block.addSubnet(net, prefix, type);
  return block;
}

// Order matters only for the label; everything that is not `public` is rejected (loopback aside).
const V4: Array<[AddressClass, BlockList]> = [
  ['unspecified', ranges('ipv4', [['0.0.0.0', 8]])],
  ['loopback', ranges('ipv4', [['127.0.0.0', 8]])],
  [
    'private',
    ranges('ipv4', [
      ['10.0.0.0', 8],
      ['172.16.0.0', 12],
      ['192.168.0.0', 16],
    ]),
  ],
  ['cgnat', ranges('ipv4', [['100.64.0.0', 10]])],
  ['link-local', ranges('ipv4', [['169.254.0.0', 16]])],
  ['multicast', ranges('ipv4', [['224.0.0.0', 4]])],
  [
    'reserved',
    ranges('ipv4', [
      ['192.0.0.0', 24], // IETF protocol assignments
      ['192.0.2.0', 24], // documentation
      ['192.88.99.0', 24], // 6to4 relay anycast
      ['198.18.0.0', 15], // benchmarking
      ['198.51.100.0', 24], // documentation
      ['203.0.113.0', 24], // documentation
      ['240.0.0.0', 4], // reserved, and 255.255.255.255 broadcast
    ]),
  ],
];

const V6: Array<[AddressClass, BlockList]> = [
  ['unspecified', ranges('ipv6', [['::', 128]])],
  ['loopback', ranges('ipv6', [['::1', 128]])],
  ['link-local', ranges('ipv6', [['fe80::', 10]])],
  ['unique-local', ranges('ipv6', [['fc00::', 7]])],
  ['private', ranges('ipv6', [['fec0::', 10]])], // deprecated site-local
  ['multicast', ranges('ipv6', [['ff00::', 8]])],
  [
    'reserved',
    ranges('ipv6', [
      ['100::', 64], // discard-only
      ['2001::', 32], // Teredo (tunnels to arbitrary IPv4)
      ['2001:db8::', 32], // documentation
      ['::', 96], // IPv4-compatible (deprecated)
    ]),
  ],
];

function v4FromHex(hi: number, lo: number): string {
  return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
}

/** Expands an IPv6 literal into its eight 16-bit groups (null if it is not one). */
function ipv6Groups(address: string): number[] | null {
  let text = address.split('%')[0];
  const v4Tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4Tail) {
    const parts = v4Tail[1].split('.').map(Number);
    text = `${text.slice(0, -v4Tail[1].length)}${((parts[0] << 8) | parts[1]).toString(16)}:${((parts[2] << 8) | parts[3]).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  if (text.split('::').length > 2) return null;
  const parse = (s: string) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const h = parse(head);
  const t = tail === undefined ? [] : parse(tail);
  const fill = tail === undefined ? 0 : 8 - h.length - t.length;
  const groups = [...h, ...Array(fill).fill(0), ...t];
  return groups.length === 8 && groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : null;
}

/** The IPv4 address an IPv6 address carries (IPv4-mapped, NAT64, 6to4), if any. */
function embeddedV4(address: string): string | null {
  const g = ipv6Groups(address);
  if (!g) return null;
  // ::ffff:a.b.c.d (mapped)
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return v4FromHex(g[6], g[7]);
  // 64:ff9b::a.b.c.d (NAT64 well-known prefix) and 64:ff9b:1::/48 (local-use NAT64)
  if (g[0] === 0x64 && g[1] === 0xff9b) return v4FromHex(g[6], g[7]);
  // 2002:AABB:CCDD::/48 (6to4)
  if (g[0] === 0x2002) return v4FromHex(g[1], g[2]);
  return null;
}

/** Classifies one IP address literal. Anything that is not an IP literal is `reserved`. */
export function classifyAddress(address: string): AddressClass {
  const family = isIP(address.split('%')[0]);
  if (family === 4) {
    for (const [label, list] of V4) if (list.check(address, 'ipv4')) return label;
    return 'public';
  }
  if (family === 6) {
    const bare = address.split('%')[0];
    const inner = embeddedV4(bare);
    if (inner) return classifyAddress(inner);
    for (const [label, list] of V6) if (list.check(bare, 'ipv6')) return label;
    return 'public';
  }
  return 'reserved';
}

export interface TargetPolicy {
  allowInsecure: boolean;
}

/**
 * The control plane's own local services, which a loopback target may never reach, even with
 * WEBHOOK_ALLOW_INSECURE_TARGETS: the API (its loopback-only `/_dev` stand-ins act on any account),
 * the Temporal frontend, its HTTP API and the UI. Each process registers the ports it knows when it
 * starts (api/bootstrap.ts, api/server.ts, workers/worker.ts: `protectLocalPorts(localServicePorts(config))`),
 * and a path under `/_dev` is refused on every loopback port, whatever listens there.
 */
const protectedLocalPorts = new Set<number>();

export function protectLocalPorts(ports: Iterable<number>): void {
  for (const port of ports) if (Number.isInteger(port) && port > 0) protectedLocalPorts.add(port);
}

/** The ports of the local services a configuration names: API, Temporal frontend and UI, and WEBHOOK_PROTECTED_PORTS. */
export function localServicePorts(config: { PORT: number; TEMPORAL_ADDRESS: string; TEMPORAL_UI_URL: string; WEBHOOK_PROTECTED_PORTS: number[] }): number[] {
  const temporalPort = Number(config.TEMPORAL_ADDRESS.split(':').pop());
  let uiPort = NaN;
  try {
    const ui = new URL(config.TEMPORAL_UI_URL);
    uiPort = Number(ui.port || (ui.protocol === 'https:' ? 443 : 80));
  } catch {
    // not a URL: nothing to protect from it
  }
  return [config.PORT, temporalPort, uiPort, ...config.WEBHOOK_PROTECTED_PORTS].filter((p) => Number.isInteger(p) && p > 0);
}

/** Why a loopback target must not be called (one of the control plane's own services), or null. */
function localServiceRefusal(url: URL): string | null {
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  if (protectedLocalPorts.has(port))
    return `port ${port} on this machine belongs to the control plane (its API, Temporal or the Temporal UI); webhook targets cannot reach it`;
  let path = url.pathname;
  try {
    path = decodeURIComponent(path);
  } catch {
    // judge the raw path
  }
  if (path.replace(/\/+/g, '/').toLowerCase().startsWith('/_dev'))
    return "paths under /_dev are the control plane's local stand-ins; webhook targets cannot reach them";
  return null;
}

export function isAllowedAddress(address: string, policy: TargetPolicy): { ok: true } | { ok: false; class: AddressClass } {
  const cls = classifyAddress(address);
  if (cls === 'public' || (cls === 'loopback' && policy.allowInsecure)) return { ok: true };
  return { ok: false, class: cls };
}

export class TargetRejected extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TargetRejected';
  }
}

export const MAX_URL_LENGTH = 2048;

/** Parses and checks the form of a URL (no DNS). Throws TargetRejected with a user-facing reason. */
export function parseTargetUrl(raw: string, policy: TargetPolicy): URL {
  if (raw.length > MAX_URL_LENGTH) throw new TargetRejected(`must be at most ${MAX_URL_LENGTH} characters`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TargetRejected('must be an absolute URL such as https://example.com/webhooks');
  }
  if (url.protocol !== 'https:' && !(policy.allowInsecure && url.protocol === 'http:')) {
    throw new TargetRejected(policy.allowInsecure ? 'must use https (or http on this development instance)' : 'must use https');
  }
  if (url.username || url.password) throw new TargetRejected('must not carry credentials (user:password@); authenticate deliveries by their signature');
  if (!url.hostname) throw new TargetRejected('must name a host');
  return url;
}

/** The URL's host without IPv6 brackets. */
export function bareHost(url: URL): string {
  return url.hostname.startsWith('[') && url.hostname.endsWith(']') ? url.hostname.slice(1, -1) : url.hostname;
}

/**
 * Resolves the URL's host once and checks every address. Returns the addresses to connect to (all
 * checked); throws TargetRejected naming the offending address and its class.
 */
export async function resolveTarget(url: URL, policy: TargetPolicy, lookup: LookupFn = targetResolver.lookup): Promise<ResolvedAddress[]> {
  const host = bareHost(url);
  const literal = isIP(host);
  let addresses: ResolvedAddress[];
  if (literal) addresses = [{ address: host, family: literal === 6 ? 6 : 4 }];
  else {
    let timer: NodeJS.Timeout | undefined;
    try {
      addresses = await Promise.race([
        lookup(host),
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('DNS lookup timed out')), RESOLVE_TIMEOUT_MS);
        }),
      ]);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new TargetRejected(`host "${host}" does not resolve${code ? ` (${code})` : `: ${(err as Error).message}`}`);
    } finally {
      clearTimeout(timer);
    }
    if (addresses.length === 0) throw new TargetRejected(`host "${host}" does not resolve`);
  }
  for (const a of addresses) {
    const verdict = isAllowedAddress(a.address, policy);
    if (!verdict.ok) {
      const shown = literal ? `address ${a.address}` : `host "${host}" resolves to ${a.address}, which`;
      throw new TargetRejected(
        `${shown} is ${/^[aeiou]/.test(verdict.class) ? 'an' : 'a'} ${verdict.class} address; webhook targets must be publicly reachable`,
      );
    }
    if (classifyAddress(a.address) === 'loopback') {
      const refusal = localServiceRefusal(url);
      if (refusal) throw new TargetRejected(refusal);
    }
  }
  return addresses;
}

/** Registration check: form and resolution. Returns the normalised URL string. */
export async function checkTarget(raw: string, policy: TargetPolicy): Promise<string> {
  const url = parseTargetUrl(raw, policy);
  await resolveTarget(url, policy);
  return url.toString();
}
