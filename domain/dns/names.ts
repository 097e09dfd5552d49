import { validationFailed } from '../errors';
import { MAX_NAME_LENGTH, OWNER_LABEL, normalizeTarget as targetOf, stripDot, toAscii } from '../../providers/dns.values';
import { asValidationError } from './values';

/**
 * Zone and record names. Inside the control plane a name is absolute, lower case, ASCII (IDN as
 * punycode) and has no trailing dot: `example.org`, `www.example.org`. Customers write record names
 * relative to their zone (`www`, `@` for the apex); an absolute name inside the zone is accepted too.
 */
export const APEX = '@';
const LDH_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * A zone name as the control plane keeps it: `Bücher.Example.` -> `xn--bcher-kva.example`. At least
 * two labels of letters, digits and inner hyphens (a zone is a registrable domain or below it).
 */
export function normalizeZoneName(input: string, param = 'zone'): string {
  const name = stripDot(toAscii(input));
  const labels = name.split('.');
  if (!name || labels.length < 2 || name.length > MAX_NAME_LENGTH || !labels.every((l) => LDH_LABEL.test(l))) {
    throw validationFailed([{ param, message: `"${input}" is not a valid zone name (such as example.org).` }]);
  }
  if (/^[0-9]+$/.test(labels[labels.length - 1])) {
    throw validationFailed([{ param, message: `"${input}" is not a valid zone name: the last label cannot be numeric.` }]);
  }
  return name;
}

/** The zone name, or null when the text cannot be one (a path parameter that names no zone is a 404, not a 400). */
export function parseZoneName(input: string): string | null {
  try {
    return normalizeZoneName(input);
  } catch {
    return null;
  }
}

function isOwnerName(name: string): boolean {
  if (name.length > MAX_NAME_LENGTH) return false;
  const labels = name.split('.');
  return labels.every((label, i) => (label === '*' ? i === 0 : OWNER_LABEL.test(label)));
}

/**
 * A record name as the customer writes it -> the absolute owner name. `@` is the apex; `www` is
 * relative to the zone; `www.example.org` and `www.example.org.` are absolute and must lie in the zone;
 * any other name ending with a dot is outside it and refused. `*` may start a name (wildcard).
 */
export function absoluteName(input: string, zone: string, param = 'name'): string {
  const raw = input.trim();
  if (raw === APEX || raw === `${APEX}.`) return zone;
  const ascii = toAscii(raw);
  const fail = (why: string) => validationFailed([{ param, message: `"${input}" ${why}` }]);
  if (!ascii || ascii === '.' || ascii.includes('..') || ascii.startsWith('.')) throw fail('is not a valid record name.');
  let fqdn: string;
  if (ascii.endsWith('.')) {
    fqdn = stripDot(ascii);
    if (fqdn !== zone && !fqdn.endsWith(`.${zone}`)) throw fail(`is outside the zone ${zone}.`);
  } else if (ascii === zone || ascii.endsWith(`.${zone}`)) {
    fqdn = ascii;
  } else {
    fqdn = `${ascii}.${zone}`;
  }
  if (!isOwnerName(fqdn)) {
    throw fail(
      fqdn.length > MAX_NAME_LENGTH
        ? `is too long: a name has at most ${MAX_NAME_LENGTH} characters with the zone.`
        : 'is not a valid record name (labels of letters, digits, "-" and "_"; "*" only as the first label).',
    );
  }
  return fqdn;
}

/** The owner name relative to the zone, `@` for the apex. */
export function relativeName(fqdn: string, zone: string): string {
  if (fqdn === zone) return APEX;
  return fqdn.endsWith(`.${zone}`) ? fqdn.slice(0, -(zone.length + 1)) : fqdn;
}

/**
 * A host name inside record data (CNAME, NS, PTR, MX and SRV targets), always absolute: a trailing
 * dot is optional on input and present in the result (`Mail.Example.org` -> `mail.example.org.`).
 * `allowRoot` admits `.` (null MX, "no service" SRV). The rule is the DNS server's
 * (providers/dns.values.ts); a name it refuses is `400 validation_failed` at `param`.
 */
export function normalizeTarget(input: string, param: string, allowRoot = false): string {
  return asValidationError(() => targetOf(input, param, allowRoot));
}
