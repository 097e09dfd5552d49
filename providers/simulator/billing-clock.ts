import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import { BackendUnavailableError } from '../errors';

/**
 * The simulated billing system's own clock. A real billing system carries out cancellation requests
 * by itself (immediately, or at the end of the cycle); this loop does it for the simulator, in the
 * worker process, every SIM_BILLING_INTERVAL.
 */
export class SimulatedBillingClock extends PeriodicService {
  readonly name = 'simulated-billing-clock';
  constructor(
    /** Carries out what is due by that day and returns the services it terminated (domain/orders/store.ts). */
    private readonly carryOut: (today: string) => Promise<number[]>,
    intervalMs: number,
    private readonly logger: Logger,
  ) {
    super({ intervalMs });
  }

  protected pass() {
    return this.tick();
  }

  /** One pass: terminates the services whose cancellation is due today (UTC) or earlier. */
  async tick(today = new Date().toISOString().slice(0, 10)): Promise<number[]> {
    try {
      const terminated = await this.carryOut(today);
      if (terminated.length) this.logger.info({ services: terminated.map((id) => `svc_${id}`) }, 'billing carried out cancellations');
      return terminated;
    } catch (err) {
      // Billing switched off: the next pass tries again.
      if (!(err instanceof BackendUnavailableError)) this.logger.error({ err: (err as Error).message }, 'billing clock pass failed');
      return [];
    }
  }
}
