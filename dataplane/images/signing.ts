import { createHmac, createSecretKey, timingSafeEqual, type KeyObject } from 'node:crypto';

/**
 * Signed delivery URLs (DECISIONS "Images"): `sig` is the lower-case hex HMAC-SHA256, keyed by the
 * tenant's signing secret (its UTF-8 bytes), of `/v1/img?` followed by every parameter but `sig` as
 * `enc(k)=enc(v)`, sorted by `enc(k)` then `enc(v)`, joined with `&`. `enc` keeps `A-Za-z0-9-._~`
 * and writes every other UTF-8 byte as `%XX` (upper case): RFC 3986's unreserved set, so a client in
 * any language can build the same string.
 */
export function enc(value: string): string {
  // encodeURIComponent writes UTF-8 as upper-case %XX and keeps the unreserved set, plus !'()*
  // (which RFC 3986 reserves): those five are escaped here. A lone surrogate is written as
  // U+FFFD's bytes, as Buffer.from(value, 'utf8') would.
  let out: string;
  try {
    out = encodeURIComponent(value);
  } catch {
    out = encodeURIComponent(value.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'));
  }
  return out.replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** The string that is signed, for the parameters given (`sig` is left out if present). */
export function canonicalString(params: ReadonlyArray<readonly [string, string]>): string {
  const pairs = params.filter(([k]) => k !== 'sig').map(([k, v]) => [enc(k), enc(v)] as const);
  pairs.sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return `/v1/img?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`;
}

/**
 * HMAC keys by secret: building a key object from the secret's bytes on every `createHmac` was
 * half the cost of checking a signature. A plane holds a handful of live secrets per tenant; the
 * map is emptied if it ever grows past a bound (rotated secrets are not kept forever).
 */
const keys = new Map<string, KeyObject>();
function keyOf(secret: string): KeyObject {
  let key = keys.get(secret);
  if (!key) {
    if (keys.size >= 10_000) keys.clear();
    key = createSecretKey(Buffer.from(secret, 'utf8'));
    keys.set(secret, key);
  }
  return key;
}

/** `sig` for the parameters, with `secret`. */
export function signatureOf(secret: string, params: ReadonlyArray<readonly [string, string]>): string {
  return signatureOfString(secret, canonicalString(params));
}

/** `sig` for an already built canonical string (`canonicalString`). */
export function signatureOfString(secret: string, canonical: string): string {
  return createHmac('sha256', keyOf(secret)).update(canonical).digest('hex');
}

/** Whether `sig` (as given) is the signature of the parameters (or their canonical string) under one of `secrets`; constant time per secret. */
export function signatureMatches(secrets: readonly string[], params: ReadonlyArray<readonly [string, string]> | string, sig: string): boolean {
  if (!/^[0-9a-f]{64}$/.test(sig)) return false;
  const canonical = typeof params === 'string' ? params : canonicalString(params);
  const given = Buffer.from(sig, 'hex');
  let ok = false;
  for (const secret of secrets) ok = timingSafeEqual(given, Buffer.from(signatureOfString(secret, canonical), 'hex')) || ok;
  return ok;
}

/**
 * A signed URL: the parameters with `exp` (unix seconds) and `sig` appended, on `base` (the tenant's
 * `api_endpoint`). The query is written with `enc` too, so what is signed is what is sent.
 */
export function signedUrl(base: string, secret: string, params: ReadonlyArray<readonly [string, string]>, expiresAt: Date): string {
  const withExp: Array<readonly [string, string]> = [
    ...params.filter(([k]) => k !== 'exp' && k !== 'sig'),
    ['exp', String(Math.floor(expiresAt.getTime() / 1000))],
  ];
  const sig = signatureOf(secret, withExp);
  const query = [...withExp, ['sig', sig] as const].map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&');
  return `${base.replace(/\/$/, '')}/v1/img?${query}`;
}
