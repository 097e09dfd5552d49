import type { OperationResource, OperationView } from '../domain/operations/contract';
import type { OperationWorkflow, StartOperationInput } from '../domain/operations/start';
import type { Principal } from '../domain/principal';
import type { AppDeps } from './deps';

/**
 * The one way a route starts an operation (SPEC convention 5): the operation row and the workflow
 * (same id) are created, and the route answers `202` with `Location` and the operation. The
 * workflow is named by its function in workflows/index.ts, which types its input. The fields are
 * those of OperationService.start (guards, hook, ...), with the resource and service required.
 */
export type OperationStart<W extends OperationWorkflow> = Omit<StartOperationInput<W>, 'principal' | 'resource' | 'serviceId'> & {
  /** The resource the operation runs on (`{object: 'vps', id: 'svc_1'}`). */
  resource: OperationResource;
  /** The service it belongs to: visibility of the operation follows the service's. */
  serviceId: number | null;
};

export interface Accepted {
  status: 202;
  headers: { Location: string };
  body: OperationView;
}

export function accepted(op: OperationView): Accepted {
  return { status: 202, headers: { Location: `/v1/operations/${op.id}` }, body: op };
}

export async function startOperation<W extends OperationWorkflow>(
  deps: Pick<AppDeps, 'operations'>,
  principal: Principal,
  start: OperationStart<W>,
): Promise<Accepted> {
  const op = await deps.operations.start({ principal, ...start });
  return accepted(op);
}
