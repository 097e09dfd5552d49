import { monotonicFactory } from 'ulid';

/**
 * Public ids carry a typed prefix (`svc_12`, `op_01J...`). Clients may send them with or without it.
 * Numeric ids map to bigserial columns; ulid ids are stored with their prefix.
 */
const nextUlid = monotonicFactory();

export function newUlidId(prefix: string): string {
  return `${prefix}_${nextUlid()}`;
}

export function formatId(prefix: string, n: number | string): string {
  return `${prefix}_${n}`;
}

/** `svc_12` or `12` -> 12; anything else -> null (callers answer 404: such a resource cannot exist). */
export function parseNumericId(prefix: string, raw: string): number | null {
  const bare = raw.startsWith(`${prefix}_`) ? raw.slice(prefix.length + 1) : raw;
  if (!/^[1-9]\d{0,15}$/.test(bare)) return null;
  const n = Number(bare);
  return Number.isSafeInteger(n) ? n : null;
}

const ULID_RE = /^[0-9A-HJKMNP-TV-Z]{26}$/i;

/** `op_01J...` or `01J...` -> `op_01J...` (upper-cased); anything else -> null. */
export function parseUlidId(prefix: string, raw: string): string | null {
  const bare = raw.startsWith(`${prefix}_`) ? raw.slice(prefix.length + 1) : raw;
  return ULID_RE.test(bare) ? `${prefix}_${bare.toUpperCase()}` : null;
}
