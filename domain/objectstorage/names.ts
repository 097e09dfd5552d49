import { isIP } from 'node:net';

/**
 * Bucket names (DECISIONS "Object storage": S3's rules) and the prefixes accounts' keys create
 * buckets under over S3.
 */

/** The prefix an account's keys may create buckets under over S3: `cus<n>-`. */
export const bucketPrefixOf = (accountId: number): string => `cus${accountId}-`;

/** The account whose keys own names starting with `cus<n>-`, or null for any other name. */
export function prefixOwner(name: string): number | null {
  const m = /^cus(\d+)-/.exec(name);
  return m ? Number(m[1]) : null;
}

/** What is wrong with `name` as a bucket name (S3's rules), or null when it is fine. */
export function bucketNameProblem(name: string): string | null {
  if (name.length < 3 || name.length > 63) return 'must be 3 to 63 characters long';
  if (!/^[a-z0-9.-]+$/.test(name)) return 'may hold only lowercase letters, digits, dots and hyphens';
  if (!/^[a-z0-9]/.test(name) || !/[a-z0-9]$/.test(name)) return 'must begin and end with a letter or a digit';
  if (name.includes('..')) return 'must not hold two dots in a row';
  if (name.includes('.-') || name.includes('-.')) return 'must not hold a dot next to a hyphen';
  if (isIP(name)) return 'must not look like an IP address';
  if (/^(xn--|sthree-|amzn-s3-demo-)/.test(name)) return 'must not begin with xn--, sthree- or amzn-s3-demo-';
  if (/(-s3alias|--ol-s3|--x-s3|--table-s3)$/.test(name)) return 'must not end with a suffix S3 reserves';
  return null;
}
