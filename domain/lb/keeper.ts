import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { PeriodicService } from '../../common/periodic';
import { BackendGoneError } from '../../providers/errors';
import type { LbListener, LbProvider } from '../../providers/lb.provider';
import { backendTargetErrors, type BackendTargetPolicy, type BackendTargetPolicySource } from '../../providers/lb.rules';
import { reconcileBalancer } from './reconcile';
import { balancersToRun } from './store';

/**
 * Keeps every recorded balancer of a live service running, beside the worker: at start (after a
 * host restart no HAProxy process is left) and then every `intervalMs` (a crashed one comes back).
 * The provider's `create` is idempotent: a running balancer is only re-adopted through its pidfile,
 * a stopped one is started with its last applied set, a lost one is rebuilt from the stored set.
 * Each pass first puts the stored set back on a balancer that holds another one (reconcile.ts).
 * The provider leaves backends whose target is refused now out of what it runs (docs/lb.md
 * "Backend addresses"); the keeper says so in the log, once per change of what is left out.
 */
export class BalancerKeeper extends PeriodicService {
  readonly name = 'lb-keeper';

  /** What was last logged as left out, per balancer: the log says it once, not at every pass. */
  private readonly leftOut = new Map<number, string>();

  constructor(
    private readonly deps: {
      db: Knex;
      lb: LbProvider;
      logger: Logger;
      intervalMs: number;
      targets?: BackendTargetPolicySource;
      /** The host whose balancers it keeps (its own); every recorded one when balancers run on no host (the simulator). */
      host?: string;
    },
  ) {
    super({ intervalMs: deps.intervalMs, atStart: true });
  }

  async pass(): Promise<void> {
    try {
      const policy = this.deps.targets ? await this.deps.targets() : null;
      for (const balancer of await balancersToRun(this.deps.db, this.deps.host)) {
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
        if (policy) this.reportLeftOut(balancer.service_id, balancer.listeners, policy);
      }
    } catch (err) {
      this.deps.logger.warn({ err: (err as Error).message }, 'load balancer keeper pass failed; next pass retries');
    }
  }

  /** Logs the stored backends the balancer does not serve because their target is refused now. */
  private reportLeftOut(serviceId: number, listeners: LbListener[], policy: BackendTargetPolicy): void {
    const refused = backendTargetErrors(listeners, policy).map((e) => {
      const [, i, j] = /^listeners\.(\d+)\.backends\.(\d+)/.exec(e.param) ?? [];
      const backend = listeners[Number(i)]?.backends[Number(j)];
      return { listener: listeners[Number(i)]?.name, backend: backend ? `${backend.ip}:${backend.port}` : e.param, reason: e.message };
    });
    const fingerprint = JSON.stringify(refused);
    if ((this.leftOut.get(serviceId) ?? '[]') === fingerprint) return;
    this.leftOut.set(serviceId, fingerprint);
    if (refused.length > 0)
      this.deps.logger.warn({ service: `svc_${serviceId}`, refused }, 'load balancer backends left out of its configuration: their targets are refused now');
  }
}
