import { DomainError, conflict, validationFailed } from '../errors';
import { RRSET_TYPES, type DnsRRset, type RRsetType } from '../../providers/dns.provider';
import { absoluteName, relativeName } from './names';
import { canonicalValue } from './values';

/**
 * An RRset as the customer writes it, checked against its zone: the absolute owner name, the type,
 * the TTL (60..86400, default 3600) and the values in canonical form. Errors name the field relative
 * to the RRset (`name`, `type`, `ttl`, `values.N`); withParamPrefix puts a PATCH element's index in front.
 */
export const TTL_MIN = 60;
export const TTL_MAX = 86_400;
export const TTL_DEFAULT = 3600;
export const MAX_VALUES = 100;

export interface RRsetChange {
  /** Absolute owner name. */
  fqdn: string;
  /** Relative to the zone, `@` for the apex. */
  name: string;
  type: RRsetType;
  ttl: number;
  /** Canonical values; empty means "delete the RRset" (PATCH only). */
  values: string[];
}

/** `a`, `Mx` -> `A`, `MX`; anything else (SOA included) is refused at `param`. */
export function parseRRsetType(input: unknown, param = 'type'): RRsetType {
  const upper = typeof input === 'string' ? input.trim().toUpperCase() : '';
  if (!(RRSET_TYPES as readonly string[]).includes(upper)) {
    throw validationFailed([{ param, message: `the type must be one of ${RRSET_TYPES.join(', ')}${typeof input === 'string' ? `, not "${input}"` : ''}.` }]);
  }
  return upper as RRsetType;
}

export function parseTtl(input: unknown, param = 'ttl'): number {
  if (input === undefined || input === null) return TTL_DEFAULT;
  if (typeof input !== 'number' || !Number.isInteger(input) || input < TTL_MIN || input > TTL_MAX) {
    throw validationFailed([{ param, message: `the TTL is an integer number of seconds from ${TTL_MIN} to ${TTL_MAX}.` }]);
  }
  return input;
}

/** Canonical values, in the order given; duplicates (after canonical form) are refused. */
export function parseValues(type: RRsetType, input: unknown, { allowEmpty }: { allowEmpty: boolean }): string[] {
  if (!Array.isArray(input)) throw validationFailed([{ param: 'values', message: 'values is an array of strings.' }]);
  if (input.length === 0 && !allowEmpty) {
    throw validationFailed([{ param: 'values', message: 'values needs at least one value (DELETE removes an RRset).' }]);
  }
  if (input.length > MAX_VALUES) throw validationFailed([{ param: 'values', message: `an RRset holds at most ${MAX_VALUES} values.` }]);
  const seen = new Map<string, number>();
  return input.map((raw, i) => {
    const value = canonicalValue(type, raw, `values.${i}`);
    const first = seen.get(value);
    if (first !== undefined) throw validationFailed([{ param: `values.${i}`, message: `the same value as values.${first}.` }]);
    seen.set(value, i);
    if (type === 'CNAME' && i > 0) throw validationFailed([{ param: `values.${i}`, message: 'a CNAME has exactly one value.' }]);
    return value;
  });
}

export function parseRRsetChange(
  zone: string,
  input: { name: unknown; type: unknown; ttl?: unknown; values: unknown },
  { allowEmpty }: { allowEmpty: boolean },
): RRsetChange {
  if (typeof input.name !== 'string') throw validationFailed([{ param: 'name', message: 'name is a string (`@` for the apex).' }]);
  const fqdn = absoluteName(input.name, zone, 'name');
  const type = parseRRsetType(input.type);
  const ttl = parseTtl(input.ttl);
  const values = parseValues(type, input.values, { allowEmpty });
  if (type === 'CNAME' && fqdn === zone && values.length > 0) {
    throw conflict(`The apex of ${zone} holds its SOA and NS records, so it cannot have a CNAME.`);
  }
  return { fqdn, name: relativeName(fqdn, zone), type, ttl, values };
}

/**
 * A CNAME owns its name alone (RFC 1034 3.6.2): writing a CNAME where other types exist, or another
 * type where a CNAME exists, is a 409. `existing` are the zone's RRsets as the server has them.
 */
export function assertCnameExclusive(existing: readonly DnsRRset[], zone: string, change: Pick<RRsetChange, 'fqdn' | 'type' | 'values'>): void {
  if (change.values.length === 0) return;
  const others = existing.filter((r) => r.name === change.fqdn && r.type !== change.type);
  if (others.length === 0) return;
  const name = relativeName(change.fqdn, zone);
  if (change.type === 'CNAME') {
    throw conflict(`"${name}" already has ${others.map((r) => r.type).join(', ')} records; a CNAME cannot share its name with other types.`);
  }
  if (others.some((r) => r.type === 'CNAME')) {
    throw conflict(`"${name}" is a CNAME; other types cannot share its name. Delete the CNAME first.`);
  }
}

/** The same error with its `param` (and per-field errors) under `prefix`: `values.0` -> `records.3.values.0`. */
export function withParamPrefix(err: unknown, prefix: string): unknown {
  if (!(err instanceof DomainError)) return err;
  const at = (p: string | null) => (p ? `${prefix}.${p}` : prefix);
  const extra = { ...err.extra };
  if (Array.isArray(extra.errors)) {
    extra.errors = (extra.errors as Array<{ param: string; message: string }>).map((e) => ({ ...e, param: at(e.param) }));
  }
  const message =
    err.code === 'validation_failed' && err.param && err.message.startsWith(`${err.param}:`)
      ? `${at(err.param)}${err.message.slice(err.param.length)}`
      : err.message;
  return new DomainError(err.status, err.type, err.code, message, at(err.param), extra);
}
