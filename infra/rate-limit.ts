import type { Knex } from 'knex';
import { preparedQuery } from '../db/knex';

/**
 * Fixed-window budgets per key and per account, one set per bucket (`default` for every request,
 * `mutations` for writes), shared by every API process: the counts live in PostgreSQL
 * (`rate_limit_counters`), and each process leases requests from them in chunks, so that a
 * request costs no round trip while its process holds a lease. Chunks shrink as a window's budget
 * runs out (an eighth of what is left, at most 100, at least 1), so no process can take much more
 * than its share and the last requests of a budget are counted one by one: across any number of
 * processes a budget is never exceeded, and it is denied early by at most the few requests other
 * processes hold leased but unused.
 */
export interface BucketLimits {
  per_key: number;
  per_account: number;
}

export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  resetSeconds: number;
}

/**
 * Multipliers of a key's own budgets by its `rate_limit_tier`. Only the account owner can set a tier
 * above standard, and the per-account budgets are never multiplied: they are the account's ceiling
 * for all its keys together, so one key's tier never raises what the others may use.
 */
export const RATE_LIMIT_TIERS: Record<string, number> = { standard: 1, high: 10 };

/** Where the counts of a window live (PostgreSQL for the API; tests may pass their own). */
export interface CounterStore {
  /** Takes `want` requests of a window's budget if they fit, else none; returns what it got and the window's count after it. */
  lease(bucket: string, windowStart: number, want: number, limit: number): Promise<{ granted: number; used: number }>;
  /** Forgets windows that ended before `before`. */
  prune(before: number): Promise<void>;
}

const LEASE_SQL =
  'insert into rate_limit_counters as c (bucket, window_start, used) select $1, $2::bigint, $3::int where $3::int <= $4::int ' +
  'on conflict (bucket, window_start) do update set used = c.used + excluded.used where c.used + excluded.used <= $4::int returning c.used';

export function postgresCounters(db: Knex): CounterStore {
  return {
    async lease(bucket, windowStart, want, limit) {
      // The whole chunk if it fits, else a single request (the budget's last ones), else nothing.
      for (const n of want > 1 ? [want, 1] : [1]) {
        const [row] = await preparedQuery<{ used: number }>(db, 'rate-limit-lease', LEASE_SQL, [bucket, windowStart, n, limit]);
        if (row) return { granted: n, used: Number(row.used) };
      }
      return { granted: 0, used: limit };
    },
    async prune(before) {
      await db('rate_limit_counters').where('window_start', '<', before).delete();
    },
  };
}

interface Lease {
  windowStart: number;
  /** Requests leased and not yet used by this process. */
  tokens: number;
  /** The window's count (all processes) after this process's last lease. */
  used: number;
  /** The window's budget is spent: nothing more to lease until the next window. */
  spent: boolean;
  /** The size of the last chunk granted: the next is leased when a quarter of it is left. */
  chunk: number;
  refilling: Promise<void> | null;
}

export class RateLimiter {
  private readonly leases = new Map<string, Lease>();
  private prunedWindow = 0;

  constructor(
    readonly buckets: Record<'default' | 'mutations', BucketLimits>,
    private readonly windowMs: number,
    private readonly store: CounterStore,
  ) {}

  /** Counts one request against every bucket that applies; denies (and counts nothing) if any is exhausted. */
  async hit(input: { keyId: string; accountId: string | null; tier: string | null; mutation: boolean; now?: number }): Promise<RateLimitDecision> {
    const now = input.now ?? Date.now();
    const factor = RATE_LIMIT_TIERS[input.tier ?? 'standard'] ?? 1;
    const checks: Array<[string, number]> = [[`d:k:${input.keyId}`, this.buckets.default.per_key * factor]];
    if (input.accountId) checks.push([`d:a:${input.accountId}`, this.buckets.default.per_account]);
    if (input.mutation) {
      checks.push([`m:k:${input.keyId}`, this.buckets.mutations.per_key * factor]);
      if (input.accountId) checks.push([`m:a:${input.accountId}`, this.buckets.mutations.per_account]);
    }
    const windowStart = now - (now % this.windowMs);
    const resetSeconds = Math.max(1, Math.ceil((windowStart + this.windowMs - now) / 1000));
    this.pruneBefore(windowStart);

    const leases = checks.map(([name]) => this.leaseOf(name, windowStart));
    // Lease where this process has nothing left (other requests may take what arrives meanwhile: look again).
    for (;;) {
      const empty = leases.map((lease, i) => (lease.tokens > 0 || lease.spent ? null : this.refill(checks[i][0], checks[i][1], lease))).filter(Boolean);
      if (empty.length === 0) break;
      await Promise.all(empty);
    }
    const denied = leases.some((lease) => lease.tokens <= 0);
    if (!denied) for (const lease of leases) lease.tokens--;
    // The next chunk is leased before this one runs out, so that requests seldom wait for PostgreSQL
    // (a failure here is met again, and answered, by the request that finds no token left).
    leases.forEach((lease, i) => {
      if (!lease.spent && !lease.refilling && lease.tokens > 0 && lease.tokens * 4 <= lease.chunk) {
        this.refill(checks[i][0], checks[i][1], lease).catch(() => undefined);
      }
    });

    let tightest: RateLimitDecision = { allowed: !denied, limit: Infinity, remaining: Infinity, resetSeconds };
    leases.forEach((lease, i) => {
      const limit = checks[i][1];
      const remaining = Math.max(0, limit - lease.used + lease.tokens);
      if (remaining < tightest.remaining || (remaining === tightest.remaining && limit < tightest.limit)) {
        tightest = { allowed: !denied, limit, remaining, resetSeconds };
      }
    });
    return tightest;
  }

  private leaseOf(name: string, windowStart: number): Lease {
    let lease = this.leases.get(name);
    if (!lease || lease.windowStart !== windowStart) {
      lease = { windowStart, tokens: 0, used: 0, spent: false, chunk: 0, refilling: null };
      this.leases.set(name, lease);
    }
    return lease;
  }

  /** One lease at a time per bucket and process. */
  private refill(name: string, limit: number, lease: Lease): Promise<void> {
    lease.refilling ??= (async () => {
      try {
        const want = Math.min(100, Math.max(1, Math.floor((limit - lease.used) / 8)));
        const { granted, used } = await this.store.lease(name, lease.windowStart, want, limit);
        lease.tokens += granted;
        lease.chunk = granted;
        lease.used = used;
        if (granted === 0) lease.spent = true;
      } finally {
        lease.refilling = null;
      }
    })();
    return lease.refilling;
  }

  /** Once per window: the counts and leases of windows that are over. */
  private pruneBefore(windowStart: number): void {
    if (this.prunedWindow === windowStart) return;
    this.prunedWindow = windowStart;
    for (const [name, lease] of this.leases) if (lease.windowStart < windowStart) this.leases.delete(name);
    this.store.prune(windowStart - this.windowMs).catch(() => undefined);
  }
}
