import type { Knex } from 'knex';
import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash, randomUUID } from 'node:crypto';
import type { Keyring } from '../common/crypto';
import type { Logger } from '../common/logger';
import { DomainError } from './errors';
import { presentOperation } from './operations/contract';
import { stableStringify } from '../common/stable-json';

/** Stored 24 hours (DECISIONS "Idempotency"); the worker's retention sweeper deletes them after. */
export const RETENTION_MS = 24 * 3_600_000;
/** Response headers worth replaying. */
const REPLAYED_HEADERS = ['location'];
/** Keyring purpose of the request fingerprints. */
const FINGERPRINT_PURPOSE = 'idempotency-fingerprint';
const FINGERPRINT_PREFIX = 'hmac-sha256:';

export interface IdempotentRequest {
  accountId: number;
  key: string;
  method: string;
  path: string;
  body: unknown;
}

/**
 * The answer a request gave, as kept for replay. It has the shape of a route handler's result
 * (api/route.ts HandlerResult), declared here so that the domain does not depend on the API.
 */
export interface RecordedAnswer {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export interface IdempotentOutcome extends RecordedAnswer {
  replayed: boolean;
}

export interface IdempotencyDeps {
  db: Knex;
  keyring: Keyring;
  /** A `running` record whose owner has not finished within this is taken to be abandoned (its process died). */
  abandonAfterMs: number;
  /**
   * Starts the workflow of an operation that an abandoned request created (OperationService.startFromRow:
   * from the row's `workflow_start`, within OPERATION_START_TIMEOUT, a start that already happened
   * counting as started). Passed in rather than imported: the operation service imports this module.
   */
  startOperation: (operationId: string) => Promise<unknown>;
  logger: Logger;
}

const canonical = (r: Pick<IdempotentRequest, 'method' | 'path' | 'body'>) => `${r.method}\n${r.path}\n${stableStringify(r.body)}`;

/**
 * What makes two requests "the same" for a key: method, concrete path and the canonical body,
 * keyed with the instance's keyring (HMAC), so that a stored fingerprint of a body holding a
 * password cannot be tested against guesses by someone who reads the table.
 */
export const requestFingerprint = (keyring: Keyring, r: Pick<IdempotentRequest, 'method' | 'path' | 'body'>) =>
  `${FINGERPRINT_PREFIX}${keyring.sign(FINGERPRINT_PURPOSE, canonical(r)).toString('hex')}`;

/** The unkeyed SHA-256 of records written before fingerprints were keyed (they live at most 24 hours). */
export const legacyRequestHash = (r: Pick<IdempotentRequest, 'method' | 'path' | 'body'>) => createHash('sha256').update(canonical(r)).digest('hex');

function sameFingerprint(stored: string, keyring: Keyring, r: IdempotentRequest, fingerprint: string): boolean {
  return stored.startsWith(FINGERPRINT_PREFIX) ? stored === fingerprint : stored === legacyRequestHash(r);
}

/** The record a request holds while its handler runs (read by OperationService.start to bind its operation). */
export interface IdempotencyClaim {
  accountId: number;
  key: string;
  token: string;
}

const claims = new AsyncLocalStorage<IdempotencyClaim>();

/** Whether the request being handled holds an Idempotency-Key (its operation must be bound to it). */
export function idempotencyClaimed(): boolean {
  return claims.getStore() !== undefined;
}

/**
 * Inside an operation's transaction: binds the operation to the Idempotency-Key of the request that
 * creates it, so that a retry after a crash answers with this operation instead of starting another.
 * Refuses (409, rolling the operation back) when the key was taken over meanwhile by a retry that
 * judged this request abandoned: then exactly one of the two may create the operation.
 */
export async function bindOperationToIdempotencyKey(trx: Knex.Transaction, operationId: string): Promise<void> {
  const claim = claims.getStore();
  if (!claim) return;
  const bound = await trx('idempotency_keys')
    .where({ account_id: claim.accountId, key: claim.key, owner_token: claim.token })
    .update({ operation_id: operationId });
  if (bound === 0) throw inUse();
}

const inUse = () =>
  new DomainError(409, 'invalid_request_error', 'idempotency_key_in_use', 'A request with this Idempotency-Key is still running; retry shortly.');

interface KeyRow {
  method: string;
  path: string;
  request_hash: string;
  state: 'running' | 'done';
  owner_token: string;
  operation_id: string | null;
  response_status: number | null;
  response_headers: Record<string, string> | null;
  response_body: unknown;
  expires_at: Date;
  locked_at: Date;
}

/**
 * Runs a mutation at most once per (account, Idempotency-Key). Only 2xx answers are stored and
 * replayed (same status, Location and body, plus `Idempotent-Replayed: true`); a failed attempt
 * releases the key so the client can retry.
 *
 * Each attempt owns the record through a random token, and every change of the record is a
 * compare-and-swap on that token (never on a timestamp, whose precision the driver does not keep).
 * A `running` record whose owner has not finished within `abandonAfterMs` belonged to a process
 * that died: if it had created its operation (bound in the operation's transaction), the retry
 * starts that operation's workflow if it had not been (resumeOperation) and answers with the
 * operation, as the first request would have; if not, nothing was started and the retry takes the
 * record over and runs the request.
 */
export async function runIdempotent(deps: IdempotencyDeps, request: IdempotentRequest, run: () => Promise<RecordedAnswer>): Promise<IdempotentOutcome> {
  const { db } = deps;
  const fingerprint = requestFingerprint(deps.keyring, request);
  const where = { account_id: request.accountId, key: request.key };
  const token = randomUUID();
  for (let attempt = 0; attempt < 5; attempt++) {
    const inserted = await db('idempotency_keys')
      .insert({
        ...where,
        method: request.method,
        path: request.path,
        request_hash: fingerprint,
        state: 'running',
        owner_token: token,
        locked_at: db.fn.now(),
        expires_at: new Date(Date.now() + RETENTION_MS),
      })
      .onConflict(['account_id', 'key'])
      .ignore()
      .returning('key');
    if (inserted.length > 0) return execute(deps, request, token, run);

    const existing: KeyRow | undefined = await db('idempotency_keys').where(where).first();
    if (!existing) continue; // released between our insert and read: try again
    const held = { ...where, owner_token: existing.owner_token };
    if (new Date(existing.expires_at).getTime() <= Date.now()) {
      // Past its 24 hours (the sweeper had not got to it yet): the key is free again.
      await db('idempotency_keys').where(held).delete();
      continue;
    }
    if (existing.method !== request.method || existing.path !== request.path || !sameFingerprint(existing.request_hash, deps.keyring, request, fingerprint)) {
      throw new DomainError(
        422,
        'invalid_request_error',
        'idempotency_key_reused',
        'This Idempotency-Key was used with a different method, path or body. Use a new key for a new request.',
      );
    }
    if (existing.state === 'done') return replay(existing);
    if (Date.now() - new Date(existing.locked_at).getTime() <= deps.abandonAfterMs) throw inUse();

    // Abandoned: its process died while running the request.
    if (existing.operation_id) {
      const operation = await db('operations').where({ id: existing.operation_id }).first();
      if (operation) {
        await resumeOperation(deps, operation.id);
        const answer = { status: 202, headers: { Location: `/v1/operations/${operation.id}` }, body: presentOperation(operation) };
        await db('idempotency_keys')
          .where(held)
          .update({
            state: 'done',
            response_status: answer.status,
            response_headers: JSON.stringify(answer.headers),
            response_body: JSON.stringify(answer.body),
          });
        return { ...answer, headers: { ...answer.headers, 'Idempotent-Replayed': 'true' }, replayed: true };
      }
    }
    const taken = await db('idempotency_keys').where(held).update({ owner_token: token, locked_at: db.fn.now(), operation_id: null });
    if (taken > 0) return execute(deps, request, token, run);
    // Someone else took it over first: look again.
  }
  throw inUse();
}

/**
 * The abandoned request committed its operation and may have died before starting its workflow.
 * The committed row is the intent, so the retry starts it before answering 202 with it (a workflow
 * that did start is not started again: its id is the operation id). If Temporal does not take the
 * start within its deadline, the answer is still 202: the row holds what starting it takes, and the
 * orphan sweeper starts it once Temporal answers (a late start of this one and the sweeper's are one
 * run). A 503 here would be wrong: the action still happens, and the key, kept bound to the
 * operation, could never answer otherwise. A row that cannot say how to start (written before
 * `workflow_start`) is left to the sweeper, which fails it `not_started`.
 */
async function resumeOperation(deps: IdempotencyDeps, operationId: string): Promise<void> {
  try {
    await deps.startOperation(operationId);
  } catch (err) {
    deps.logger.warn(
      { err: (err as Error).message, operation: operationId },
      'could not start the workflow of an abandoned request; answering 202, the orphan sweeper starts it',
    );
  }
}

function replay(row: KeyRow): IdempotentOutcome {
  return {
    replayed: true,
    status: row.response_status ?? 200,
    headers: { ...(row.response_headers ?? {}), 'Idempotent-Replayed': 'true' },
    body: row.response_body ?? undefined,
  };
}

/**
 * Keeps the owner's hold on its record fresh while its request runs: every third of the abandon
 * time, `locked_at` moves to now. A request that works longer than IDEMPOTENCY_ABANDON_AFTER (a
 * synchronous DBaaS restart, a slow backend) is then never taken for dead, so a retry with its key
 * answers `409 idempotency_key_in_use` instead of running the request a second time. Only a process
 * that died stops beating, and its record is taken over as before. Returns the stop function.
 */
function holdWhileRunning(deps: IdempotencyDeps, mine: Record<string, unknown>): () => Promise<void> {
  const every = Math.max(50, Math.floor(deps.abandonAfterMs / 3));
  let stopped = false;
  let beat: Promise<unknown> = Promise.resolve();
  let timer: NodeJS.Timeout;
  const schedule = () => {
    timer = setTimeout(() => {
      // A failed beat is retried by the next one; the request itself is not disturbed.
      beat = deps
        .db('idempotency_keys')
        .where({ ...mine, state: 'running' })
        .update({ locked_at: deps.db.fn.now() })
        .catch(() => undefined)
        .finally(() => {
          if (!stopped) schedule();
        });
    }, every);
    timer.unref();
  };
  schedule();
  return async () => {
    stopped = true;
    clearTimeout(timer);
    await beat;
  };
}

async function execute(deps: IdempotencyDeps, request: IdempotentRequest, token: string, run: () => Promise<RecordedAnswer>): Promise<IdempotentOutcome> {
  const mine = { account_id: request.accountId, key: request.key, owner_token: token };
  let result: RecordedAnswer;
  const stopHolding = holdWhileRunning(deps, mine);
  try {
    result = await claims.run({ accountId: request.accountId, key: request.key, token }, run);
  } catch (err) {
    await stopHolding();
    await deps.db('idempotency_keys').where(mine).delete();
    throw err;
  }
  await stopHolding();
  const status = result.status ?? 200;
  if (status >= 200 && status < 300) {
    const headers = Object.fromEntries(Object.entries(result.headers ?? {}).filter(([name]) => REPLAYED_HEADERS.includes(name.toLowerCase())));
    await deps
      .db('idempotency_keys')
      .where(mine)
      .update({
        state: 'done',
        response_status: status,
        response_headers: JSON.stringify(headers),
        response_body: result.body === undefined ? null : JSON.stringify(result.body),
      });
  } else {
    await deps.db('idempotency_keys').where(mine).delete();
  }
  return { ...result, replayed: false };
}

/** Deletes records past their 24 hours, in batches (the worker's retention sweeper). */
export async function sweepExpiredIdempotencyKeys(db: Knex, batch = 1_000): Promise<number> {
  let total = 0;
  for (;;) {
    const deleted = await db('idempotency_keys')
      .whereIn(['account_id', 'key'], db('idempotency_keys').select('account_id', 'key').where('expires_at', '<=', db.fn.now()).limit(batch))
      .delete();
    total += deleted;
    if (deleted < batch) return total;
  }
}
