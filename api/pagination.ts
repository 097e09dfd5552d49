import type { Knex } from 'knex';
import { z } from 'zod';
import type { Keyring } from '../common/crypto';
import { constantTimeEqual } from '../common/crypto';
import { validationFailed } from '../domain/errors';

export const DEFAULT_PAGE_SIZE = 20;
export const MAX_PAGE_SIZE = 100;
const API_VERSION = 'v1';

/** `limit` and `cursor`, for every list route's query schema. */
export function paginationQuery(defaultLimit = DEFAULT_PAGE_SIZE) {
  return {
    limit: z.coerce
      .number()
      .int()
      .min(1)
      .max(MAX_PAGE_SIZE)
      .default(defaultLimit)
      .meta({ description: `Page size, 1 to ${MAX_PAGE_SIZE} (default ${defaultLimit}).` }),
    cursor: z.string().max(1024).optional().meta({ description: 'The `next_cursor` of the previous page. Opaque.' }),
  };
}

export interface ListEnvelope<T> {
  object: 'list';
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}

/**
 * Opaque, tamper-evident keyset cursors: `<payload>.<hmac>` in base64url. The payload carries the
 * API version and a fingerprint of the list (route and filters), so a cursor cannot be replayed on
 * another list, another filter or another API version.
 */
export class Cursors {
  constructor(private readonly keyring: Keyring) {}

  /** Recently issued cursors: the same page's next_cursor is asked for again and again (clients polling a list). */
  private readonly issued = new Map<string, string>();

  encode(list: string, key: unknown): string {
    const memoKey = typeof key === 'number' || typeof key === 'string' ? `${list}\u0000${typeof key}\u0000${key}` : null;
    const known = memoKey === null ? undefined : this.issued.get(memoKey);
    if (known !== undefined) return known;
    const payload = Buffer.from(JSON.stringify({ v: API_VERSION, l: list, k: key })).toString('base64url');
    const cursor = `${payload}.${this.sign(payload).toString('base64url')}`;
    if (memoKey !== null) {
      if (this.issued.size >= 1_000) this.issued.clear();
      this.issued.set(memoKey, cursor);
    }
    return cursor;
  }

  decode(list: string, cursor: string): unknown {
    const [payload, sig, extra] = cursor.split('.');
    const bad = () => validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list; start again without it' }]);
    if (!payload || !sig || extra !== undefined) throw bad();
    // Compared as text: base64url decoding ignores trailing characters, so a signature with one appended
    // would decode to the same bytes.
    if (!constantTimeEqual(Buffer.from(sig), Buffer.from(this.sign(payload).toString('base64url')))) throw bad();
    let parsed: { v?: string; l?: string; k?: unknown };
    try {
      parsed = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    } catch {
      throw bad();
    }
    if (parsed.v !== API_VERSION || parsed.l !== list) throw bad();
    return parsed.k;
  }

  private sign(payload: string): Buffer {
    return this.keyring.sign('cursor', payload).subarray(0, 18);
  }
}

/**
 * Keyset pagination over one unique, ordered column (newest first by default). Reads limit+1 rows
 * to learn whether another page exists; there are no totals.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function keysetPage<Row extends object = any>(
  qb: Knex.QueryBuilder,
  opts: { cursors: Cursors; list: string; column: string; limit: number; cursor?: string; ascending?: boolean; keyOf?: (row: Row) => unknown },
): Promise<{ rows: Row[]; hasMore: boolean; nextCursor: string | null }> {
  const keyOf = opts.keyOf ?? ((row: Row) => (row as Record<string, unknown>)[opts.column.split('.').pop()!]);
  return keysetFetch(
    (after, take): Promise<Row[]> => {
      if (after !== undefined) qb.where(opts.column, opts.ascending ? '>' : '<', after);
      return qb.orderBy(opts.column, opts.ascending ? 'asc' : 'desc').limit(take);
    },
    { ...opts, keyOf },
  );
}

/**
 * The same keyset pagination for a list read without the query builder: `fetch` returns up to
 * `take` rows after the cursor's key (or from the start), in the list's order.
 */
export async function keysetFetch<Row>(
  fetch: (after: number | string | undefined, take: number) => Promise<readonly Row[]>,
  opts: { cursors: Cursors; list: string; limit: number; cursor?: string; keyOf: (row: Row) => unknown },
): Promise<{ rows: Row[]; hasMore: boolean; nextCursor: string | null }> {
  let after: number | string | undefined;
  if (opts.cursor !== undefined) {
    const key = opts.cursors.decode(opts.list, opts.cursor);
    if (typeof key !== 'number' && typeof key !== 'string') {
      throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
    }
    after = key;
  }
  const fetched = await fetch(after, opts.limit + 1);
  const hasMore = fetched.length > opts.limit;
  // A copy: what `fetch` returns may be shared with other requests (domain/services.ts).
  const rows = fetched.slice(0, opts.limit);
  const nextCursor = hasMore ? opts.cursors.encode(opts.list, opts.keyOf(rows[rows.length - 1])) : null;
  return { rows, hasMore, nextCursor };
}

export function listEnvelope<T>(data: T[], page: { hasMore: boolean; nextCursor: string | null }): ListEnvelope<T> {
  return { object: 'list', data, has_more: page.hasMore, next_cursor: page.nextCursor };
}

/** A stable fingerprint of a list and its filters, for the cursor's `list` binding. */
export function listFingerprint(route: string, filters: Record<string, unknown>): string {
  const entries = Object.entries(filters)
    .filter(([k, v]) => v !== undefined && k !== 'cursor' && k !== 'limit')
    .sort(([a], [b]) => a.localeCompare(b));
  return `${route}?${JSON.stringify(entries)}`;
}

/**
 * A page of a list the backend returns whole (a machine's IPs, templates or backups, a zone's
 * RRsets, a balancer's backends), with the same opaque cursors as database lists. `sortKey` orders
 * the items (ascending) and must be unique per item; the cursor carries the last key served.
 */
export function pageOfItems<T>(
  cursors: Cursors,
  list: string,
  items: readonly T[],
  sortKey: (item: T) => string,
  query: { limit: number; cursor?: string },
): { data: T[]; hasMore: boolean; nextCursor: string | null } {
  const sorted = [...items].sort((a, b) => (sortKey(a) < sortKey(b) ? -1 : sortKey(a) > sortKey(b) ? 1 : 0));
  let rest = sorted;
  if (query.cursor !== undefined) {
    const after = cursors.decode(list, query.cursor);
    if (typeof after !== 'string') throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
    rest = sorted.filter((item) => sortKey(item) > after);
  }
  const data = rest.slice(0, query.limit);
  const hasMore = rest.length > query.limit;
  return { data, hasMore, nextCursor: hasMore ? cursors.encode(list, sortKey(data[data.length - 1])) : null };
}
