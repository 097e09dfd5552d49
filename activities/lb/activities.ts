import { ApplicationFailure } from '@temporalio/activity';
import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import { movePlacement } from '../../domain/hosts/registry';
import { claimMoveOrFail } from '../hosts/activities';
import { findBalancer, lockBalancer, storeAddress } from '../../domain/lb/store';
import type { Providers } from '../../providers';
import type { LbListener, LbProvider } from '../../providers/lb.provider';

/** What a move of a balancer starts from: its hosts and the listener set to rebuild. */
export interface LbMovePlan {
  from: string;
  to: string;
  listeners: LbListener[];
}

/**
 * Activities of the load balancers' move (docs/hosts.md "Moving"): a balancer is moved by building
 * it again on the new host from its stored listener set, switching its placement and address, then
 * destroying it on the old host. The build and the destroy run on each host's own adapter
 * (`providers.local`), because the placement says the other host while they run.
 */
export function createLbActivities({ db, providers, logger }: { db: Knex; providers: Providers; logger: Logger }) {
  const local = (): LbProvider => {
    if (!providers.local.lb) throw ApplicationFailure.nonRetryable('this worker is not the agent of a host that runs balancers', 'NotAHost');
    return providers.local.lb;
  };
  return {
    /** Where the balancer is, where it goes (`to`, or the host placement would choose now, leaving its own out), and what it runs. */
    async lbMovePlan(input: { serviceId: number; to?: string | null }): Promise<LbMovePlan> {
      const balancer = await findBalancer(db, input.serviceId);
      if (!balancer) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no balancer`, 'NotPlaced');
      // Marked moving: listener changes answer 503 until the switch (or the end of a move that failed).
      const { from, to } = await claimMoveOrFail(db, 'lb', input.serviceId, input.to);
      return { from, to, listeners: balancer.listeners };
    },

    /** On the new host: the balancer, running `listeners`; its address there. */
    async lbBuildHere(input: { serviceId: number; listeners: LbListener[] }): Promise<{ address: string }> {
      const lb = local();
      const status = await lb.create(input.serviceId, input.listeners);
      await lb.apply(input.serviceId, input.listeners);
      return { address: status.address };
    },

    /**
     * Points the placement, the balancer's record and the service's address at the new host, under
     * the balancer's lock (a listener change waits, and one that came in since the build is seen):
     * false when the stored set is no longer the one built, so the move builds again.
     */
    async lbSwitchHost(input: { serviceId: number; to: string; address: string; listeners: LbListener[] }): Promise<{ switched: boolean }> {
      return db.transaction(async (trx) => {
        const balancer = await lockBalancer(trx, input.serviceId);
        if (!balancer) throw ApplicationFailure.nonRetryable(`svc_${input.serviceId} has no balancer any more`, 'Gone');
        if (JSON.stringify(balancer.listeners) !== JSON.stringify(input.listeners)) return { switched: false };
        await movePlacement(trx, input.serviceId, input.to);
        await storeAddress(trx, input.serviceId, input.address);
        await trx('services').where({ id: input.serviceId }).update({ primary_ip: input.address });
        logger.info({ service: `svc_${input.serviceId}`, host: input.to, address: input.address }, 'balancer moved');
        return { switched: true };
      });
    },

    /** On the old host: its copy of the balancer, destroyed. */
    async lbDestroyHere(input: { serviceId: number }): Promise<void> {
      await local().destroy(input.serviceId);
    },
  };
}

export type LbActivities = ReturnType<typeof createLbActivities>;
