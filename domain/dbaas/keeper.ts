import type { Logger } from '../../common/logger';
import type { DbaasProvider } from '../../providers/dbaas.provider';

/**
 * Keeps the database instances that should run running, beside the worker: at start (after a host
 * restart no server process is left) and then every `intervalMs` (a crashed one comes back). An
 * instance stopped on purpose stays stopped; the instances themselves never depend on the worker.
 */
export class InstanceKeeper {
  readonly name = 'dbaas-keeper';
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();

  constructor(private readonly deps: { dbaas: DbaasProvider; logger: Logger; intervalMs: number }) {}

  async start(): Promise<void> {
    this.running = this.pass();
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.pass());
    }, this.deps.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
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
