import { networkInterfaces } from 'node:os';
import { unmapIpv4 } from '../common/ip-address';
import { registeredLocalPorts } from '../common/platform-ports';
import { canonicalIp, type BackendTargetPolicy, type BackendTargetPolicySource } from './lb.rules';

export interface PlatformTargetsOptions {
  /** ALLOW_INSECURE_TARGETS (or its older name WEBHOOK_ALLOW_INSECURE_TARGETS). */
  allowLoopback: boolean;
  /** LB_BIND_ADDRESS, DBAAS_ADDRESS_RANGE (lb.rules.ts BackendTargetPolicy). */
  platformRanges: ReadonlyArray<{ range: string; what: string }>;
  /** The ports the configuration names (common/platform-ports.ts localServicePorts). */
  configuredPorts: readonly number[];
  /**
   * Ports that come and go, read at every check: every DBaaS instance's (from the instance
   * records on this machine). One that cannot be read makes the check refuse every loopback
   * backend rather than let one through.
   */
  dynamicPorts: ReadonlyArray<() => Promise<number[]>>;
}

/** This machine's own addresses other than loopback, in canonical form. */
function hostAddresses(): Set<string> {
  const addresses = new Set<string>();
  for (const list of Object.values(networkInterfaces())) {
    for (const entry of list ?? []) if (!entry.internal) addresses.add(unmapIpv4(canonicalIp(entry.address.split('%')[0])));
  }
  return addresses;
}

/**
 * Where load-balancer backends may point right now (providers/lb.rules.ts backendTargetProblem):
 * one source for the API's check at write time and the HAProxy adapter's check at every rendering,
 * so a port that became the platform's after a backend was stored is left out of the next
 * configuration.
 */
export function platformTargets(options: PlatformTargetsOptions): BackendTargetPolicySource {
  return async (): Promise<BackendTargetPolicy> => {
    const ports = new Set<number>([...options.configuredPorts, ...registeredLocalPorts()]);
    let allowLoopback = options.allowLoopback;
    for (const source of options.dynamicPorts) {
      try {
        for (const port of await source()) ports.add(port);
      } catch {
        allowLoopback = false; // an unknown port could be any instance's
      }
    }
    return { allowLoopback, protectedPorts: ports, hostAddresses: hostAddresses(), platformRanges: options.platformRanges };
  };
}
