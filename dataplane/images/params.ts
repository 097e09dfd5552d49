/**
 * The delivery request's parameters (DECISIONS "Images"): `url` (absolute http or https), `w` and
 * `h` (1..8192), `fit` (inside | cover | contain | fill; default inside), `format` (webp | avif | jpeg
 * | png | auto; default auto), `q` (1..100; default 80); with only `w` or `h`, the other follows the
 * source's ratio whatever the fit; a signed URL adds `tenant`, `exp` (unix
 * seconds) and `sig`. A parameter given twice, an unknown one, or a bad value is refused with the
 * parameter's name.
 */
export type Fit = 'inside' | 'cover' | 'contain' | 'fill';
export type OutputFormat = 'webp' | 'avif' | 'jpeg' | 'png';

export const FITS: readonly Fit[] = ['inside', 'cover', 'contain', 'fill'];
export const FORMATS: readonly (OutputFormat | 'auto')[] = ['webp', 'avif', 'jpeg', 'png', 'auto'];
const KNOWN = new Set(['url', 'w', 'h', 'fit', 'format', 'q', 'tenant', 'exp', 'sig']);
export const MAX_DIMENSION = 8192;

export class ParamError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(`${param}: ${message}`);
  }
}

/** What to make of the source image. `format: 'source'` keeps a JPEG or PNG source's own format (the rest become JPEG). */
export interface Transformation {
  url: string;
  w: number | null;
  h: number | null;
  fit: Fit;
  format: OutputFormat | 'source';
  q: number;
}

export interface DeliveryRequest {
  transformation: Transformation;
  /** The parameters as given (for the signature), in order. */
  params: Array<[string, string]>;
  signed: { tenant: string; exp: number; sig: string } | null;
}

function integer(param: string, value: string, min: number, max: number): number {
  if (!/^\d{1,6}$/.test(value)) throw new ParamError(param, `must be a whole number from ${min} to ${max}`);
  const n = Number(value);
  if (n < min || n > max) throw new ParamError(param, `must be a whole number from ${min} to ${max}`);
  return n;
}

/** The output format for `format` and the request's `Accept` header. */
export function resolveFormat(format: OutputFormat | 'auto', accept: string | undefined): OutputFormat | 'source' {
  if (format !== 'auto') return format;
  const types = (accept ?? '')
    .toLowerCase()
    .split(',')
    .map((part) => part.split(';')[0].trim());
  if (types.includes('image/avif')) return 'avif';
  if (types.includes('image/webp')) return 'webp';
  return 'source';
}

/** Parses a delivery query (URLSearchParams keeps repeats and order) and the `Accept` header. */
export function parseDelivery(query: URLSearchParams, accept: string | undefined): DeliveryRequest {
  const params: Array<[string, string]> = [...query.entries()];
  const seen = new Set<string>();
  for (const [k] of params) {
    if (!KNOWN.has(k)) throw new ParamError(k, 'is not a parameter of /v1/img');
    if (seen.has(k)) throw new ParamError(k, 'is given more than once');
    seen.add(k);
  }
  const get = (k: string) => query.get(k) ?? undefined;
  const rawUrl = get('url');
  if (!rawUrl) throw new ParamError('url', 'is required: the absolute http(s) URL of the source image');
  let url: URL;
  try {
    url = new URL(rawUrl);
  } catch {
    throw new ParamError('url', 'must be an absolute http or https URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ParamError('url', 'must be an absolute http or https URL');
  if (url.username || url.password) throw new ParamError('url', 'must not carry credentials');
  const w = get('w') === undefined ? null : integer('w', get('w')!, 1, MAX_DIMENSION);
  const h = get('h') === undefined ? null : integer('h', get('h')!, 1, MAX_DIMENSION);
  const fit = (get('fit') ?? 'inside') as Fit;
  if (!FITS.includes(fit)) throw new ParamError('fit', `must be one of ${FITS.join(', ')}`);
  const format = (get('format') ?? 'auto') as OutputFormat | 'auto';
  if (!FORMATS.includes(format)) throw new ParamError('format', `must be one of ${FORMATS.join(', ')}`);
  const q = get('q') === undefined ? 80 : integer('q', get('q')!, 1, 100);
  const anySigned = ['tenant', 'exp', 'sig'].filter((k) => seen.has(k));
  let signed: DeliveryRequest['signed'] = null;
  if (anySigned.length > 0) {
    for (const k of ['tenant', 'exp', 'sig']) if (!seen.has(k)) throw new ParamError(k, 'a signed URL carries tenant, exp and sig');
    if (!/^\d{1,12}$/.test(get('exp')!)) throw new ParamError('exp', 'must be a unix time in seconds');
    signed = { tenant: get('tenant')!, exp: Number(get('exp')), sig: get('sig')! };
  }
  return { transformation: { url: url.href, w, h, fit, format: resolveFormat(format, accept), q }, params, signed };
}

/** The transformation as one stable string (with the tenant, the cache key's input). */
export function canonicalTransformation(t: Transformation): string {
  return JSON.stringify([t.url, t.w, t.h, t.fit, t.format, t.q]);
}
