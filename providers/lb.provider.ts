/**
 * What a load-balancer backend can do for the `lb` family: one balancer per lb service, addressed
 * by the service's numeric id, holding a complete set of listeners that is only ever replaced as a
 * whole (all or nothing). The real adapter runs one HAProxy process per balancer
 * (providers/haproxy/); the PostgreSQL-backed simulator (providers/simulator/lb.simulator.ts)
 * answers the same way without moving traffic.
 *
 * Errors (providers/errors.ts only):
 * - BackendRefusedError('lb', message, 'validation_failed', param): the listener set is invalid or
 *   cannot be applied (bad address, port clash, port in use, listener without backends). `param`
 *   names the field in the listener document (`listeners.1.port`, `listeners.0.backends.2.ip`).
 *   Nothing was applied: the running balancer and its configuration are as before.
 * - BackendGoneError('lb', ...): the service has no balancer (never created, or destroyed).
 * - BackendUnavailableError('lb'): the backend does not answer.
 */
import { hostAddress, hostCount, ipv4ToInt, MAX_PREFIX, MIN_PREFIX, parseIpv4Range } from '../common/ipv4-range';

export const LB_PROTOCOLS = ['http', 'tcp'] as const;
export type LbProtocol = (typeof LB_PROTOCOLS)[number];
export const LB_ALGORITHMS = ['roundrobin', 'leastconn', 'source'] as const;
export type LbAlgorithm = (typeof LB_ALGORITHMS)[number];

// The listener document keeps DECISIONS' snake_case field names on purpose: it is stored, applied
// and returned as one document, and a refusal's `param` must name the field the customer sent.
export interface LbBackendTarget {
  ip: string;
  port: number;
  /** Share of the listener's traffic relative to its other backends; 0 takes it out of rotation. */
  weight: number;
}

export interface LbHealthCheck {
  /** HTTP listeners only: the path asked with GET; a 2xx or 3xx answer is healthy. */
  path?: string;
  interval_seconds: number;
}

export interface LbListener {
  name: string;
  protocol: LbProtocol;
  port: number;
  algorithm: LbAlgorithm;
  health_check: LbHealthCheck | null;
  backends: LbBackendTarget[];
}

export type BalancerState = 'running' | 'stopped';

export interface BalancerStatus {
  serviceId: number;
  /** Where the listeners accept traffic. */
  address: string;
  state: BalancerState;
  /** Listeners of the applied configuration. */
  listenerCount: number;
  /** Running and no listener is down; null when the balancer cannot tell (stats not answering). */
  healthy: boolean | null;
}

export type Health = 'up' | 'down' | 'unknown';

export interface ListenerStats {
  name: string;
  state: Health;
  currentConnections: number;
  /** Since the balancer last started (configuration changes keep counting). */
  bytesIn: number;
  bytesOut: number;
  backends: Array<{ ip: string; port: number; health: Health }>;
}

export interface LbStats {
  listeners: ListenerStats[];
}

export interface LbProvider {
  /**
   * Creates the balancer of a service and starts it with `listeners` (none by default). Idempotent:
   * a second call returns the existing balancer (started if it was stopped), its listeners untouched.
   */
  create(serviceId: number, listeners?: LbListener[]): Promise<BalancerStatus>;
  /** Starts a stopped balancer with its last applied configuration; a running one is left as is. */
  start(serviceId: number): Promise<BalancerStatus>;
  /**
   * Replaces the whole listener set, all or nothing: checked, then applied without dropping
   * connections. `[]` closes every listener. Resolves once the new set serves traffic.
   */
  apply(serviceId: number, listeners: LbListener[]): Promise<LbListener[]>;
  /** The applied listener set. */
  listeners(serviceId: number): Promise<LbListener[]>;
  status(serviceId: number): Promise<BalancerStatus>;
  /** Point-in-time counters; a balancer that does not answer shows its listeners `unknown` with zero counters. */
  stats(serviceId: number): Promise<LbStats>;
  /** Stops the balancer (its configuration is kept for `start`). Stopping a stopped one is fine. */
  stop(serviceId: number): Promise<void>;
  /** Stops the balancer and forgets it. Destroying an unknown balancer is fine. */
  destroy(serviceId: number): Promise<void>;
}

/**
 * The address a service's balancer binds: LB_BIND_ADDRESS is one IPv4 address (every balancer
 * shares it, so their ports must differ) or an IPv4 range in CIDR notation, in which each balancer
 * gets an address of its own derived from its service id (so two balancers can both use port 80).
 * The network and broadcast addresses of a range are never used.
 */
export function balancerAddress(bind: string, serviceId: number): string {
  if (!bind.includes('/')) {
    if (ipv4ToInt(bind) === null) throw new Error(`LB_BIND_ADDRESS: ${bind} is not an IPv4 address or range`);
    return bind;
  }
  const range = parseIpv4Range(bind);
  if (!range) throw new Error(`LB_BIND_ADDRESS: ${bind} is not an IPv4 range with a prefix of ${MIN_PREFIX}..${MAX_PREFIX}`);
  return hostAddress(range, serviceId % hostCount(range)) as string;
}
