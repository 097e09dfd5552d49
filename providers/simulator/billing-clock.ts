import type { Logger } from '../../common/logger';
import { BackendUnavailableError } from '../errors';

/**
 * The simulated billing system's own clock. A real billing system carries out cancellation requests
 * by itself (immediately, or at the end of the cycle); this loop does it for the simulator, in the
 * worker process, every SIM_BILLING_INTERVAL.
 */
export class SimulatedBillingClock {
  readonly name = 'simulated-billing-clock';
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();

  constructor(
    /** Carries out what is due by that day and returns the services it terminated (domain/orders/store.ts). */
    private readonly carryOut: (today: string) => Promise<number[]>,
    private readonly intervalMs: number,
    private readonly logger: Logger,
  ) {}

  async start(): Promise<void> {
    this.timer = setInterval(() => {
      this.running = this.running.then(async () => {
        await this.tick();
      });
    }, this.intervalMs);
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
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
