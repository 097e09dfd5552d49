/**
 * The iptables rules that keep containers apart (docs/research/caas-podman.md §4). netavark 1.4
 * isolates nothing: every podman network reaches every other one, and containers reach host
 * services bound to 0.0.0.0. Two chains of ours, jumped to first from FORWARD and INPUT:
 *
 * - CAAS-FWD: traffic within one bridge (one tenant's network) passes; between two podman bridges it
 *   is rejected; from a bridge to link-local (cloud metadata, 169.254.0.0/16) and to the platform's
 *   own ranges (`blockedRanges`: the load balancers' and databases' addresses...) it is rejected.
 * - CAAS-IN: from a bridge to the host itself only DNS (aardvark-dns on the gateway) and replies
 *   pass; everything else is rejected, so no host service is reachable from a container. Published
 *   ports are unaffected: the host connects to them (127.0.0.1), containers only answer.
 *
 * Rejected rather than dropped: an app's connection fails at once instead of hanging. The chains
 * are host-wide (all data directories share the kernel's tables); their content is replaced
 * atomically by one iptables-restore, so a re-run never leaves a moment without rules. After a host
 * restart they are gone: the keeper calls `ensureIsolation` before starting containers again.
 * IPv4 only: tenant networks are created without IPv6.
 */
import { BackendUnavailableError } from '../errors';
import { CommandError, requireBinary, run } from '../local-server';
import { parseCidr, numberToIp } from './networks';
import { BACKEND, INSTALL } from './podman';

export const FORWARD_CHAIN = 'CAAS-FWD';
export const INPUT_CHAIN = 'CAAS-IN';
/**
 * The exceptions to CAAS-IN: one rule per host port a service's containers may reach on their
 * network's gateway (the forwarder to the service's database servers). A chain of its own, not in
 * the restore input, so re-applying the isolation rules keeps them.
 */
export const ALLOW_CHAIN = 'CAAS-ALLOW';
const BRIDGES = 'podman+';
const TIMEOUT_MS = 30_000;
const REJECT = ['-j', 'REJECT', '--reject-with', 'icmp-admin-prohibited'];

/** The rules as iptables-restore input; declaring the chains with --noflush empties them first. */
export function isolationRules(blockedRanges: string[]): string {
  const ranges = ['169.254.0.0/16', ...blockedRanges].map((r) => {
    const { base, bits } = parseCidr(r);
    return `${numberToIp(base)}/${bits}`;
  });
  const fwd = (rule: string[]) => ['-A', FORWARD_CHAIN, ...rule].join(' ');
  const inp = (rule: string[]) => ['-A', INPUT_CHAIN, ...rule].join(' ');
  return [
    '*filter',
    `:${FORWARD_CHAIN} - [0:0]`,
    `:${INPUT_CHAIN} - [0:0]`,
    inp(['-i', BRIDGES, '-j', ALLOW_CHAIN]),
    fwd(['-m', 'physdev', '--physdev-is-bridged', '-j', 'RETURN']),
    fwd(['-i', BRIDGES, '-o', BRIDGES, ...REJECT]),
    ...[...new Set(ranges)].map((range) => fwd(['-i', BRIDGES, '-d', range, ...REJECT])),
    inp(['-i', BRIDGES, '-p', 'udp', '--dport', '53', '-j', 'RETURN']),
    inp(['-i', BRIDGES, '-p', 'tcp', '--dport', '53', '-j', 'RETURN']),
    inp(['-i', BRIDGES, '-m', 'conntrack', '--ctstate', 'ESTABLISHED,RELATED', '-j', 'RETURN']),
    inp(['-i', BRIDGES, ...REJECT]),
    'COMMIT',
    '',
  ].join('\n');
}

async function iptables(args: string[], input?: string): Promise<string> {
  const binary = requireBinary(input === undefined ? 'iptables' : 'iptables-restore', INSTALL);
  const feed =
    input === undefined
      ? undefined
      : (async function* () {
          yield Buffer.from(input);
        })();
  try {
    return (await run(binary, args, { timeoutMs: TIMEOUT_MS, input: feed })).stdout;
  } catch (err) {
    throw new BackendUnavailableError(BACKEND, `${binary} ${args.join(' ')}: ${err instanceof CommandError ? err.detail : String(err)}`);
  }
}

/** The positions (1-based) of the rules in `chain` that jump to `target`. */
async function jumpPositions(chain: string, target: string): Promise<number[]> {
  const rules = (await iptables(['-w', '-S', chain])).split('\n').filter((l) => l.startsWith('-A '));
  return rules.flatMap((rule, i) => (rule === `-A ${chain} -j ${target}` ? [i + 1] : []));
}

/** Makes `chain`'s first rule the jump to `target`, and the only one (netavark and others insert rules too). */
async function jumpFirst(chain: string, target: string): Promise<void> {
  const positions = await jumpPositions(chain, target);
  if (positions.length === 1 && positions[0] === 1) return;
  await iptables(['-w', '-I', chain, '1', '-j', target]);
  for (const position of positions.reverse()) await iptables(['-w', '-D', chain, String(position + 1)]);
}

/** Installs (or updates) the chains and their jumps; idempotent. */
export async function ensureIsolationRules(blockedRanges: string[]): Promise<void> {
  if (!(await chainExists(ALLOW_CHAIN))) await iptables(['-w', '-N', ALLOW_CHAIN]);
  await iptables(['-w', '--noflush'], isolationRules(blockedRanges));
  await jumpFirst('FORWARD', FORWARD_CHAIN);
  await jumpFirst('INPUT', INPUT_CHAIN);
}

async function chainExists(chain: string): Promise<boolean> {
  return iptables(['-w', '-S', chain]).then(
    () => true,
    () => false,
  );
}

/** Lets the containers of `bridge` open TCP connections to `ip:port` of this host (ALLOW_CHAIN); idempotent. */
export async function allowHostPort(bridge: string, ip: string, port: number): Promise<void> {
  if (!/^[a-z0-9]{1,15}$/.test(bridge) || !/^\d{1,3}(\.\d{1,3}){3}$/.test(ip) || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`not an allow rule: ${bridge} ${ip}:${port}`);
  }
  const rule = ['-i', bridge, '-d', `${ip}/32`, '-p', 'tcp', '--dport', String(port), '-j', 'ACCEPT'];
  const present = await iptables(['-w', '-C', ALLOW_CHAIN, ...rule]).then(
    () => true,
    () => false,
  );
  if (!present) await iptables(['-w', '-A', ALLOW_CHAIN, ...rule]);
}

/** Removes the jumps and the chains (an uninstall, or a test's clean-up); absent is fine. */
export async function removeIsolationRules(): Promise<void> {
  for (const [chain, target] of [
    ['FORWARD', FORWARD_CHAIN],
    ['INPUT', INPUT_CHAIN],
  ]) {
    for (const position of (await jumpPositions(chain, target)).reverse()) await iptables(['-w', '-D', chain, String(position)]);
    const exists = await iptables(['-w', '-S', target]).then(
      () => true,
      () => false,
    );
    if (exists) {
      await iptables(['-w', '-F', target]);
      await iptables(['-w', '-X', target]);
    }
  }
  if (await chainExists(ALLOW_CHAIN)) {
    await iptables(['-w', '-F', ALLOW_CHAIN]);
    await iptables(['-w', '-X', ALLOW_CHAIN]);
  }
}
