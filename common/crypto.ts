import { createCipheriv, createDecipheriv, createHmac, hash, hkdfSync, randomBytes, randomInt, scrypt, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';

const scryptAsync = promisify(scrypt) as (password: string, salt: Buffer, keylen: number, options: object) => Promise<Buffer>;

/** One shot (no Hash object): it runs on every authenticated request, to find the credential in the cache. */
export function sha256Hex(text: string): string {
  return hash('sha256', text, 'hex');
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Uniformly random base62 string (no modulo bias). */
export function randomBase62(length: number): string {
  let out = '';
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)];
  return out;
}

/**
 * scrypt at the OWASP Password Storage Cheat Sheet's minimum: N=2^17 (128 MiB), r=8, p=1; 16-byte
 * salt, 32-byte key. Each hash holds 128 MiB for its duration, and at most the libuv thread pool's
 * size (4) run at once. Stored hashes carry their parameters, so older ones still verify and are
 * re-hashed at the next successful sign-in (needsRehash).
 */
export const SCRYPT = { N: 131072, r: 8, p: 1, maxmem: 256 * 1024 * 1024 };

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await scryptAsync(password.normalize('NFKC'), salt, 32, SCRYPT);
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${key.toString('base64')}`;
}

/** A stored hash made with weaker parameters than today's. */
export function needsRehash(stored: string): boolean {
  const [scheme, n, r, p] = stored.split('$');
  return scheme !== 'scrypt' || Number(n) < SCRYPT.N || Number(r) < SCRYPT.r || Number(p) < SCRYPT.p;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, saltB64, keyB64] = stored.split('$');
  if (scheme !== 'scrypt') return false;
  const expected = Buffer.from(keyB64, 'base64');
  const actual = await scryptAsync(password.normalize('NFKC'), Buffer.from(saltB64, 'base64'), expected.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: SCRYPT.maxmem,
  });
  return actual.length === expected.length && timingSafeEqual(actual, expected);
}

/**
 * Keys derived from the instance master key: one per purpose, so that a cursor signature can never
 * be replayed as anything else.
 */
export class Keyring {
  private readonly master: Buffer;
  /** HKDF per purpose, once: the derived keys never change and signing runs on every list request. */
  private readonly derived = new Map<string, Buffer>();
  constructor(master: Buffer) {
    if (master.length < 32) throw new Error('master key must be at least 32 bytes');
    this.master = master;
  }

  static fromString(text: string): Keyring {
    const buf = /^[0-9a-f]+$/i.test(text) && text.length % 2 === 0 ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
    return new Keyring(buf.length >= 32 ? buf : Buffer.from(text, 'utf8'));
  }

  derive(purpose: string): Buffer {
    let key = this.derived.get(purpose);
    if (!key) {
      key = Buffer.from(hkdfSync('sha256', this.master, Buffer.alloc(0), `cloud:${purpose}`, 32));
      this.derived.set(purpose, key);
    }
    return key;
  }

  sign(purpose: string, data: string): Buffer {
    return createHmac('sha256', this.derive(purpose)).update(data).digest();
  }

  /** AES-256-GCM; output `v1.<iv>.<tag>.<ciphertext>` in base64url. */
  encrypt(purpose: string, plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.derive(purpose), iv);
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', iv, cipher.getAuthTag(), body].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.');
  }

  decrypt(purpose: string, sealed: string): string {
    const [version, iv, tag, body] = sealed.split('.');
    if (version !== 'v1') throw new Error('unknown sealed format');
    const decipher = createDecipheriv('aes-256-gcm', this.derive(purpose), Buffer.from(iv, 'base64url'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
  }
}

export function constantTimeEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
