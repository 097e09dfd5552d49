/**
 * IPv4 ranges in CIDR notation (`127.78.0.0/16`) and the host addresses in them, for the settings
 * that give each tenant server an address of its own: load balancers (LB_BIND_ADDRESS, by service
 * id) and database instances (DBAAS_ADDRESS_RANGE, lowest free). Pure, so config and providers share it.
 */

export interface Ipv4Range {
  /** The network address as a number. */
  network: number;
  prefix: number;
  /** Addresses in the range, network and broadcast included. */
  size: number;
}

/** Prefixes a range may have: at most a /8, and at least two host addresses. */
export const MIN_PREFIX = 8;
export const MAX_PREFIX = 30;

export function ipv4ToInt(text: string): number | null {
  const parts = text.split('.');
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)) return null;
  return parts.reduce((acc, p) => acc * 256 + Number(p), 0);
}

export function intToIpv4(value: number): string {
  return [24, 16, 8, 0].map((shift) => Math.floor(value / 2 ** shift) % 256).join('.');
}

/** `a.b.c.d/n` with n in MIN_PREFIX..MAX_PREFIX (host bits may be set; they are ignored), or null. */
export function parseIpv4Range(text: string): Ipv4Range | null {
  const match = /^([\d.]+)\/(\d{1,2})$/.exec(text);
  if (!match) return null;
  const base = ipv4ToInt(match[1]);
  const prefix = Number(match[2]);
  if (base === null || prefix < MIN_PREFIX || prefix > MAX_PREFIX) return null;
  const size = 2 ** (32 - prefix);
  return { network: base - (base % size), prefix, size };
}

/** Host addresses of a range (network and broadcast addresses left out). */
export const hostCount = (range: Ipv4Range): number => range.size - 2;

/** The range's host address number `index` (0-based, lowest first), or null past the last one. */
export function hostAddress(range: Ipv4Range, index: number): string | null {
  if (!Number.isInteger(index) || index < 0 || index >= hostCount(range)) return null;
  return intToIpv4(range.network + 1 + index);
}

/** Whether `address` is one of the range's host addresses. */
export function containsHost(range: Ipv4Range, address: string): boolean {
  const value = ipv4ToInt(address);
  return value !== null && value > range.network && value < range.network + range.size - 1;
}

/** Whether every address of the range is loopback (127.0.0.0/8: Linux routes all of it to `lo`). */
export function isLoopbackRange(range: Ipv4Range): boolean {
  return Math.floor(range.network / 2 ** 24) === 127;
}
