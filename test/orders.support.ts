import { randomUUID } from 'node:crypto';
import type { Stack } from './helpers/stack';
import { createAccount, createApiKey, createUser } from './helpers/fixtures';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../domain/scopes';
import type { BackendFamily } from '../providers/switchboard';

/** Shared by the orders test files: customers with their own credit, order placement, polling. */

export interface Customer {
  accountId: number;
  userId: number;
  token: string;
}

export async function newCustomer(stack: Stack, opts: { credit?: number; currency?: string; scopes?: string[] } = {}): Promise<Customer> {
  const { accountId } = await createAccount(stack.db, { credit: opts.credit ?? 0, currency: opts.currency });
  const { userId } = await createUser(stack.db, accountId, { isOwner: true });
  const key = await createApiKey(stack.db, accountId, userId, {
    scopes: opts.scopes ?? ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s)),
  });
  return { accountId, userId, token: key.token };
}

export function placeOrder(stack: Stack, customer: Customer, body: unknown, key: string = randomUUID()) {
  return stack.http.post('/v1/orders', { token: customer.token, body, headers: { 'idempotency-key': key } });
}

export async function waitFor<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 20_000, everyMs = 100): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value) || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The operation as stored in PostgreSQL (every transition is persisted by the workflow). */
export function storedOperation(stack: Stack, id: string) {
  return stack.db('operations').where({ id }).first();
}

export async function eventsFor(stack: Stack, accountId: number, type: string) {
  return stack.db('events').where({ account_id: accountId, type }).orderBy('created_at');
}

/**
 * Switches a simulated backend family off or on, then waits out the switchboard's 200 ms cache so
 * that the worker's own switchboard sees the change too.
 */
export async function setBackendDown(stack: Stack, family: BackendFamily, down: boolean): Promise<void> {
  await stack.api.deps.providers.switchboard.setDown(family, down);
  await new Promise((r) => setTimeout(r, 300));
}
