import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { stableStringify } from '../../common/stable-json';
import type { LbListener, LbProvider } from '../../providers/lb.provider';
import { lockBalancerIfFree } from './store';

export type Reconciled = 'in step' | 'reapplied' | 'busy';

const sameSet = (a: readonly LbListener[], b: readonly LbListener[]) => stableStringify(a) === stableStringify(b);

/**
 * Puts the stored listener set back on the balancer when the two differ. The database holds the
 * set the customer was last told about. A change applies its set to the balancer first and stores
 * it second: when the store or the commit fails after the balancer took the set, the balancer runs
 * a set nobody was told about until this runs (right after the failure, and at every pass of the
 * keeper).
 *
 * The balancer's row is locked while the sets are compared and applied, so this never undoes a
 * change in flight: a balancer whose row a change holds is left alone (`busy`) for the next pass.
 */
export async function reconcileBalancer(deps: { db: Knex; lb: LbProvider; logger: Logger }, serviceId: number): Promise<Reconciled> {
  return deps.db.transaction(async (trx) => {
    const balancer = await lockBalancerIfFree(trx, serviceId);
    if (!balancer) return 'busy';
    const running = await deps.lb.listeners(serviceId);
    if (sameSet(running, balancer.listeners)) return 'in step';
    await deps.lb.apply(serviceId, balancer.listeners);
    deps.logger.warn(
      { service: `svc_${serviceId}`, running: running.length, stored: balancer.listeners.length },
      'load balancer ran a listener set the database does not hold (a change failed after it was applied); the stored set is applied again',
    );
    return 'reapplied';
  });
}
