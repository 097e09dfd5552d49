import type { Knex } from 'knex';
import { sha256Hex } from '../common/crypto';

export interface LoginThrottleLimits {
  /** Sign-in attempts per email address in one window. */
  perEmail: number;
  /** Sign-in attempts per client IP in one window. */
  perIp: number;
  windowMs: number;
}

export interface LoginVerdict {
  allowed: boolean;
  /** Seconds until the window of the exhausted bucket ends (when refused). */
  retryAfterSeconds: number;
}

/**
 * Sign-in throttling, per email address and per client IP, in fixed windows stored in PostgreSQL:
 * every API process counts against the same buckets. An attempt is counted before the password is
 * checked (so parallel guesses cannot slip past the limit); a successful sign-in clears its email's
 * bucket and gives its IP's attempt back, so that only failures accumulate. Unknown and known
 * addresses are counted alike (nothing tells them apart). The email is stored hashed.
 */
export class LoginThrottle {
  constructor(
    private readonly db: Knex,
    private readonly limits: LoginThrottleLimits,
  ) {}

  static emailBucket(email: string): string {
    return `email:${sha256Hex(email.trim().toLowerCase())}`;
  }

  static ipBucket(ip: string | null): string {
    return `ip:${ip ?? 'unknown'}`;
  }

  /** Counts one attempt against both buckets; refused when either is over its limit. */
  async attempt(email: string, ip: string | null): Promise<LoginVerdict> {
    const window = `${this.limits.windowMs} milliseconds`;
    const counts = await Promise.all(
      [
        [LoginThrottle.emailBucket(email), this.limits.perEmail],
        [LoginThrottle.ipBucket(ip), this.limits.perIp],
      ].map(async ([bucket, limit]) => {
        const { rows } = await this.db.raw(
          `insert into login_throttle (bucket, attempts, window_started_at) values (?, 1, now())
           on conflict (bucket) do update set
             attempts = case when login_throttle.window_started_at <= now() - ?::interval then 1 else login_throttle.attempts + 1 end,
             window_started_at = case when login_throttle.window_started_at <= now() - ?::interval then now() else login_throttle.window_started_at end
           returning attempts, extract(epoch from (window_started_at + ?::interval - now())) as remaining`,
          [bucket, window, window, window],
        );
        return { over: Number(rows[0].attempts) > Number(limit), remaining: Number(rows[0].remaining) };
      }),
    );
    const over = counts.filter((c) => c.over);
    if (over.length === 0) return { allowed: true, retryAfterSeconds: 0 };
    return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil(Math.max(...over.map((c) => c.remaining)))) };
  }

  /** A successful sign-in: the email starts afresh, and the IP gets its attempt back. */
  async succeeded(email: string, ip: string | null): Promise<void> {
    await this.db('login_throttle')
      .where({ bucket: LoginThrottle.emailBucket(email) })
      .delete();
    await this.db('login_throttle')
      .where({ bucket: LoginThrottle.ipBucket(ip) })
      .update({ attempts: this.db.raw('greatest(attempts - 1, 0)') });
  }

  /** Drops buckets whose window has ended (run by the worker's retention sweeper). */
  async sweep(): Promise<number> {
    return this.db('login_throttle')
      .where('window_started_at', '<', this.db.raw(`now() - ?::interval`, [`${this.limits.windowMs} milliseconds`]))
      .delete();
  }
}
