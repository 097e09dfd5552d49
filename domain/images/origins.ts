import { domainToASCII } from 'node:url';

/**
 * The origin allowlist (DECISIONS "Images"): a pattern is a hostname (lower-cased, no final dot) or
 * `*.` followed by two or more labels. `*.a.b` matches every name under `a.b`, at any depth, and not
 * `a.b` itself. Matching ignores the source URL's port. The list is fail-closed: empty serves nothing.
 */
const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

export class OriginPatternError extends Error {}

/** The canonical form of a pattern as the API stores it, or OriginPatternError with what is wrong. */
export function normalizePattern(input: string): string {
  const raw = input.trim();
  if (/[/:?#@\\\s]/.test(raw)) throw new OriginPatternError('must be a host name or *. and a domain, without scheme, port or path');
  const wildcard = raw.startsWith('*.');
  const rest = (wildcard ? raw.slice(2) : raw).replace(/\.$/, '').toLowerCase();
  if (rest.includes('*')) throw new OriginPatternError('a wildcard may only be the first label, as in *.example.com');
  const ascii = domainToASCII(rest);
  if (!ascii || ascii.length > 253) throw new OriginPatternError('is not a valid host name');
  const labels = ascii.split('.');
  if (!labels.every((l) => LABEL.test(l))) throw new OriginPatternError('is not a valid host name');
  if (wildcard && labels.length < 2) throw new OriginPatternError('a wildcard needs at least two labels after it, as in *.example.com');
  if (/^\d+$/.test(labels[labels.length - 1])) throw new OriginPatternError('must be a host name, not an IP address');
  return wildcard ? `*.${ascii}` : ascii;
}

/** The host of a source URL as patterns are matched against (lower-case, no final dot, IDN in ASCII); null when it has none. */
export function sourceHost(url: URL): string | null {
  const host = url.hostname.replace(/\.$/, '').toLowerCase();
  return host ? domainToASCII(host) || host : null;
}

/** Whether `host` is allowed by `pattern` (both canonical). */
export function patternMatches(pattern: string, host: string): boolean {
  if (pattern.startsWith('*.')) {
    const suffix = pattern.slice(1); // ".a.b"
    return host.endsWith(suffix) && host.length > suffix.length;
  }
  return host === pattern;
}

/** Whether any pattern of the allowlist allows `host` (an empty list allows nothing). */
export function allowedBy(patterns: readonly string[], host: string): boolean {
  return patterns.some((p) => patternMatches(p, host));
}
