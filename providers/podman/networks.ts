/**
 * Tenant networks: one podman bridge network per tenant, created on first use with a /24 of the
 * engine's subnet pool (docs/research/caas-podman.md §1, §4).
 *
 * Two things netavark 1.4 does not do for us:
 * - subnets: it only avoids the subnets of its own configuration, while other data directories on
 *   the host (another checkout) share the kernel's routes and /run/containers/networks. A /24 is
 *   taken from the pool only when no network of ours has it and no route of the host overlaps it.
 * - bridge names: it names bridges `podman1`, `podman2`... from its own configuration only, so two
 *   data directories would both use `podman1`. The bridge is renamed after the subnet instead
 *   (`podman` + the /24's three octets in hex, 12 characters: unique since the subnet is), still
 *   matching the isolation rules' `podman+`. podman has no option for it in 4.3, so the network's
 *   file is rewritten right after `podman network create`, before any container uses it.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { BackendUnavailableError } from '../errors';
import { withFileLock } from '../local-server';
import { type DataDirLayout } from './config';
import { BACKEND, podmanCall, podmanJson, podmanOk } from './podman';

export const DEFAULT_SUBNET_POOL = '10.213.0.0/16';
/** The label every network the engine makes carries. */
export const NETWORK_LABEL = 'caas.network';

export function ipToNumber(ip: string): number {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) throw new Error(`"${ip}" is not an IPv4 address`);
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
}

export const numberToIp = (n: number) => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');

/** An IPv4 CIDR as its first address and mask; `a.b.c.d` alone is a /32. */
export function parseCidr(cidr: string): { base: number; bits: number } {
  const [ip, bitsText = '32'] = cidr.trim().split('/');
  const bits = Number(bitsText);
  if (!/^\d+$/.test(bitsText) || bits < 0 || bits > 32) throw new Error(`"${cidr}" is not an IPv4 CIDR`);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { base: (ipToNumber(ip) & mask) >>> 0, bits };
}

const maskOf = (bits: number) => (bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0);

/** Whether two IPv4 ranges share an address. */
export function overlaps(a: { base: number; bits: number }, b: { base: number; bits: number }): boolean {
  const mask = maskOf(Math.min(a.bits, b.bits));
  return (a.base & mask) >>> 0 === (b.base & mask) >>> 0;
}

/** The host's IPv4 routes other than the default one (/proc/net/route holds them in little-endian hex). */
async function hostRoutes(): Promise<Array<{ base: number; bits: number }>> {
  const text = await fs.readFile('/proc/net/route', 'utf8').catch(() => '');
  const le = (hex: string) => Buffer.from(hex, 'hex').readUInt32LE(0);
  return text
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 8)
    .map((f) => ({ base: le(f[1]), mask: le(f[7]) }))
    .filter((r) => r.mask !== 0)
    .map((r) => ({ base: r.base, bits: 32 - countZeroBits(r.mask) }));
}

/** The trailing zero bits of a netmask: 8 for 255.255.255.0. */
function countZeroBits(mask: number): number {
  let zeros = 0;
  for (let bit = 0; bit < 32 && ((mask >>> bit) & 1) === 0; bit++) zeros++;
  return zeros;
}

interface PodmanNetwork {
  name: string;
  network_interface?: string;
  subnets?: Array<{ subnet: string; gateway?: string }>;
}

/** The first /24 of `pool` that no network of this data directory has and no route of the host overlaps. */
async function freeSubnet(layout: DataDirLayout, pool: string): Promise<string> {
  const range = parseCidr(pool);
  if (range.bits > 24) throw new Error(`the subnet pool ${pool} is smaller than a /24`);
  const networks = await podmanJson<PodmanNetwork[]>(layout, ['network', 'ls', '--format', 'json']);
  const taken = [...networks.flatMap((n) => (n.subnets ?? []).map((s) => parseCidr(s.subnet))), ...(await hostRoutes())];
  for (let n = range.base; n < range.base + 2 ** (32 - range.bits); n += 256) {
    const candidate = { base: n >>> 0, bits: 24 };
    if (!taken.some((t) => overlaps(t, candidate))) return `${numberToIp(candidate.base)}/24`;
  }
  throw new BackendUnavailableError(BACKEND, `no free /24 left in the subnet pool ${pool}`);
}

/** The bridge's name for a /24: `podman` + its three network octets in hex (`10.213.5.0/24` -> `podman0ad505`). */
export function bridgeName(subnet: string): string {
  const { base } = parseCidr(subnet);
  return `podman${(base >>> 8).toString(16).padStart(6, '0')}`;
}

async function renameBridge(layout: DataDirLayout, network: string, bridge: string): Promise<void> {
  const file = path.join(layout.networks, `${network}.json`);
  const config = JSON.parse(await fs.readFile(file, 'utf8')) as PodmanNetwork;
  if (config.network_interface === bridge) return;
  config.network_interface = bridge;
  const temp = `${file}.tmp`;
  await fs.writeFile(temp, `${JSON.stringify(config, null, 5)}\n`, { mode: 0o644 });
  await fs.rename(temp, file);
}

/** The tenant network `name`, created with a free /24 of `pool` when it does not exist yet. */
export async function ensureNetwork(layout: DataDirLayout, name: string, pool: string): Promise<void> {
  if ((await podmanCall(layout, ['network', 'exists', name])).code === 0) return;
  await withFileLock(path.join(layout.dataDir, 'network.lock'), async () => {
    if ((await podmanCall(layout, ['network', 'exists', name])).code === 0) return;
    const subnet = await freeSubnet(layout, pool);
    await podmanOk(layout, ['network', 'create', '--subnet', subnet, '--label', `${NETWORK_LABEL}=1`, name]);
    await renameBridge(layout, name, bridgeName(subnet));
  });
}
