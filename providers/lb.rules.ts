import { BlockList, isIP } from 'node:net';
import { classifyAddress, embeddedV4, isIpv4Compatible, unmapIpv4 } from '../common/ip-address';
import { LB_ALGORITHMS, LB_PROTOCOLS, type LbBackendTarget, type LbListener } from './lb.provider';

/** A field at fault, in the API's dot notation (`listeners.1.port`). */
export interface FieldError {
  param: string;
  message: string;
}

/**
 * The rules of a load balancer's listener set (DECISIONS "Load balancers"): the backend's own
 * contract, so both providers check them (the simulator and HAProxy refuse the same sets with the
 * same `param`), and the API checks a body with them before anything reaches the backend.
 *
 * Everything here ends up in an HAProxy configuration file, so the rules are also what keeps a
 * customer's value from being read as configuration (no spaces, `#` or quotes in a path).
 */
export const LISTENER_NAME_RE = /^[a-z0-9-]{1,32}$/;
/** An absolute request path of RFC 3986 characters, without `#` (a comment in HAProxy's syntax), spaces or quotes. */
export const HEALTH_CHECK_PATH_RE = /^\/[A-Za-z0-9\-._~!$&()*+,;=:@%/?]{0,254}$/;
export const LIMITS = {
  /** A balancer is one process on one address: more listeners than this is a sign of a mistake. */
  listeners: 50,
  backendsPerListener: 100,
  /** HAProxy's own range for `weight`. */
  weight: { min: 0, max: 256 },
  intervalSeconds: { min: 1, max: 3600 },
} as const;

const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v);
const isPort = (v: unknown): v is number => isInt(v) && v >= 1 && v <= 65535;

/** `::1` and `0:0:0:0:0:0:0:1` are one backend: IPv6 addresses compare (and are stored) in their short form. */
export function canonicalIp(ip: string): string {
  if (isIP(ip) !== 6 || ip.includes('%')) return ip;
  return new URL(`http://[${ip}]/`).hostname.slice(1, -1);
}

/** Why `ip` cannot be a backend by its form, or null when it can (where it points: backendTargetProblem). */
export function backendIpProblem(ip: unknown): string | null {
  if (typeof ip !== 'string') return 'must be a string';
  const version = isIP(ip);
  if (version === 0 || ip.includes('%')) return 'must be an IPv4 or IPv6 address (no host names, no zone id)';
  const canonical = canonicalIp(ip);
  if (canonical === '0.0.0.0' || canonical === '::' || canonical === '255.255.255.255') return 'must be the address of a host';
  if (version === 4 && Number(canonical.split('.')[0]) >= 224) return 'must be the address of a host (not multicast or reserved)';
  if (version === 6 && canonical.startsWith('ff')) return 'must be the address of a host (not multicast)';
  return null;
}

/** The problems of one backend, params under `prefix` (`listeners.0.backends.1`, or `` for a POST body). */
export function backendErrors(backend: Partial<LbBackendTarget>, prefix: string): FieldError[] {
  const at = (field: string) => (prefix ? `${prefix}.${field}` : field);
  const errors: FieldError[] = [];
  const ipProblem = backendIpProblem(backend.ip);
  if (ipProblem) errors.push({ param: at('ip'), message: ipProblem });
  if (!isPort(backend.port)) errors.push({ param: at('port'), message: 'must be an integer from 1 to 65535' });
  if (!isInt(backend.weight) || backend.weight < LIMITS.weight.min || backend.weight > LIMITS.weight.max) {
    errors.push({ param: at('weight'), message: `must be an integer from ${LIMITS.weight.min} to ${LIMITS.weight.max}` });
  }
  return errors;
}

export interface ListenerRuleOptions {
  /** The balancer's own address: a backend there on one of its listener ports would loop. */
  address?: string;
}

