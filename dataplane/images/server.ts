import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Knex } from 'knex';
import type { Config } from '../../common/config';
import type { Keyring } from '../../common/crypto';
import { newUlidId } from '../../common/ids';
import { planOf } from '../../domain/images/plans';
import {
  addUsage,
  originsOf,
  signingSecrets,
  signingSecretsUntil,
  tenantByHandle,
  tenantOfToken,
  TENANT_CHANGED_CHANNEL,
  usageDays,
  type TenantRow,
} from '../../domain/images/store';
import type { TargetPolicy } from '../../infra/webhook-targets';
import { DataPlaneError, readBody, sendError } from '../errors';
import { DiskImageCache, type CachedImage } from './cache';
import { fetchSource, OriginFailed, OriginRefused, SourceBuffers, SourceTooLarge } from './fetch';
import { allowedBy, sourceHost } from '../../domain/images/origins';
import { canonicalTransformation, ParamError, parseDelivery, type DeliveryRequest, type Transformation } from './params';
import { canonicalString, signatureMatches, signedUrl } from './signing';
import { transform, UnsupportedImageError } from './transform';

/**
 * The image delivery plane (SPEC "Image services", DECISIONS "Images"): its own HTTP server, in its
 * own process (`npm run images`), never the control-plane API. `GET /v1/img` serves a transformed
 * image to a delivery token (`imgt_`) or a signed URL; `POST /v1/sign` signs one for a token holder.
 * Every answer carries `X-Request-Id`; errors use the API's envelope.
 *
 * Per request, in this order: the parameters (a signed URL carries its credential among them), the
 * credential, the service's status, the tenant's allowlist (read every time: a removed origin is
 * refused at once, cached or not), the plan's hard cap, then the cache, and only on a miss the origin
 * (with the outbound-fetch rules) and sharp. Usage is counted in
 * memory and added to PostgreSQL every `flushMs`.
 */
export interface ImageDeliveryOptions {
  db: Knex;
  keyring: Keyring;
  cacheDir: string;
  policy: TargetPolicy;
  /** Source size and fetch time limits. */
  maxSourceBytes: number;
  fetchTimeoutMs: number;
  /** How long a looked-up token is trusted (a revoked or rotated-out token stops within this). */
  tokenCacheMs?: number;
  flushMs?: number;
}

const LIVE = new Set(['active']);
/** The in-memory cache: at most this many bytes, no entry over HOT_ENTRY_MAX (those stay on disk only). */
const HOT_BYTES_MAX = 64 * 1024 * 1024;
const HOT_ENTRY_MAX = 2 * 1024 * 1024;

/** A delivery query parsed once: the request, its source's host, its cache key and (signed) the string to check. */
interface ParsedDelivery {
  request: DeliveryRequest;
  host: string | null;
  key: string;
  signedString: string | null;
  /**
   * The tenant's secrets (the very array the tenant's state holds) this signature was found good
   * with: while that state is unchanged the HMAC is not computed again. A rotation, or the state
   * read again, gives a new array, and the signature is checked anew.
   */
  verifiedWith?: readonly string[];
}
/** Queries longer than this are parsed every time rather than remembered. */
const PARSED_QUERY_MAX = 2048;
const PARSED_ENTRIES_MAX = 10_000;

