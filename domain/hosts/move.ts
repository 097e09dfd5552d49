import type { Knex } from 'knex';
import type { TemporalGateway } from '../../infra/temporal';
import type { HostDirectory } from '../../providers/host-routing';
import { beginMove, endMove, findHost, leastLoadedHost, placementOf } from './registry';

/** A move that cannot start: said to the operator as is. */
export class MoveRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MoveRefused';
  }
}

/**
 * Starts the move of a service's server to another host (`to`, or the one placement would choose),
 * through its family's move workflow (docs/hosts.md "Moving"), with workflow id `move-svc_<n>`: an
 * operator finds it in the Temporal UI by the service id, and a second move of the same service while
 * one runs is refused (by the placement's mark, and by Temporal for the id).
 */
export async function startMove(
  deps: { db: Knex; temporal: TemporalGateway; hosts: HostDirectory },
  serviceId: number,
  to?: string,
): Promise<{ workflowId: string; family: string; from: string }> {
  const placement = await placementOf(deps.db, serviceId);
  if (!placement) throw new MoveRefused(`svc_${serviceId} is not placed on any host`);
  const workflow = deps.hosts.moveWorkflow(placement.family);
  if (!workflow) throw new MoveRefused(`${placement.family} servers cannot move between hosts (docs/hosts.md "Moving")`);
  if (to !== undefined) {
    const host = await findHost(deps.db, to);
    if (!host) throw new MoveRefused(`no host ${to}`);
    if (!host.families.includes(placement.family)) throw new MoveRefused(`host ${to} does not serve ${placement.family}`);
    if (host.status !== 'up') throw new MoveRefused(`host ${to} is ${host.status}`);
    if (host.placements.length >= host.capacity.resources) throw new MoveRefused(`host ${to} is full (${host.capacity.resources} resources)`);
    if (to === placement.host) throw new MoveRefused(`svc_${serviceId} is on ${to} already`);
  }
  if (to === undefined && !(await leastLoadedHost(deps.db, placement.family, [placement.host])))
    throw new MoveRefused(`no other host that serves ${placement.family} is up, undrained and has room`);
  // One move of a service at a time: Temporal refuses a second run of this id while one runs.
  const workflowId = `move-svc_${serviceId}`;
  if (placement.moving_to) {
    const running = await deps.temporal.client.workflow
      .getHandle(workflowId)
      .describe()
      .then((d) => d.status.name === 'RUNNING')
      .catch(() => false);
    if (running) throw new MoveRefused(`svc_${serviceId} is already moving to ${placement.moving_to}`);
    // A mark left by a move whose run is gone (terminated from the Temporal UI): the server never left.
    await endMove(deps.db, serviceId);
  }
  await deps.temporal.client.workflow.start(workflow, {
    taskQueue: deps.temporal.taskQueue,
    workflowId,
    args: [{ serviceId, to: to ?? null }],
    typedSearchAttributes: deps.temporal.searchAttributes({ operationType: `host.move`, accountId: null, resourceId: `svc_${serviceId}` }),
  });
  return { workflowId, family: placement.family, from: placement.host };
}

/**
 * A move workflow's first step (every family's): where the server of a service of `family` is, where
 * it goes (`to`, or the host placement would choose now, its own left out), and the service marked
 * moving, so calls about it answer 503 until the move ends. A retried claim keeps the target the first
 * one marked. Throws MoveRefused.
 */
export async function claimMove(db: Knex, family: string, serviceId: number, to?: string | null): Promise<{ from: string; to: string }> {
  const placement = await placementOf(db, serviceId);
  if (!placement || placement.family !== family) throw new MoveRefused(`svc_${serviceId} has no ${family} server placed on a host`);
  const target = to ?? placement.moving_to ?? (await leastLoadedHost(db, family, [placement.host]));
  if (!target) throw new MoveRefused(`no other host that serves ${family} is up, undrained and has room`);
  if (target === placement.host) throw new MoveRefused(`svc_${serviceId} is on ${target} already`);
  if (placement.moving_to !== target && !(await beginMove(db, serviceId, target)))
    throw new MoveRefused(`svc_${serviceId} is already moving to ${placement.moving_to}`);
  return { from: placement.host, to: target };
}