/** Every problem of a complete listener set, params in dot notation under `listeners`. */
export function listenerErrors(listeners: readonly LbListener[], options: ListenerRuleOptions = {}): FieldError[] {
  if (!Array.isArray(listeners)) return [{ param: 'listeners', message: 'must be an array' }];
  if (listeners.length > LIMITS.listeners) return [{ param: 'listeners', message: `at most ${LIMITS.listeners} listeners per load balancer` }];
  const errors: FieldError[] = [];
  const names = new Map<string, number>();
  const ports = new Map<number, number>();
  listeners.forEach((listener, i) => {
    const at = (field: string) => `listeners.${i}.${field}`;
    if (typeof listener !== 'object' || listener === null) {
      errors.push({ param: `listeners.${i}`, message: 'must be a listener object' });
      return;
    }
    if (typeof listener.name !== 'string' || !LISTENER_NAME_RE.test(listener.name)) {
      errors.push({ param: at('name'), message: 'must be 1 to 32 lowercase letters, digits or hyphens' });
    } else if (names.has(listener.name)) {
      errors.push({ param: at('name'), message: `is already the name of listeners.${names.get(listener.name)}` });
    } else names.set(listener.name, i);
    if (!(LB_PROTOCOLS as readonly string[]).includes(listener.protocol))
      errors.push({ param: at('protocol'), message: `must be one of ${LB_PROTOCOLS.join(', ')}` });
    if (!(LB_ALGORITHMS as readonly string[]).includes(listener.algorithm))
      errors.push({ param: at('algorithm'), message: `must be one of ${LB_ALGORITHMS.join(', ')}` });
    if (!isPort(listener.port)) errors.push({ param: at('port'), message: 'must be an integer from 1 to 65535' });
    else if (ports.has(listener.port))
      errors.push({ param: at('port'), message: `is already the port of listeners.${ports.get(listener.port)}; ports are unique per load balancer` });
    else ports.set(listener.port, i);
    errors.push(...healthCheckErrors(listener, i));
    const backends = listener.backends;
    if (!Array.isArray(backends)) {
      errors.push({ param: at('backends'), message: 'must be an array' });
      return;
    }
    if (backends.length === 0) errors.push({ param: at('backends'), message: 'a listener needs at least one backend' });
    if (backends.length > LIMITS.backendsPerListener)
      errors.push({ param: at('backends'), message: `at most ${LIMITS.backendsPerListener} backends per listener` });
    const seen = new Map<string, number>();
    backends.forEach((backend, j) => {
      const prefix = at(`backends.${j}`);
      const own = backendErrors(backend ?? {}, prefix);
      errors.push(...own);
      if (own.length > 0) return;
      const key = `${canonicalIp(backend.ip)}|${backend.port}`;
      if (seen.has(key))
        errors.push({ param: `${prefix}.ip`, message: `${backend.ip} port ${backend.port} is already backends.${seen.get(key)} of this listener` });
      else seen.set(key, j);
    });
  });
  if (options.address) {
    const own = canonicalIp(options.address);
    listeners.forEach((listener, i) => {
      const backends: LbBackendTarget[] = Array.isArray(listener?.backends) ? listener.backends : [];
      backends.forEach((backend, j) => {
        if (backend && typeof backend.ip === 'string' && canonicalIp(backend.ip) === own && ports.has(backend.port)) {
          errors.push({ param: `listeners.${i}.backends.${j}.ip`, message: 'points at a listener of this load balancer itself' });
        }
      });
    });
  }
  return errors;
}

/**
 * Where backends may point (docs/lb.md "Backend addresses"). The listener rules above judge the
 * form of an address; this judges what it reaches, which depends on the platform around the
 * balancer: its ports on this machine change (a new DBaaS instance), so the policy is a snapshot
 * taken when a check runs (providers/lb.targets.ts builds it).
 */
export interface BackendTargetPolicy {
  /** ALLOW_INSECURE_TARGETS (local runs, tests): loopback backends are allowed, except on `protectedPorts`. */
  allowLoopback: boolean;
  /** Ports of the platform's own servers on this machine: API, Temporal, PowerDNS, PostgreSQL, every DBaaS instance. */
  protectedPorts: ReadonlySet<number>;
  /** This machine's own non-loopback addresses (canonical form): they reach the same servers as loopback. */
  hostAddresses: ReadonlySet<string>;
  /**
   * Addresses that belong to the platform whatever the port: where its balancers listen
   * (LB_BIND_ADDRESS) and where its database instances listen (DBAAS_ADDRESS_RANGE). One IPv4
   * address or range each, with what it is for the message.
   */
  platformRanges: ReadonlyArray<{ range: string; what: string }>;
}

/** The current policy; called at every write and every rendering of a balancer's configuration. */
export type BackendTargetPolicySource = () => Promise<BackendTargetPolicy>;

/** Ranges parsed once: every check of every backend asks. */
const parsedRanges = new Map<string, BlockList>();
function inRange(ipv4: string, range: string): boolean {
  let block = parsedRanges.get(range);
  if (!block) {
    block = new BlockList();
    const [base, prefix] = range.split('/');
    if (isIP(base) === 4) {
      if (prefix === undefined) block.addAddress(base, 'ipv4');
      else block.addSubnet(base, Number(prefix), 'ipv4');
    }
    parsedRanges.set(range, block);
  }
  return block.check(ipv4, 'ipv4');
}

/**
 * Why a backend of valid form may not be served, or null. Private networks are allowed (a
 * balancer's backends are usually the customer's servers on one); what reaches this machine, its
 * link or the platform's own servers is not:
 * - link-local (169.254.0.0/16 with the cloud metadata service, fe80::/10), unspecified, multicast
 *   and IPv4-compatible IPv6 addresses: never;
 * - loopback and this machine's own addresses: only with ALLOW_INSECURE_TARGETS, and never on a
 *   port of the platform's own servers;
 * - the platform's own address ranges, any port: its balancers (LB_BIND_ADDRESS: balancers cannot
 *   be chained into loops, nor reach another tenant's listeners from inside) and its database
 *   instances (DBAAS_ADDRESS_RANGE).
 * An IPv4-mapped IPv6 address (`::ffff:169.254.169.254`, `::ffff:7f00:1`) is judged as the IPv4
 * address it connects to.
 */
