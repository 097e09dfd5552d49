import type { KvStore } from '../../providers/kv.provider';
import type { LiveTenant } from '../../domain/serverless/store';
import type { ServerlessPlan } from '../../domain/serverless/plans';
import { atQuota, invalid, methodNotAllowed, nameParam, notFound, readBody, sendEmpty, type Call } from './http';
import type { UsageMeter } from './meter';

const MAX_KEY_BYTES = 512;

/**
 * `{key}` is one percent-encoded path segment of arbitrary bytes (DECISIONS): decoded to bytes, not
 * to a string, so a key need not be UTF-8. A malformed escape is a 400.
 */
export function keyBytes(segment: string): Buffer {
  // Without escapes, the segment's characters as UTF-8: what the loop below makes, in one call.
  const key = segment.includes('%') ? escapedKeyBytes(segment) : Buffer.from(segment, 'utf8');
  if (key.length === 0 || key.length > MAX_KEY_BYTES) throw invalid('key', `must be 1 to ${MAX_KEY_BYTES} bytes`);
  return key;
}

function escapedKeyBytes(segment: string): Buffer {
  const bytes: number[] = [];
  for (let i = 0; i < segment.length;) {
    if (segment[i] === '%') {
      const hex = segment.slice(i + 1, i + 3);
      if (!/^[0-9a-fA-F]{2}$/.test(hex)) throw invalid('key', 'has a malformed percent-escape');
      bytes.push(parseInt(hex, 16));
      i += 3;
    } else {
      const code = segment.codePointAt(i)!;
      const char = String.fromCodePoint(code);
      for (const b of Buffer.from(char, 'utf8')) bytes.push(b);
      i += char.length;
    }
  }
  return Buffer.from(bytes);
}

export interface KvDeps {
  store: KvStore;
  meter: UsageMeter;
  planOf(tenant: LiveTenant): ServerlessPlan;
}

/**
 * The kv data plane (DECISIONS "Serverless", kv, modelled on Workers KV):
 * `PUT|GET|DELETE /v1/ns/{ns}/keys/{key}`, raw bytes. A PUT creates the namespace; a value over
 * `limits.max_value_bytes` is 413; a DELETE of an absent key is 204. Every GET counts a read (misses
 * too), every PUT and DELETE a write; the storage peak is the tenant's stored bytes after each write.
 * On a hard-capped plan at quota, writes answer 429 `quota_exceeded` and reads go on.
 */
export class KvPlane {
  private readonly ensured = new Set<string>();

  constructor(private readonly deps: KvDeps) {}

  /** A request through Node's HTTP server (the plane's router). */
  async handle(call: Call, tenant: LiveTenant): Promise<void> {
    const value = await this.serve(call.req.method ?? '', call.segments, tenant, (maxBytes) => readBody(call.req, maxBytes));
    if (value === null) return sendEmpty(call);
    call.res.writeHead(200, [
      'X-Request-Id',
      call.requestId,
      'Content-Type',
      'application/octet-stream',
      'Content-Length',
      String(value.length),
      'Cache-Control',
      'no-store',
    ]);
    call.res.end(value);
  }

  /**
   * One request, for either transport (Node's HTTP server, or plain-http.ts's reader): `segments`
   * is the path after `/kv`; `body` reads the request's body, refusing one over the given size.
   * Resolves to the value read (GET: 200) or null (PUT and DELETE: 204).
   */
  async serve(method: string, segments: string[], tenant: LiveTenant, body: (maxBytes: number) => Buffer | Promise<Buffer>): Promise<Buffer | null> {
    if (segments.length !== 5 || segments[0] !== 'v1' || segments[1] !== 'ns' || segments[3] !== 'keys') throw notFound('kv route');
    const ns = nameParam(segments[2], 'ns');
    const key = keyBytes(segments[4]);
    const { store, meter } = this.deps;
    if (!this.ensured.has(tenant.handle)) {
      await store.ensureTenant(tenant.handle);
      this.ensured.add(tenant.handle);
    }
    if (method === 'GET') {
      meter.add(tenant.service_id, { reads: 1 });
      const value = await store.get(tenant.handle, ns, key);
      if (!value) throw notFound('key');
      return value;
    }
    if (method !== 'PUT' && method !== 'DELETE') throw methodNotAllowed();
    const plan = this.deps.planOf(tenant);
    if (plan.hard_cap && (await meter.atCap(tenant.service_id, plan))) throw atQuota('kv writes');
    let stored: number;
    if (method === 'PUT') {
      const value = body(plan.limits.max_value_bytes);
      stored = await store.put(tenant.handle, ns, key, value instanceof Promise ? await value : value);
    } else stored = await store.delete(tenant.handle, ns, key);
    meter.add(tenant.service_id, { writes: 1, storage_bytes_peak: stored });
    return null;
  }

  /** Removes an ended tenant's data (the reaper). */
  async drop(handle: string): Promise<void> {
    await this.deps.store.dropTenant(handle);
    this.ensured.delete(handle);
  }
}
