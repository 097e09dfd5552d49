import type { Knex } from 'knex';
import { BACKENDS, type Backend } from '../common/families';
import { BackendUnavailableError } from './errors';

/**
 * The fault switch: each backend can be taken down (POST /_dev/backends/{family}/outage) and every
 * call to it then fails like an unreachable backend. The flag lives in PostgreSQL so the API and
 * the worker agree on it. It wraps a provider (withOutageSwitch), simulator or real adapter alike.
 */
export const BACKEND_FAMILIES = BACKENDS;
export type BackendFamily = Backend;

export class BackendSwitchboard {
  private cached: { at: number; down: Set<string> } | null = null;

  constructor(
    private readonly db: Knex,
    private readonly cacheMs = 200,
  ) {}

  async downFamilies(): Promise<Set<string>> {
    if (this.cached && Date.now() - this.cached.at < this.cacheMs) return this.cached.down;
    const rows: Array<{ family: string }> = await this.db('sim_backends').where({ down: true }).select('family');
    this.cached = { at: Date.now(), down: new Set(rows.map((r) => r.family)) };
    return this.cached.down;
  }

  async isDown(family: BackendFamily): Promise<boolean> {
    return (await this.downFamilies()).has(family);
  }

  /** Throws BackendUnavailableError when the family is switched off. */
  async assertUp(family: BackendFamily): Promise<void> {
    if (await this.isDown(family)) throw new BackendUnavailableError(family);
  }

  async setDown(family: BackendFamily, down: boolean): Promise<void> {
    await this.db('sim_backends').insert({ family, down, updated_at: this.db.fn.now() }).onConflict('family').merge();
    this.cached = null;
  }
}

/**
 * Wraps a provider so that every method first checks the backend's outage switch: the same
 * provider object, simulator or real adapter, fails like an unreachable backend while its switch
 * is down. Non-function members (`pollIntervalMs`) pass through untouched.
 */
export function withOutageSwitch<T extends object>(
  provider: T,
  switchboard: BackendSwitchboard,
  /** The switch, or how to find it from a call's arguments (a provider serving several families). */
  backend: BackendFamily | ((args: unknown[]) => BackendFamily),
): T {
  return new Proxy(provider, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || prop === 'constructor') return value;
      return async (...args: unknown[]) => {
        await switchboard.assertUp(typeof backend === 'function' ? backend(args) : backend);
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

/** Simulated work takes `ms × SIM_DELAY_SCALE`. */
export function simulatedDelay(ms: number, scale: number): Promise<void> {
  const wait = Math.max(0, Math.round(ms * scale));
  return wait === 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, wait));
}
