import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import { BackendGoneError } from '../../providers/errors';
import type { LbProvider } from '../../providers/lb.provider';
import { reconcileBalancer } from './reconcile';
import { balancersToRun } from './store';

/**
 * Keeps every recorded balancer of a live service running, beside the worker: at start (after a
 * host restart no HAProxy process is left) and then every `intervalMs` (a crashed one comes back).
 * The provider's `create` is idempotent: a running balancer is only re-adopted through its pidfile,
 * a stopped one is started with its last applied set, a lost one is rebuilt from the stored set.
 * Each pass first puts the stored set back on a balancer that holds another one (reconcile.ts).
 */
export class BalancerKeeper extends PeriodicService {
  readonly name = 'lb-keeper';

  constructor(private readonly deps: { db: Knex; lb: LbProvider; logger: Logger; intervalMs: number }) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    try {
      for (const balancer of await balancersToRun(this.deps.db)) {
        // The stored set goes back on first: a stopped balancer then starts with it (the apply only
        // rewrites its files), and one that cannot start keeps no set the database does not hold.
        try {
          await reconcileBalancer(this.deps, balancer.service_id);
        } catch (err) {
          if (!(err instanceof BackendGoneError)) {
            this.deps.logger.warn(
              { service: `svc_${balancer.service_id}`, err: (err as Error).message },
              'load balancer could not be put back to its stored set; next pass retries',
            );
          }
        }
        try {
          await this.deps.lb.create(balancer.service_id, balancer.listeners);
        } catch (err) {
          this.deps.logger.warn(
            { service: `svc_${balancer.service_id}`, err: (err as Error).message },
            'load balancer could not be started; next pass retries',
          );
        }
      }
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'load balancer keeper pass failed; next pass retries');
    }
  }
}
