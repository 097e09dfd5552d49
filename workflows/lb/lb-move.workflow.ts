import { CancellationScope } from '@temporalio/workflow';
import type { LbActivities, LbMovePlan } from '../../activities/lb/activities';
import { familyActivities } from '../kit/proxies';
import { familyActivitiesOnHost, placement } from '../kit/hosts';

export interface LbMoveInput {
  serviceId: number;
  /** The host to move to; the one placement would choose (its own host left out) when absent. */
  to?: string | null;
}

export interface LbMoveResult {
  from: string;
  to: string;
  address: string;
}

const { bookkeeping } = familyActivities<LbActivities>();
/** A listener change between the build and the switch makes the move build again; past this many, it gives up. */
const MAX_ROUNDS = 5;

/**
 * `lbMoveWorkflow`, an operator's move of a load balancer to another host (docs/hosts.md "Moving"),
 * started by `npm run hosts -- move svc_<n>` with workflow id `move-svc_<n>`: marks it moving (listener
 * changes answer 503 until the switch), builds the
 * balancer on the new host from its stored listeners, switches the placement and the address (the
 * new host's range: clients follow the service's new `primary_ip`), then destroys the old copy on
 * the old host, waiting for that host if it is down.
 */
export async function lbMoveWorkflow(input: LbMoveInput): Promise<LbMoveResult> {
  let plan: LbMovePlan | null = null;
  let switched = false;
  try {
    // Marks the balancer moving: from here on, whatever happens, the move ends (switched, or undone).
    plan = await bookkeeping.lbMovePlan(input);
    const { from, to } = plan;
    for (let round = 1; ; round++) {
      const listeners = plan.listeners;
      const { address } = await CancellationScope.nonCancellable(() =>
        familyActivitiesOnHost<LbActivities>(to).calls.lbBuildHere({ serviceId: input.serviceId, listeners }),
      );
      const done = await CancellationScope.nonCancellable(async () => {
        ({ switched } = await bookkeeping.lbSwitchHost({ serviceId: input.serviceId, to, address, listeners }));
        if (switched) await familyActivitiesOnHost<LbActivities>(from).bookkeeping.lbDestroyHere({ serviceId: input.serviceId });
        return switched;
      });
      if (done) return { from, to, address };
      if (round >= MAX_ROUNDS) throw new Error(`the listeners of svc_${input.serviceId} kept changing during the move; it stays on ${from}`);
      plan = { ...(await bookkeeping.lbMovePlan({ serviceId: input.serviceId, to })), from };
    }
  } catch (err) {
    if (!switched && plan) {
      const { to } = plan;
      // Stays where it was, taking changes again; the new host keeps no copy.
      await CancellationScope.nonCancellable(async () => {
        await placement.endServiceMove({ serviceId: input.serviceId });
        await familyActivitiesOnHost<LbActivities>(to).bookkeeping.lbDestroyHere({ serviceId: input.serviceId });
      });
    }
    throw err;
  }
}
