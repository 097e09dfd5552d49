import type { Knex } from 'knex';

/**
 * The simulator's fault switch: each backend family can be taken down (POST
 * /_dev/backends/{family}/outage) and every simulated call of that family then fails like an
 * unreachable backend. The flag lives in PostgreSQL so the API and the worker agree on it.
 */
export const BACKEND_FAMILIES = [
  'billing',
  'vps',
  'dns',
  'dbaas',
  'caas',
  'lb',
  'objectstorage',
  'mailgateway',
  'images',
  'serverless',
  'wordpress',
  'webhooks',
] as const;

export type BackendFamily = (typeof BACKEND_FAMILIES)[number];

export class BackendUnavailableError extends Error {
  constructor(readonly family: string) {
    super(`the ${family} backend is not answering`);
    this.name = 'BackendUnavailableError';
  }
}

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
    await this.db('sim_backends')
      .insert({ family, down, updated_at: this.db.fn.now() })
      .onConflict('family')
      .merge();
    this.cached = null;
  }
}

/** Simulated work takes `ms × SIM_DELAY_SCALE`. */
export function simulatedDelay(ms: number, scale: number): Promise<void> {
  const wait = Math.max(0, Math.round(ms * scale));
  return wait === 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, wait));
}

/**
 * A live read for a single-resource GET: the backend's answer, or null when it fails or does not
 * answer within the bound (SPEC convention 7: live fields come back null, the call does not fail).
 */
export async function liveRead<T>(timeoutMs: number, read: () => Promise<T>): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), timeoutMs);
  });
  try {
    return await Promise.race([read().catch(() => null), timeout]);
  } finally {
    clearTimeout(timer);
  }
}
