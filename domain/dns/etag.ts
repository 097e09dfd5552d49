/**
 * The ETag of a zone's records: the server's fingerprint of its RRsets (providers/dns.provider.ts
 * `fingerprint`), quoted, strong. One value per zone, on the records list, on a single RRset and on
 * every write's answer, so any ETag the customer holds for the zone can guard any write to it.
 */
export function etagOf(fingerprint: string): string {
  return `"${fingerprint}"`;
}

/**
 * Whether an `If-Match` header allows the write (RFC 9110 13.1.1): absent -> yes; `*` -> yes (the
 * zone exists); else a comma-separated list of entity tags compared strongly, so a weak `W/"..."`
 * tag never matches.
 */
export function ifMatchAllows(header: string | undefined, current: string): boolean {
  if (header === undefined) return true;
  const value = header.trim();
  if (value === '*') return true;
  const tags = value.match(/(W\/)?"[^"]*"/g) ?? [];
  return tags.some((tag) => !tag.startsWith('W/') && tag === current);
}