interface PgConnection {
  query(sql: string): Promise<unknown>;
  on(event: 'notification', listener: (message: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', listener: () => void): void;
}

export class ImageDeliveryServer {
  /** The plane as a configuration sets it up (`npm run images`, and the bench's own plane). */
  static fromConfig(config: Config, db: Knex, keyring: Keyring): ImageDeliveryServer {
    return new ImageDeliveryServer({
      db,
      keyring,
      cacheDir: config.IMAGES_CACHE_DIR,
      policy: { allowInsecure: config.WEBHOOK_ALLOW_INSECURE_TARGETS },
      maxSourceBytes: config.IMAGES_MAX_SOURCE_BYTES,
      fetchTimeoutMs: config.IMAGES_FETCH_TIMEOUT,
    });
  }

  private server: http.Server | null = null;
  private readonly cache: DiskImageCache;
  private readonly tokens = new Map<string, { tenant: (TenantRow & { status: string }) | null; at: number }>();
  private readonly handles = new Map<string, { tenant: (TenantRow & { status: string }) | null; at: number }>();
  /**
   * What each tenant's requests need besides the credential: its allowlist and signing secrets. Kept
   * while the change feed (LISTEN on TENANT_CHANGED_CHANNEL) is connected, dropped when a change of
   * the tenant is announced; without the feed every request reads them again.
   */
  private readonly tenants = new Map<number, { origins: string[]; secrets: string[] | null; until: number }>();
  /**
   * How many changes of each tenant were announced: a read that began before an announcement is not
   * kept (it may hold what the change replaced, and would otherwise be served for a minute).
   */
  private readonly changes = new Map<number, number>();
  private feed: { end(): Promise<void> } | null = null;
  private feedLive = false;
  private closed = false;
  /** The hottest transformed images, in memory (least recently served dropped first). */
  private readonly hot = new Map<string, CachedImage>();
  private hotBytes = 0;
  /** Source bodies' buffers, used again from miss to miss (fewer full GCs; see SourceBuffers). */
  private readonly sources = new SourceBuffers();
  /**
   * Delivery queries already parsed (with the `Accept` header, which `format=auto` depends on): the
   * same URLs come again and again, and parsing was a good part of a cache hit's cost. Nothing in
   * here depends on the tenant, the time or the database; everything that does is checked per request.
   */
  private readonly parsed = new Map<string, ParsedDelivery>();
  /** Transformations under way, by tenant and canonical transformation. */
  private readonly making = new Map<string, Promise<CachedImage>>();
  private readonly pending = new Map<number, { transformations: number; deliveries: number; egress_bytes: number }>();
  private flusher: NodeJS.Timeout | null = null;

  constructor(private readonly options: ImageDeliveryOptions) {
    this.cache = new DiskImageCache(options.cacheDir);
  }

  async listen(port: number, host = '127.0.0.1'): Promise<string> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve) => this.server!.listen(port, host, resolve));
    this.flusher = setInterval(() => void this.flush(), this.options.flushMs ?? 1_000);
    await this.followChanges();
    const address = this.server.address() as AddressInfo;
    return `http://${host}:${address.port}`;
  }

  /**
   * Subscribes to the tenants' change feed on a connection of its own. Until it is up, and whenever
   * it breaks, nothing is kept (every request reads the allowlist): a missed announcement can never
   * leave a removed origin served. It reconnects after a second.
   */
  private async followChanges(): Promise<void> {
    if (this.closed) return;
    const client = this.options.db.client as { acquireRawConnection(): Promise<PgConnection>; destroyRawConnection(c: PgConnection): Promise<void> };
    let connection: PgConnection;
    try {
      connection = await client.acquireRawConnection();
    } catch {
      setTimeout(() => void this.followChanges(), 1_000).unref();
      return;
    }
    const lost = () => {
      if (!this.feedLive) return;
      this.feedLive = false;
      this.tenants.clear();
      this.feed = null;
      void client.destroyRawConnection(connection).catch(() => undefined);
      setTimeout(() => void this.followChanges(), 1_000).unref();
    };
    connection.on('notification', (message: { channel: string; payload?: string }) => {
      if (message.channel !== TENANT_CHANGED_CHANNEL) return;
      const serviceId = Number(message.payload);
      this.tenants.delete(serviceId);
      this.changes.set(serviceId, (this.changes.get(serviceId) ?? 0) + 1);
      for (const [token, entry] of this.tokens) if (entry.tenant?.service_id === serviceId) this.tokens.delete(token);
      for (const [handle, entry] of this.handles) if (entry.tenant?.service_id === serviceId) this.handles.delete(handle);
    });
    connection.on('error', lost);
    connection.on('end', lost);
    try {
      await connection.query(`LISTEN ${TENANT_CHANGED_CHANNEL}`);
    } catch {
      void client.destroyRawConnection(connection).catch(() => undefined);
      setTimeout(() => void this.followChanges(), 1_000).unref();
      return;
    }
    this.tenants.clear();
    this.feedLive = true;
    this.feed = { end: () => client.destroyRawConnection(connection) };
  }

  /**
   * The tenant's allowlist and (for signed URLs) secrets, from memory while the feed is live: kept a
   * minute at most, and never past the end of a previous secret's grace.
   */
  private async stateOf(serviceId: number, withSecrets: boolean): Promise<{ origins: string[]; secrets: string[] }> {
    const kept = this.feedLive ? this.tenants.get(serviceId) : undefined;
    if (kept && Date.now() < kept.until && (!withSecrets || kept.secrets)) return { origins: kept.origins, secrets: kept.secrets ?? [] };
    const changesBefore = this.changes.get(serviceId);
    const origins = await originsOf(this.options.db, serviceId);
    const read = withSecrets ? await signingSecretsUntil(this.options.db, this.options.keyring, serviceId) : null;
    if (this.feedLive && this.changes.get(serviceId) === changesBefore) {
      const until = Math.min(Date.now() + 60_000, read?.until ? read.until.getTime() : Infinity);
      this.tenants.set(serviceId, { origins, secrets: read?.secrets ?? null, until });
    }
    return { origins, secrets: read?.secrets ?? [] };
  }

  private hotGet(key: string): CachedImage | null {
    const image = this.hot.get(key);
    if (!image) return null;
    this.hot.delete(key);
    this.hot.set(key, image);
    return image;
  }

  private hotPut(key: string, image: CachedImage): void {
    if (image.body.length > HOT_ENTRY_MAX) return;
    if (this.hot.has(key)) return;
    this.hot.set(key, image);
    this.hotBytes += image.body.length;
    for (const [k, v] of this.hot) {
      if (this.hotBytes <= HOT_BYTES_MAX) break;
      this.hot.delete(k);
      this.hotBytes -= v.body.length;
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    this.feedLive = false;
    await this.feed?.end().catch(() => undefined);
    if (this.flusher) clearInterval(this.flusher);
    if (this.server) {
      this.server.closeAllConnections();
      await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    }
    await this.flush();
  }

  /** Adds the usage counted since the last flush to PostgreSQL (a failed add is kept for the next). */
  async flush(): Promise<void> {
    const batch = [...this.pending.entries()];
    this.pending.clear();
    for (const [serviceId, add] of batch) {
      try {
        await addUsage(this.options.db, serviceId, add);
      } catch {
        this.count(serviceId, add);
      }
    }
  }

  private count(serviceId: number, add: { transformations: number; deliveries: number; egress_bytes: number }): void {
    const current = this.pending.get(serviceId) ?? { transformations: 0, deliveries: 0, egress_bytes: 0 };
    current.transformations += add.transformations;
    current.deliveries += add.deliveries;
    current.egress_bytes += add.egress_bytes;
    this.pending.set(serviceId, current);
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const requestId = newUlidId('req');
    try {
      // The path and query as sent (no URL object per request; a path that is not exactly one of
      // ours is a 404).
      const raw = req.url ?? '/';
      const mark = raw.indexOf('?');
      const pathname = mark < 0 ? raw : raw.slice(0, mark);
      if (pathname === '/v1/img' && (req.method === 'GET' || req.method === 'HEAD')) {
        return await this.deliver(req, res, mark < 0 ? '' : raw.slice(mark + 1), requestId);
      }
      res.setHeader('X-Request-Id', requestId);
      if (pathname === '/v1/sign' && req.method === 'POST') return await this.sign(req, res);
      if (pathname === '/healthz') return void res.end('ok');
      if (pathname === '/v1/img' || pathname === '/v1/sign') {
        res.setHeader('Allow', pathname === '/v1/img' ? 'GET, HEAD' : 'POST');
        throw new DataPlaneError(405, 'invalid_request_error', 'method_not_allowed', `${req.method} is not allowed on ${pathname}.`);
      }
      throw new DataPlaneError(404, 'invalid_request_error', 'route_not_found', 'The image delivery plane answers GET /v1/img and POST /v1/sign.');
    } catch (err) {
      const e =
        err instanceof DataPlaneError
          ? err
          : err instanceof ParamError
            ? new DataPlaneError(400, 'invalid_request_error', 'validation_failed', err.message, err.param)
            : new DataPlaneError(500, 'api_error', 'internal_error', 'The image could not be delivered; try again.');
      sendError(res, e, requestId);
    }
  }

  /** The tenant of a bearer delivery token (trusted for `tokenCacheMs`), or 401. */
  private async tenantOfBearer(req: http.IncomingMessage): Promise<TenantRow & { status: string }> {
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m)
      throw new DataPlaneError(
        401,
        'authentication_error',
        'authentication_required',
        'Send a delivery token: Authorization: Bearer imgt_..., or use a signed URL.',
      );
    const token = m[1];
    if (!token.startsWith('imgt_')) throw new DataPlaneError(401, 'authentication_error', 'invalid_token', 'This is not a delivery token (imgt_...).');
    const cached = this.tokens.get(token);
    const ttl = this.options.tokenCacheMs ?? 500;
    let tenant = cached && Date.now() - cached.at < ttl ? cached.tenant : undefined;
    if (tenant === undefined) {
      tenant = await tenantOfToken(this.options.db, token);
      if (this.tokens.size > 10_000) this.tokens.clear();
      this.tokens.set(token, { tenant, at: Date.now() });
    }
    if (!tenant) throw new DataPlaneError(401, 'authentication_error', 'invalid_token', 'The delivery token is not valid (unknown, revoked or rotated out).');
    return tenant;
  }

  /** Fetches the source and transforms it, mapping the failures to the delivery plane's answers. */
  private async make(t: Transformation): Promise<CachedImage> {
    let source: Buffer;
    try {
      source = await fetchSource(t.url, this.options.policy, {
        maxBytes: this.options.maxSourceBytes,
        timeoutMs: this.options.fetchTimeoutMs,
        buffers: this.sources,
      });
    } catch (err) {
      if (err instanceof OriginRefused) throw new DataPlaneError(403, 'authorization_error', 'origin_not_allowed', err.message, 'url');
      if (err instanceof SourceTooLarge) throw new DataPlaneError(422, 'invalid_request_error', 'unsupported_image', err.message, 'url');
      if (err instanceof OriginFailed) throw new DataPlaneError(502, 'api_error', 'origin_error', err.message, 'url');
      throw err;
    }
    try {
      const out = await transform(source, t);
      return { body: out.body, contentType: out.contentType, format: out.format };
    } catch (err) {
      if (err instanceof UnsupportedImageError) throw new DataPlaneError(422, 'invalid_request_error', 'unsupported_image', err.message, 'url');
      throw err;
    } finally {
      // sharp is done with it (its cache is off): the next miss may read into it.
      this.sources.release(source);
    }
  }

  /** The tenant a signed URL names (trusted for a second, like a token: its status may change). */
  private async tenantOfHandle(handle: string): Promise<(TenantRow & { status: string }) | null> {
    const cached = this.handles.get(handle);
    if (cached && Date.now() - cached.at < 1_000) return cached.tenant;
    const tenant = await tenantByHandle(this.options.db, handle);
    if (this.handles.size > 10_000) this.handles.clear();
    this.handles.set(handle, { tenant, at: Date.now() });
    return tenant;
  }

  private requireLive(tenant: { status: string }): void {
    if (!LIVE.has(tenant.status))
      throw new DataPlaneError(403, 'authorization_error', 'service_not_active', `The image service is ${tenant.status}; it delivers nothing.`);
  }

  /** The delivery query parsed, from memory when it was seen before (ParamError if it is bad; those are not kept). */
  private parse(search: string, accept: string | undefined): ParsedDelivery {
    const memo = `${accept ?? ''}\n${search}`;
    const known = this.parsed.get(memo);
    if (known) return known;
    const request = parseDelivery(new URLSearchParams(search), accept);
    const parsed: ParsedDelivery = {
      request,
      host: sourceHost(new URL(request.transformation.url)),
      key: canonicalTransformation(request.transformation),
      signedString: request.signed ? canonicalString(request.params) : null,
    };
    if (search.length <= PARSED_QUERY_MAX) {
      if (this.parsed.size >= PARSED_ENTRIES_MAX) this.parsed.clear();
      this.parsed.set(memo, parsed);
    }
    return parsed;
  }

  private async deliver(req: http.IncomingMessage, res: http.ServerResponse, search: string, requestId: string): Promise<void> {
    const parsed = this.parse(search, req.headers.accept);
    const { request, host, key, signedString } = parsed;
    let tenant: TenantRow & { status: string };
    if (request.signed) {
      const found = await this.tenantOfHandle(request.signed.tenant);
      const secrets = found ? (await this.stateOf(found.service_id, true)).secrets : [];
      const good = found !== null && (parsed.verifiedWith === secrets || signatureMatches(secrets, signedString!, request.signed.sig));
      if (!good) throw new DataPlaneError(403, 'authorization_error', 'invalid_signature', 'The signature does not match this URL.');
      parsed.verifiedWith = secrets;
      if (request.signed.exp * 1000 < Date.now()) throw new DataPlaneError(403, 'authorization_error', 'signature_expired', 'The signed URL has expired.');
      tenant = found;
    } else {
      tenant = await this.tenantOfBearer(req);
    }
    this.requireLive(tenant);
    const t = request.transformation;
    if (!host || !allowedBy((await this.stateOf(tenant.service_id, false)).origins, host)) {
      throw new DataPlaneError(
        403,
        'authorization_error',
        'origin_not_allowed',
        `The source's host ${host ?? ''} is not on this image service's origin allowlist.`,
        'url',
      );
    }
    await this.refuseOverCap(tenant);
    const hotKey = `${tenant.tenant}\n${key}`;
    let image = this.hotGet(hotKey) ?? (await this.cache.get(tenant.tenant, key));
    let hit = true;
    if (!image) {
      // Concurrent misses of one image wait for the first: one fetch, one transformation (counted once).
      const running = this.making.get(hotKey);
      if (running) {
        image = await running;
      } else {
        hit = false;
        const making = this.make(t).finally(() => this.making.delete(hotKey));
        this.making.set(hotKey, making);
        image = await making;
        // Written beside the answer, not before it: a failed write only costs a later miss.
        const made = image;
        void this.cache.put(tenant.tenant, key, made).catch(() => undefined);
      }
    }
    this.hotPut(hotKey, image);
    // A HEAD sends no image: it is neither a delivery nor egress (a transformation it caused still counts).
    const head = req.method === 'HEAD';
    this.count(tenant.service_id, { transformations: hit ? 0 : 1, deliveries: head ? 0 : 1, egress_bytes: head ? 0 : image.body.length });
    // One flat header list (no per-header setHeader bookkeeping on the hot path).
    res.writeHead(200, [
      'X-Request-Id',
      requestId,
      'Content-Type',
      image.contentType,
      'Content-Length',
      String(image.body.length),
      // A signed URL may be kept by shared caches until it expires (a day at most); a token's answer only by its client, briefly.
      'Cache-Control',
      request.signed ? `public, max-age=${Math.max(0, Math.min(86_400, request.signed.exp - Math.floor(Date.now() / 1000)))}` : 'private, max-age=300',
      'Vary',
      'Accept',
      'X-Cache',
      hit ? 'HIT' : 'MISS',
    ]);
    res.end(head ? undefined : image.body);
  }

  /** On a plan with a hard cap, nothing is served once a month's included amount is used (`429 quota_exceeded`). */
  private async refuseOverCap(tenant: TenantRow): Promise<void> {
    const plan = planOf(tenant.plan);
    if (!plan.included.hard_cap) return;
    const now = new Date();
    const first = `${now.toISOString().slice(0, 7)}-01`;
    const used = (await usageDays(this.options.db, tenant.service_id, first, now.toISOString().slice(0, 10))).reduce(
      (sum, d) => ({
        transformations: sum.transformations + d.transformations,
        deliveries: sum.deliveries + d.deliveries,
        egress_bytes: sum.egress_bytes + d.egress_bytes,
      }),
      { transformations: 0, deliveries: 0, egress_bytes: 0 },
    );
    const pending = this.pending.get(tenant.service_id);
    const over = (['transformations', 'deliveries', 'egress_bytes'] as const).find((k) => used[k] + (pending?.[k] ?? 0) >= plan.included[k]);
    if (over)
      throw new DataPlaneError(
        429,
        'rate_limit_error',
        'quota_exceeded',
        `This month's included ${over.replace('_', ' ')} are used up; the plan has a hard cap.`,
      );
  }

  private async sign(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const tenant = await this.tenantOfBearer(req);
    this.requireLive(tenant);
    const body = await readJson(req);
    const params: Array<[string, string]> = [];
    let expiresIn = 3600;
    for (const [k, v] of Object.entries(body)) {
      if (k === 'expires_in') {
        if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 604_800)
          throw new ParamError('expires_in', 'must be a whole number of seconds from 1 to 604800');
        expiresIn = v;
        continue;
      }
      if (['tenant', 'exp', 'sig'].includes(k)) throw new ParamError(k, 'is set by the signing');
      if (typeof v !== 'string' && typeof v !== 'number') throw new ParamError(k, 'must be a string or a number');
      params.push([k, String(v)]);
    }
    // The parameters are checked as a delivery would check them; the URL then names its tenant.
    parseDelivery(new URLSearchParams(params), undefined);
    params.push(['tenant', tenant.tenant]);
    const secrets = await signingSecrets(this.options.db, this.options.keyring, tenant.service_id);
    if (secrets.length === 0) throw new DataPlaneError(409, 'invalid_request_error', 'conflict', 'The image service has no signing secret yet.');
    const expiresAt = new Date(Math.floor(Date.now() / 1000) * 1000 + expiresIn * 1000);
    const base = tenant.api_endpoint;
    res.statusCode = 200;
    res.setHeader('Content-Type', 'application/json');
    res.setHeader('Cache-Control', 'no-store');
    res.end(JSON.stringify({ object: 'images_signed_url', url: signedUrl(base, secrets[0], params, expiresAt), expires_at: expiresAt.toISOString() }));
  }
}

async function readJson(req: http.IncomingMessage): Promise<Record<string, unknown>> {
  const body = await readBody(req, 64 * 1024);
  try {
    const parsed: unknown = JSON.parse(body.toString('utf8') || '{}');
    if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as Record<string, unknown>;
  } catch {
    throw new DataPlaneError(400, 'invalid_request_error', 'invalid_json', 'The body must be a JSON object of parameters.');
  }
}