export function backendTargetProblem(ip: string, port: number, policy: BackendTargetPolicy): { field: 'ip' | 'port'; message: string } | null {
  const reached = unmapIpv4(canonicalIp(ip));
  const shown = reached === canonicalIp(ip) ? ip : `${ip} (${reached})`;
  const cls = classifyAddress(reached);
  if (cls === 'link-local')
    return { field: 'ip', message: `${shown} is a link-local address (the cloud metadata service, this host's own link); backends cannot use it` };
  if (cls === 'unspecified' || cls === 'multicast') return { field: 'ip', message: `${shown} is not the address of a host` };
  if (isIpv4Compatible(reached)) return { field: 'ip', message: `${ip} is an IPv4-compatible IPv6 address (deprecated); give the IPv4 address` };
  // NAT64 and 6to4 forms reach the IPv4 address they carry (through a gateway): judged as it.
  const carried = embeddedV4(reached) ?? reached;
  const platform = isIP(carried) === 4 ? policy.platformRanges.find((r) => inRange(carried, r.range)) : undefined;
  if (platform) return { field: 'ip', message: `${shown} belongs to ${platform.what}; backends cannot reach it` };
  if (cls === 'loopback' || policy.hostAddresses.has(reached) || policy.hostAddresses.has(carried)) {
    if (!policy.allowLoopback)
      return {
        field: 'ip',
        message: `${shown} is ${cls === 'loopback' ? 'a loopback address' : "an address of the balancer's own host"}; backends must be your servers`,
      };
    if (policy.protectedPorts.has(port))
      return { field: 'port', message: `port ${port} on this machine belongs to the platform's own servers; backends cannot reach it` };
  }
  return null;
}

/**
 * The backends of a set the policy refuses, params in dot notation (`listeners.0.backends.2.port`).
 * `include` limits the check (a POST checks only the backend it adds). Backends whose form is
 * invalid are left to listenerErrors.
 */
export function backendTargetErrors(
  listeners: readonly LbListener[],
  policy: BackendTargetPolicy,
  include: (listener: number, backend: number) => boolean = () => true,
): FieldError[] {
  const errors: FieldError[] = [];
  listeners.forEach((listener, i) => {
    if (!Array.isArray(listener?.backends)) return;
    listener.backends.forEach((backend, j) => {
      if (!include(i, j) || backendIpProblem(backend?.ip) || !isPort(backend?.port)) return;
      const problem = backendTargetProblem(backend.ip, backend.port, policy);
      if (problem) errors.push({ param: `listeners.${i}.backends.${j}.${problem.field}`, message: problem.message });
    });
  });
  return errors;
}

function healthCheckErrors(listener: LbListener, i: number): FieldError[] {
  const check = listener.health_check;
  const at = `listeners.${i}.health_check`;
  if (check === null) return [];
  if (typeof check !== 'object' || check === undefined) return [{ param: at, message: 'must be an object or null' }];
  const errors: FieldError[] = [];
  const { min, max } = LIMITS.intervalSeconds;
  if (!isInt(check.interval_seconds) || check.interval_seconds < min || check.interval_seconds > max) {
    errors.push({ param: `${at}.interval_seconds`, message: `must be an integer from ${min} to ${max}` });
  }
  if (check.path !== undefined && check.path !== null) {
    if (listener.protocol === 'tcp')
      errors.push({ param: `${at}.path`, message: 'only http listeners check a path; tcp listeners check that the port accepts connections' });
    else if (typeof check.path !== 'string' || !HEALTH_CHECK_PATH_RE.test(check.path)) {
      errors.push({ param: `${at}.path`, message: 'must be an absolute path such as /healthz (URL characters only, no spaces or #)' });
    }
  }
  return errors;
}

/** The same set in stored form: IPv6 addresses in their short form, an http check's path defaulting to `/`. */
export function normalizeListeners(listeners: readonly LbListener[]): LbListener[] {
  return listeners.map((l) => ({
    name: l.name,
    protocol: l.protocol,
    port: l.port,
    algorithm: l.algorithm,
    health_check:
      l.health_check === null
        ? null
        : l.protocol === 'http'
          ? { path: l.health_check.path ?? '/', interval_seconds: l.health_check.interval_seconds }
          : { interval_seconds: l.health_check.interval_seconds },
    backends: l.backends.map((b) => ({ ip: canonicalIp(b.ip), port: b.port, weight: b.weight })),
  }));
}
