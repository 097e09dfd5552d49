import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import type { Providers } from '../../providers';
import { purgeExpiredRecipeSecrets } from './recipe-store';

/** What each repair the backend reports is called in `monitoring/recovery`. */
const REPAIRS: Record<string, { action: string; reason: string }> = {
  php: { action: 'restart_php', reason: "the site's PHP was not running" },
  web: { action: 'restart_web', reason: 'the web server was not serving the site' },
  egress: { action: 'restore_firewall', reason: "the site's network rules were missing (a host restart)" },
};

/** After this many failed repairs in a row the platform gives up on a site (`halted`) until it answers again. */
export const RECOVERY_HALT_AFTER = 3;

/**
 * Keeps every built hosted site served, beside the worker: at start (after a host restart, or a
 * local run's Ctrl-C, no php-fpm or nginx is left) and then every `intervalMs`. What it had to start
 * again is recorded in `wordpress_recovery` (GET .../monitoring/recovery), and so is a repair that
 * failed; after RECOVERY_HALT_AFTER failures in a row it stops trying (`halted`) and records nothing
 * more until the site answers again (a PHP restart or version change by the customer, a restore).
 */
export class WordpressKeeper extends PeriodicService {
  readonly name = 'wordpress-keeper';

  constructor(private readonly deps: { db: Knex; providers: Providers; logger: Logger; intervalMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    const { db } = this.deps;
    const sites: Array<{ service_id: string }> = await db('wordpress_sites as w')
      .join('services as s', 's.id', 'w.service_id')
      .whereIn('s.status', ['active', 'suspended', 'pending'])
      .whereNotNull('w.ip')
      .select('w.service_id');
    for (const { service_id } of sites) await this.keep(Number(service_id));
    // Generated recipe secrets nobody claimed within 24 hours are deleted.
    await purgeExpiredRecipeSecrets(db);
  }

  private async keep(serviceId: number): Promise<void> {
    const { db, providers, logger } = this.deps;
    const recent: Array<{ ok: boolean }> = await db('wordpress_recovery').where({ service_id: serviceId }).orderBy('id', 'desc').limit(RECOVERY_HALT_AFTER);
    const halted = recent.length === RECOVERY_HALT_AFTER && recent.every((e) => !e.ok);
    if (halted) {
      // Given up: only notice when the site answers again.
      const live = await providers.wordpress.live(serviceId).catch(() => null);
      if (live?.state === 'up') await db('wordpress_recovery').insert({ service_id: serviceId, action: 'check', reason: 'the site answers again', ok: true });
      return;
    }
    try {
      const repaired = await providers.wordpress.repair(serviceId);
      for (const part of repaired) {
        await db('wordpress_recovery').insert({
          service_id: serviceId,
          action: REPAIRS[part]?.action ?? `repair_${part}`,
          reason: REPAIRS[part]?.reason ?? `the site's ${part} needed repair`,
          ok: true,
        });
      }
    } catch (err) {
      logger.warn({ site: `svc_${serviceId}`, err: (err as Error).message }, 'a hosted site could not be repaired; next pass retries');
      await db('wordpress_recovery').insert({ service_id: serviceId, action: 'repair', reason: 'the site could not be brought back', ok: false });
    }
  }
}
