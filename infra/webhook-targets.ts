import { promises as dns } from 'node:dns';
import { isIP } from 'node:net';
import { classifyAddress, type AddressClass } from '../common/ip-address';
import { isProtectedLocalPort } from '../common/platform-ports';

// The address classes and the protected ports are shared with the load-balancer backends' rules.
export { classifyAddress, type AddressClass } from '../common/ip-address';
export { localServicePorts, protectLocalPorts } from '../common/platform-ports';

/**
 * Which webhook targets may be called (SPEC Events "Delivery rules" 1; DECISIONS "Local development
 * stand-ins"). A target is checked at registration and again before every attempt, after DNS
 * resolution; the delivery client then connects to the address that was checked (no rebinding).
 *
 * - https only, and every resolved address public.
 * - With ALLOW_INSECURE_TARGETS=1 (tests, local runs): plain http and loopback are accepted
 *   too; private, link-local, unique-local, CGNAT, multicast, unspecified and reserved stay rejected.
 */
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

export interface TargetPolicy {
  allowInsecure: boolean;
}

/** Why a loopback target must not be called (one of the control plane's own services), or null. */
function localServiceRefusal(url: URL): string | null {
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  if (isProtectedLocalPort(port))
    return `port ${port} on this machine belongs to the control plane (its API, Temporal, PowerDNS or PostgreSQL); webhook targets cannot reach it`;
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
