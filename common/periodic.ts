/** A loop that lives beside the worker (workers/background.ts): started before it polls, stopped after it drains. */
export interface BackgroundService {
  name: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A loop that runs beside the worker (workers/background.ts): `pass()` every `intervalMs`, one pass
 * at a time (a pass that overruns delays the next instead of overlapping it), and once at start
 * when `atStart` is set. `stop()` clears the timer and waits for the pass in progress. Passes handle
 * their own errors: they log, and leave the retry to the next pass.
 */
export abstract class PeriodicService {
  abstract readonly name: string;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<unknown> = Promise.resolve();

  constructor(private readonly every: { intervalMs: number; atStart?: boolean }) {}

  protected abstract pass(): Promise<unknown>;

  async start(): Promise<void> {
    if (this.every.atStart) this.running = this.pass();
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.pass());
    }, this.every.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }
}
