import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import type { DbaasProvider } from '../../providers/dbaas.provider';

/**
 * Keeps the database instances that should run running, beside the worker: at start (after a host
 * restart no server process is left) and then every `intervalMs` (a crashed one comes back). An
 * instance stopped on purpose stays stopped; the instances themselves never depend on the worker.
 */
export class InstanceKeeper extends PeriodicService {
  readonly name = 'dbaas-keeper';

  constructor(private readonly deps: { dbaas: DbaasProvider; logger: Logger; intervalMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    try {
      const { started, failed } = await this.deps.dbaas.resumeInstances();
      if (started.length) this.deps.logger.info({ instances: started }, 'database instances that should run were started');
      for (const f of failed) this.deps.logger.warn({ instance: f.name, err: f.error }, 'database instance could not be started; next pass retries');
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'database instance keeper pass failed; next pass retries');
    }
  }
}
