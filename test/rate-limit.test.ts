import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './helpers/db';
import { postgresCounters, RateLimiter, type CounterStore } from '../infra/rate-limit';

/**
 * The rate limiter over the counts in PostgreSQL, as several API processes share them: each
 * RateLimiter below stands for one process (its own leases), all on the same table.
 */
let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database?.drop());

const WINDOW = 60_000;
const limits = (perKey: number) => ({ default: { per_key: perKey, per_account: 1_000_000 }, mutations: { per_key: perKey, per_account: 1_000_000 } });

/** The PostgreSQL store behind a gate: each lease waits until the test opens it. */
function gatedStore() {
  const inner = postgresCounters(database.db);
  const gates: Array<() => void> = [];
  const store: CounterStore = {
    lease: async (...args) => {
      await new Promise<void>((resolve) => gates.push(resolve));
      return inner.lease(...args);
    },
    prune: inner.prune,
  };
  return { store, gates };
}

/** Whether a promise settles within a few turns of the event loop (nothing else is awaited meanwhile). */
async function settlesAtOnce(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void p.then(() => (settled = true));
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
  return settled;
}

describe('RateLimiter over PostgreSQL', () => {
  it('never lets more requests through than the budget, however many processes race for it', async () => {
    const now = Date.now();
    const processes = Array.from({ length: 4 }, () => new RateLimiter(limits(500), WINDOW, postgresCounters(database.db)));
    const decisions = await Promise.all(
      Array.from({ length: 800 }, (_, i) => processes[i % 4].hit({ keyId: 'key-race', accountId: null, tier: null, mutation: false, now })),
    );
    expect(decisions.filter((d) => d.allowed)).toHaveLength(500);
    const [{ used }] = await database.db('rate_limit_counters').where({ bucket: 'd:k:key-race' }).select('used');
    expect(Number(used)).toBe(500);
  });

  it('leases the next chunk while a quarter of the last is left, so a steady stream of requests does not wait for PostgreSQL', async () => {
    const { store, gates } = gatedStore();
    const limiter = new RateLimiter(limits(100_000), WINDOW, store);
    const now = Date.now();
    const hit = () => limiter.hit({ keyId: 'key-steady', accountId: null, tier: null, mutation: false, now });
    // The first request has nothing leased: it waits for its chunk (100).
    const first = hit();
    expect(await settlesAtOnce(first)).toBe(false);
    expect(gates).toHaveLength(1);
    gates.shift()!();
    expect((await first).allowed).toBe(true);
    // 73 more use the chunk without a lease; the next, which leaves 25, leases the next chunk ahead.
    for (let i = 0; i < 73; i++) expect((await hit()).allowed).toBe(true);
    expect(gates).toHaveLength(0);
    expect((await hit()).allowed).toBe(true);
    expect(gates).toHaveLength(1);
    // The last 25 of the chunk are answered while that lease is still out.
    for (let i = 0; i < 25; i++) expect(await settlesAtOnce(hit())).toBe(true);
    gates.shift()!();
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The chunk leased ahead serves the next requests at once.
    for (let i = 0; i < 10; i++) expect(await settlesAtOnce(hit())).toBe(true);
    const [{ used }] = await database.db('rate_limit_counters').where({ bucket: 'd:k:key-steady' }).select('used');
    expect(Number(used)).toBe(200);
  });
});
