import { BlockList, isIP } from 'node:net';

/**
 * What kind of address an IP literal is, for every check of an address a customer chose: webhook
 * targets (infra/webhook-targets.ts) and load-balancer backends (providers/lb.rules.ts). Pure, so
 * the providers can use it too. An IPv6 address that carries an IPv4 address (IPv4-mapped
 * `::ffff:a.b.c.d` in any spelling, NAT64, 6to4) is classified as the IPv4 address it reaches.
 */
export type AddressClass = 'public' | 'loopback' | 'private' | 'link-local' | 'unique-local' | 'cgnat' | 'multicast' | 'unspecified' | 'reserved';

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

/** IPv4-compatible IPv6 (`::a.b.c.d`, deprecated): classified `reserved`; see isIpv4Compatible. */
const IPV4_COMPATIBLE = ranges('ipv6', [['::', 96]]);

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
export function embeddedV4(address: string): string | null {
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

/**
 * The address a connection to `address` actually reaches on this host: an IPv4-mapped IPv6 address
 * (`::ffff:127.0.0.1`, `::ffff:7f00:1`, `0:0:0:0:0:ffff:7f00:1`) is its IPv4 address, since a
 * dual-stack socket connects to it over IPv4; anything else is returned as given.
 */
export function unmapIpv4(address: string): string {
  if (isIP(address) !== 6) return address;
  const g = ipv6Groups(address);
  return g && g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff ? v4FromHex(g[6], g[7]) : address;
}

/** `::a.b.c.d` other than `::` and `::1`: deprecated, and tunnelled to the IPv4 address where a host still does that. */
export function isIpv4Compatible(address: string): boolean {
  const bare = address.split('%')[0];
  return isIP(bare) === 6 && IPV4_COMPATIBLE.check(bare, 'ipv6') && !V6[0][1].check(bare, 'ipv6') && !V6[1][1].check(bare, 'ipv6');
}

/** Classifies one IP address literal. Anything that is not an IP literal is `reserved`. */
export function classifyAddress(address: string): AddressClass {
  const family = isIP(address.split('%')[0]);
  if (family === 4) {
    // `127.0.0.1%eth0` is no IPv4 literal a socket takes; never let it pass as public.
    if (address.includes('%')) return 'reserved';
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
