import type { OperationResource, OperationView } from '../domain/operations/contract';
import type { StartableOperationType, StartOperationInput } from '../domain/operations/start';
import type { Principal } from '../domain/principal';
import type { AppDeps } from './deps';

/**
 * The one way a route starts an operation (SPEC convention 5): the operation row and the workflow
 * (same id) are created, and the route answers `202` with `Location` and the operation. The
 * operation type names the workflow (OPERATION_TYPES, domain/operations/types.ts), which types the
 * input. The fields are those of OperationService.start (guards, hook, ...), with the resource and
 * service required.
 */
export type OperationStart<T extends StartableOperationType> = Omit<StartOperationInput<T>, 'principal' | 'resource' | 'serviceId' | 'workflow'> & {
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

export async function startOperation<T extends StartableOperationType>(
  deps: Pick<AppDeps, 'operations'>,
  principal: Principal,
  start: OperationStart<T>,
): Promise<Accepted> {
  const op = await deps.operations.start({ principal, ...start });
  return accepted(op);
}
