import type { Config } from '../common/config';
import type { Logger } from '../common/logger';
import { PeriodicService } from '../common/periodic';
import type { Db } from '../db/knex';
import { sweepExpiredIdempotencyKeys } from '../domain/idempotency';
import { LoginThrottle } from '../domain/login-throttle';
import type { BackgroundService } from './background';

/**
 * Deletes records whose time is up, every RETENTION_SWEEP_INTERVAL: idempotency keys past their
 * 24 hours and sign-in throttle windows that have ended. Each pass deletes in bounded batches; a failed pass is retried by the next one.
 */
export class RetentionSweeper extends PeriodicService implements BackgroundService {
  readonly name = 'retention-sweeper';
  private readonly throttle: LoginThrottle;

  constructor(private readonly deps: { db: Db; config: Config; logger: Logger }) {
    super({ intervalMs: deps.config.RETENTION_SWEEP_INTERVAL });
    this.throttle = new LoginThrottle(deps.db, {
      perEmail: deps.config.LOGIN_MAX_ATTEMPTS_PER_EMAIL,
      perIp: deps.config.LOGIN_MAX_ATTEMPTS_PER_IP,
      windowMs: deps.config.LOGIN_THROTTLE_WINDOW,
    });
  }

  protected pass() {
    return this.sweep();
  }

  async sweep(): Promise<{ idempotencyKeys: number; loginThrottle: number }> {
    try {
      return { idempotencyKeys: await sweepExpiredIdempotencyKeys(this.deps.db), loginThrottle: await this.throttle.sweep() };
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'retention sweep failed; next pass retries');
      return { idempotencyKeys: 0, loginThrottle: 0 };
    }
  }
}
