import { isIP } from 'node:net';
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

/** Why `ip` cannot be a backend, or null when it can. */
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
