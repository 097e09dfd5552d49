import { randomFillSync } from 'node:crypto';

/**
 * Public ids carry a typed prefix (`svc_12`, `op_01J...`). Clients may send them with or without it.
 * Numeric ids map to bigserial columns; ulid ids are stored with their prefix.
 */
const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';
const RANDOM_HALF = 2 ** 40;

/** `digits` Crockford base-32 characters of a non-negative integer below 2^53. */
function base32(value: number, digits: number): string {
  let out = '';
  for (let i = 0; i < digits; i++) {
    out = CROCKFORD[value % 32] + out;
    value = Math.floor(value / 32);
  }
  return out;
}

// Random bytes drawn in blocks: one system call per 400 ids, not one per random character.
const pool = Buffer.alloc(4000);
let poolAt = pool.length;
function random40(): number {
  if (poolAt + 5 > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const v = pool[poolAt] * 2 ** 32 + pool.readUInt32BE(poolAt + 1);
  poolAt += 5;
  return v;
}

let lastMs = -1;
let upperPart = '';
let randomHi = 0;
let randomLo = 0;

/**
 * A monotonic ULID (https://github.com/ulid/spec): 48-bit milliseconds and 80 random bits, in
 * Crockford base 32. Within one millisecond (or if the clock goes back) the random part of the
 * previous id is incremented, so ids of one process sort in the order they were made.
 */
export function ulid(now: number = Date.now()): string {
  if (now > lastMs) {
    lastMs = now;
    randomHi = random40();
    randomLo = random40();
    // The first 18 characters change once a millisecond (or when the low half wraps).
    upperPart = base32(now, 10) + base32(randomHi, 8);
  } else if (++randomLo === RANDOM_HALF) {
    randomLo = 0;
    if (++randomHi === RANDOM_HALF) throw new Error('ULID random part overflow within one millisecond');
    upperPart = upperPart.slice(0, 10) + base32(randomHi, 8);
  }
  return upperPart + base32(randomLo, 8);
}

export function newUlidId(prefix: string): string {
  return `${prefix}_${ulid()}`;
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
