import type { Knex } from 'knex';
import type { Logger } from '../../common/logger';
import type { Providers } from '../../providers';
import { BackendRefusedError } from '../../providers/errors';
import type { LbBackendTarget, LbListener } from '../../providers/lb.provider';
import { conflict, notFound, validationFailed, type FieldError } from '../errors';
import {
  backendErrors,
  backendIpProblem,
  backendTargetErrors,
  backendTargetProblem,
  canonicalIp,
  listenerErrors,
  normalizeListeners,
  planErrors,
} from './listeners';
import { reconcileBalancer } from './reconcile';
import { lockBalancer, storeListeners, type LbTarget } from './store';

/**
 * Changes of a load balancer's listener set (SPEC "Load balancers"). Every change computes the
 * complete resulting set, checks it (listener rules, where backends may point, the product's plan),
 * has the backend apply it (which checks again, with `haproxy -c` and a bind probe) and stores it,
 * all while holding the balancer's row: the caller is answered after the balancer runs the new set,
 * and a refused set changes nothing, neither on the balancer nor in the database. These calls are
 * short, so the API makes them itself (no operation).
 */
export interface LbChangeDeps {
  db: Knex;
  logger: Logger;
  providers: Pick<Providers, 'lb' | 'lbTargets'>;
}

/** A backend added to a listener: its listener's name and the backend as the balancer runs it. */
export interface AddedBackend {
  listener: string;
  backend: { ip: string; port: number; weight: number };
}

/**
 * Replaces the balancer's listener set with `next(current)`, all or nothing. `paramOf` turns a
 * field of the resulting set (`listeners.0.backends.2.ip`) into the field of the request that
 * caused it (`ip` for an added backend). `targetErrors` judges where the set's backends point
 * (lb.rules.ts backendTargetProblem); a removal checks none, so a backend that is refused now can
 * still be taken out.
 */
async function changeListeners(
  deps: LbChangeDeps,
  target: LbTarget,
  next: (current: LbListener[]) => LbListener[],
  paramOf: (param: string) => string = (p) => p,
  targetErrors: (wanted: LbListener[]) => FieldError[] = () => [],
): Promise<LbListener[]> {
  const serviceId = target.service.id;
  let appliedToBalancer = false;
  try {
    return await deps.db.transaction(async (trx) => {
      const balancer = await lockBalancer(trx, serviceId);
      if (!balancer) throw conflict('This load balancer is not built yet (its order is still provisioning); try again once it is active.');
      const wanted = next(balancer.listeners);
      const problems = [
        ...listenerErrors(wanted, { address: balancer.address }),
        ...targetErrors(wanted),
        ...planErrors(target.service.product ?? null, wanted),
      ];
      if (problems.length > 0) throw validationFailed(problems.map((e) => ({ param: paramOf(e.param), message: e.message })));
      let applied: LbListener[];
      try {
        applied = await deps.providers.lb.apply(serviceId, normalizeListeners(wanted));
      } catch (err) {
        if (err instanceof BackendRefusedError && err.param) throw validationFailed([{ param: paramOf(err.param), message: err.message }]);
        throw err;
      }
      appliedToBalancer = true;
      await storeListeners(trx, serviceId, applied);
      return applied;
    });
  } catch (err) {
    // The balancer took the set but the database did not keep it: the stored set goes back on the
    // balancer now, or at the keeper's next pass if the database is still out.
    if (appliedToBalancer) {
      await reconcileBalancer({ db: deps.db, lb: deps.providers.lb, logger: deps.logger }, serviceId).catch((e: Error) =>
        deps.logger.error({ service: `svc_${serviceId}`, err: e.message }, 'load balancer could not be put back to its stored set; the keeper retries'),
      );
    }
    throw err;
  }
}

const sameBackend = (b: { ip: string; port: number }, ip: string, port: number) => canonicalIp(b.ip) === canonicalIp(ip) && b.port === port;

/** PUT listeners: the complete set, every backend judged by where it points. Answers the applied set. */
export async function replaceListeners(deps: LbChangeDeps, target: LbTarget, listeners: LbListener[]): Promise<LbListener[]> {
  const policy = await deps.providers.lbTargets();
  return changeListeners(
    deps,
    target,
    () => listeners,
    undefined,
    (wanted) => backendTargetErrors(wanted, policy),
  );
}

/**
 * Adds one backend to a named listener. Only the added backend is judged by where it points (the
 * listener's others were judged when they were added); errors name the request's fields (`ip`,
 * `port`, `listener`).
 */
export async function addBackend(deps: LbChangeDeps, target: LbTarget, added: LbBackendTarget & { listener: string; weight: number }): Promise<AddedBackend> {
  const own = backendErrors(added, '');
  if (own.length > 0) throw validationFailed(own);
  const refused = backendTargetProblem(added.ip, added.port, await deps.providers.lbTargets());
  if (refused) throw validationFailed([{ param: refused.field, message: refused.message }]);
  let index = -1;
  const applied = await changeListeners(
    deps,
    target,
    (current) => {
      index = current.findIndex((l) => l.name === added.listener);
      if (index < 0)
        throw validationFailed([
          { param: 'listener', message: `no listener is named ${added.listener}; add listeners with PUT /v1/load-balancers/{id}/listeners` },
        ]);
      return current.map((l, i) => (i === index ? { ...l, backends: [...l.backends, { ip: added.ip, port: added.port, weight: added.weight }] } : l));
    },
    (param) => {
      const field = new RegExp(`^listeners\\.${index}\\.backends\\.(\\d+)\\.(ip|port|weight)$`).exec(param);
      if (field) return field[2];
      return param.startsWith('listeners') ? 'listener' : param;
    },
  );
  const listener = applied[index];
  const backend = listener.backends[listener.backends.length - 1];
  return { listener: listener.name, backend: { ip: backend.ip, port: backend.port, weight: backend.weight } };
}

/**
 * Removes the backend `listener/ip/port` (as the path gives them: `port` is text). A listener's last
 * backend stays (`400`: replace the set to remove the listener); an unknown listener or backend is 404.
 */
export async function removeBackend(deps: LbChangeDeps, target: LbTarget, removed: { listener: string; ip: string; port: string }): Promise<void> {
  const problems: FieldError[] = [];
  const ipProblem = backendIpProblem(removed.ip);
  if (ipProblem) problems.push({ param: 'ip', message: ipProblem });
  const port = /^\d{1,5}$/.test(removed.port) ? Number(removed.port) : 0;
  if (port < 1 || port > 65535) problems.push({ param: 'port', message: 'must be an integer from 1 to 65535' });
  if (problems.length > 0) throw validationFailed(problems);
  await changeListeners(deps, target, (current) => {
    const listener = current.find((l) => l.name === removed.listener);
    if (!listener) throw notFound('listener');
    if (!listener.backends.some((b) => sameBackend(b, removed.ip, port))) throw notFound('backend');
    if (listener.backends.length === 1) {
      throw validationFailed([
        {
          param: 'listener',
          message: `${removed.ip} port ${port} is the last backend of listener ${listener.name}; a listener needs one. Replace the listener set to remove the listener.`,
        },
      ]);
    }
    return current.map((l) => (l === listener ? { ...l, backends: l.backends.filter((b) => !sameBackend(b, removed.ip, port)) } : l));
  });
}
