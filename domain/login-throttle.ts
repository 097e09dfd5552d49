import type { Knex } from 'knex';
import { isIPv4, isIPv6 } from 'node:net';
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
 * The part of a client address one party owns, which the per-address bucket counts: an IPv4 address
 * as is (also when written IPv4-mapped, `::ffff:192.0.2.1`), an IPv6 address by its /64
 * (`2001:db8:1:2::/64`), since one host or home network gets a whole /64 and could otherwise take a
 * fresh address for every guess. Anything else (no address) is returned unchanged.
 */
export function addressGroup(ip: string): string {
  const bare = ip.replace(/%.*$/, ''); // a zone (`fe80::1%eth0`) names an interface, not a host
  if (isIPv4(bare)) return bare;
  if (!isIPv6(bare)) return ip;
  // The URL parser writes every IPv6 form the same way (lower case, hex words, one `::`).
  const canonical = new URL(`http://[${bare}]/`).hostname.slice(1, -1);
  const [head, tail] = canonical.split('::');
  const first = head ? head.split(':') : [];
  const last = tail ? tail.split(':') : [];
  const words = [...first, ...Array<string>(8 - first.length - last.length).fill('0'), ...last].map((w) => parseInt(w, 16));
  if (words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff) {
    return [words[6] >> 8, words[6] & 0xff, words[7] >> 8, words[7] & 0xff].join('.');
  }
  return `${words
    .slice(0, 4)
    .map((w) => w.toString(16))
    .join(':')}::/64`;
}

/**
 * Sign-in throttling, per email address and per client IP, in fixed windows stored in PostgreSQL:
 * every API process counts against the same buckets. An attempt is counted before the password is
 * checked (so parallel guesses cannot slip past the limit); a successful sign-in clears its email's
 * bucket and gives its IP's attempt back, so that only failures accumulate. Unknown and known
 * addresses are counted alike (nothing tells them apart). The email is stored hashed.
 *
 * A bearer token that is no credential at all (`invalid_api_key`, what a guess gets) counts against
 * a per-address bucket of its own with the same limit (`failedCredential`). Past the limit this process refuses further
 * guesses from that address until the window ends (`blockedFor`, memory only, so a blocked guesser
 * costs no query); valid credentials from the address are not affected (api/authenticate.ts).
 */
export class LoginThrottle {
  /** Address bucket -> until when (epoch ms) this process refuses its guesses. */
  private readonly blocked = new Map<string, number>();

  constructor(
    private readonly db: Knex,
    private readonly limits: LoginThrottleLimits,
  ) {}

  static emailBucket(email: string): string {
    return `email:${sha256Hex(email.trim().toLowerCase())}`;
  }

  static ipBucket(ip: string | null): string {
    return `ip:${ip === null ? 'unknown' : addressGroup(ip)}`;
  }

  /**
   * Guessed tokens count in a bucket of their own per address, with the same limit: a script with a
   * stale token behind an office's or a carrier's NAT must not hold off that address's sign-ins.
   */
  static tokenBucket(ip: string | null): string {
    return `token:${ip === null ? 'unknown' : addressGroup(ip)}`;
  }

  /** Counts one attempt against both buckets; refused when either is over its limit. */
  async attempt(email: string, ip: string | null): Promise<LoginVerdict> {
    return verdictOf(
      await Promise.all([this.count(LoginThrottle.emailBucket(email), this.limits.perEmail), this.count(LoginThrottle.ipBucket(ip), this.limits.perIp)]),
    );
  }

  /**
   * A bearer token that is no credential, from `ip`: one failed attempt against the address's
   * token bucket (LOGIN_MAX_ATTEMPTS_PER_IP per window, like sign-ins, counted apart from them).
   * Refused past the limit, and then remembered by this process (blockedFor) until the window ends.
   */
  async failedCredential(ip: string | null): Promise<LoginVerdict> {
    const bucket = LoginThrottle.tokenBucket(ip);
    const verdict = verdictOf([await this.count(bucket, this.limits.perIp)]);
    if (!verdict.allowed) {
      this.blocked.set(bucket, Date.now() + verdict.retryAfterSeconds * 1000);
      if (this.blocked.size > 10_000) this.forgetEnded();
    }
    return verdict;
  }

  /** Seconds this process still refuses guessed tokens from `ip` (0: none). Memory only, no query. */
  blockedFor(ip: string | null): number {
    if (this.blocked.size === 0) return 0;
    const bucket = LoginThrottle.tokenBucket(ip);
    const until = this.blocked.get(bucket);
    if (until === undefined) return 0;
    if (until <= Date.now()) {
      this.blocked.delete(bucket);
      return 0;
    }
    return Math.max(1, Math.ceil((until - Date.now()) / 1000));
  }

  private forgetEnded(): void {
    const now = Date.now();
    for (const [bucket, until] of this.blocked) if (until <= now) this.blocked.delete(bucket);
  }

  /** Counts one attempt in `bucket`'s current window. */
  private async count(bucket: string, limit: number): Promise<{ over: boolean; remaining: number }> {
    const window = `${this.limits.windowMs} milliseconds`;
    const { rows } = await this.db.raw(
      `insert into login_throttle (bucket, attempts, window_started_at) values (?, 1, now())
       on conflict (bucket) do update set
         attempts = case when login_throttle.window_started_at <= now() - ?::interval then 1 else login_throttle.attempts + 1 end,
         window_started_at = case when login_throttle.window_started_at <= now() - ?::interval then now() else login_throttle.window_started_at end
       returning attempts, extract(epoch from (window_started_at + ?::interval - now())) as remaining`,
      [bucket, window, window, window],
    );
    return { over: Number(rows[0].attempts) > limit, remaining: Number(rows[0].remaining) };
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

function verdictOf(counts: Array<{ over: boolean; remaining: number }>): LoginVerdict {
  const over = counts.filter((c) => c.over);
  if (over.length === 0) return { allowed: true, retryAfterSeconds: 0 };
  return { allowed: false, retryAfterSeconds: Math.max(1, Math.ceil(Math.max(...over.map((c) => c.remaining)))) };
}
