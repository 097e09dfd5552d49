import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Signed delivery URLs (DECISIONS "Images"): `sig` is the lower-case hex HMAC-SHA256, keyed by the
 * tenant's signing secret (its UTF-8 bytes), of `/v1/img?` followed by every parameter but `sig` as
 * `enc(k)=enc(v)`, sorted by `enc(k)` then `enc(v)`, joined with `&`. `enc` keeps `A-Za-z0-9-._~`
 * and writes every other UTF-8 byte as `%XX` (upper case): RFC 3986's unreserved set, so a client in
 * any language can build the same string.
 */
export function enc(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += /[A-Za-z0-9\-._~]/.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** The string that is signed, for the parameters given (`sig` is left out if present). */
export function canonicalString(params: ReadonlyArray<readonly [string, string]>): string {
  const pairs = params.filter(([k]) => k !== 'sig').map(([k, v]) => [enc(k), enc(v)] as const);
  pairs.sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return `/v1/img?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`;
}

/** `sig` for the parameters, with `secret`. */
export function signatureOf(secret: string, params: ReadonlyArray<readonly [string, string]>): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(canonicalString(params)).digest('hex');
}

/** Whether `sig` (as given) is the signature of the parameters under one of `secrets`; constant time per secret. */
export function signatureMatches(secrets: readonly string[], params: ReadonlyArray<readonly [string, string]>, sig: string): boolean {
  if (!/^[0-9a-f]{64}$/.test(sig)) return false;
  const given = Buffer.from(sig, 'hex');
  let ok = false;
  for (const secret of secrets) ok = timingSafeEqual(given, Buffer.from(signatureOf(secret, params), 'hex')) || ok;
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
