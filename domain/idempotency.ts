import type { Knex } from 'knex';
import { createHash } from 'node:crypto';
import { ApiError } from '../api/errors';
import type { HandlerResult } from '../api/route';

/** Stored 24 hours (DECISIONS "Idempotency"). */
const RETENTION_MS = 24 * 3_600_000;
/** A `running` record older than this belongs to a request whose process died; it may be taken over. */
const ABANDONED_AFTER_MS = 60_000;
/** Response headers worth replaying. */
const REPLAYED_HEADERS = ['location'];

export interface IdempotentRequest {
  accountId: number;
  key: string;
  method: string;
  path: string;
  body: unknown;
}

export interface IdempotentOutcome extends HandlerResult {
  replayed: boolean;
}

function stableStringify(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableStringify).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableStringify(v)}`).join(',')}}`;
  }
  return JSON.stringify(value ?? null);
}

/** What makes two requests "the same" for a key: method, concrete path and the canonical body. */
export const requestHash = (r: Pick<IdempotentRequest, 'method' | 'path' | 'body'>) =>
  createHash('sha256').update(`${r.method}\n${r.path}\n${stableStringify(r.body)}`).digest('hex');

/**
 * Runs a mutation at most once per (account, Idempotency-Key). Only 2xx answers are stored and
 * replayed (same status, Location and body, plus `Idempotent-Replayed: true`); a failed attempt
 * releases the key so the client can retry.
 */
export async function runIdempotent(
  db: Knex,
  request: IdempotentRequest,
  run: () => Promise<HandlerResult>,
): Promise<IdempotentOutcome> {
  const hash = requestHash(request);
  for (let attempt = 0; attempt < 3; attempt++) {
    const inserted = await db('idempotency_keys')
      .insert({
        account_id: request.accountId,
        key: request.key,
        method: request.method,
        path: request.path,
        request_hash: hash,
        state: 'running',
        expires_at: new Date(Date.now() + RETENTION_MS),
      })
      .onConflict(['account_id', 'key'])
      .ignore()
      .returning('key');
    if (inserted.length > 0) return execute(db, request, run);

    const existing = await db('idempotency_keys').where({ account_id: request.accountId, key: request.key }).first();
    if (!existing) continue; // released between our insert and read: try again
    const expired = new Date(existing.expires_at).getTime() <= Date.now();
    const abandoned = existing.state === 'running' && Date.now() - new Date(existing.created_at).getTime() > ABANDONED_AFTER_MS;
    if (expired || abandoned) {
      await db('idempotency_keys')
        .where({ account_id: request.accountId, key: request.key, created_at: existing.created_at })
        .delete();
      continue;
    }
    if (existing.method !== request.method || existing.path !== request.path || existing.request_hash !== hash) {
      throw new ApiError(
        422,
        'invalid_request_error',
        'idempotency_key_reused',
        'This Idempotency-Key was used with a different method, path or body. Use a new key for a new request.',
      );
    }
    if (existing.state === 'running') {
      throw new ApiError(409, 'invalid_request_error', 'idempotency_key_in_use', 'A request with this Idempotency-Key is still running; retry shortly.');
    }
    return {
      replayed: true,
      status: existing.response_status,
      headers: { ...(existing.response_headers ?? {}), 'Idempotent-Replayed': 'true' },
      body: existing.response_body ?? undefined,
    };
  }
  throw new ApiError(409, 'invalid_request_error', 'idempotency_key_in_use', 'A request with this Idempotency-Key is still running; retry shortly.');
}

async function execute(db: Knex, request: IdempotentRequest, run: () => Promise<HandlerResult>): Promise<IdempotentOutcome> {
  const where = { account_id: request.accountId, key: request.key };
  let result: HandlerResult;
  try {
    result = await run();
  } catch (err) {
    await db('idempotency_keys').where(where).delete();
    throw err;
  }
  const status = result.status ?? 200;
  if (status >= 200 && status < 300) {
    const headers = Object.fromEntries(
      Object.entries(result.headers ?? {}).filter(([name]) => REPLAYED_HEADERS.includes(name.toLowerCase())),
    );
    await db('idempotency_keys')
      .where(where)
      .update({
        state: 'done',
        response_status: status,
        response_headers: JSON.stringify(headers),
        response_body: result.body === undefined ? null : JSON.stringify(result.body),
      });
  } else {
    await db('idempotency_keys').where(where).delete();
  }
  return { ...result, replayed: false };
}
