/**
 * Fixed-window counters per key and per account, one set per bucket (`default` for every request,
 * `mutations` for writes). Counters live in the API process; with several API processes each
 * enforces the limits on its share of the traffic (docs/architecture.md).
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

export class RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(
    readonly buckets: Record<'default' | 'mutations', BucketLimits>,
    private readonly windowMs: number,
  ) {}

  /** Counts one request against every bucket that applies; denies if any is exhausted. */
  hit(input: { keyId: string; accountId: string | null; tier: string | null; mutation: boolean; now?: number }): RateLimitDecision {
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
    let tightest: RateLimitDecision = { allowed: true, limit: Infinity, remaining: Infinity, resetSeconds };
    const counters = checks.map(([name, limit]) => {
      let w = this.windows.get(name);
      if (!w || w.start !== windowStart) {
        w = { start: windowStart, count: 0 };
        this.windows.set(name, w);
      }
      return { w, limit };
    });
    const denied = counters.some(({ w, limit }) => w.count >= limit);
    for (const { w, limit } of counters) {
      if (!denied) w.count += 1;
      const remaining = Math.max(0, limit - w.count);
      if (remaining < tightest.remaining || (remaining === tightest.remaining && limit < tightest.limit)) {
        tightest = { allowed: !denied, limit, remaining, resetSeconds };
      }
    }
    if (this.windows.size > 100_000) this.prune(windowStart);
    return { ...tightest, allowed: !denied };
  }

  private prune(windowStart: number): void {
    for (const [name, w] of this.windows) if (w.start !== windowStart) this.windows.delete(name);
  }
}
