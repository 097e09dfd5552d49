import { z } from 'zod';
import type { FieldError } from '../../../domain/errors';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import {
  backendErrors,
  backendIpProblem,
  backendTargetErrors,
  backendTargetProblem,
  canonicalIp,
  listenerErrors,
  normalizeListeners,
  planErrors,
} from '../../../domain/lb/listeners';
import { findVisibleLb, lockBalancer, storeListeners, visibleServicesWithBalancerQuery, type LbTarget } from '../../../domain/lb/store';
import { reconcileBalancer } from '../../../domain/lb/reconcile';
import { BackendRefusedError, liveRead } from '../../../providers/errors';
import type { LbListener } from '../../../providers/lb.provider';
import type { AppDeps } from '../../deps';
import { conflict, notFound, validationFailed } from '../../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { defineBackendList } from '../../route-presets';
import { listOf } from '../../schemas';
import {
  BackendBody,
  backendParams,
  BackendSchema,
  backendSortKey,
  idParams,
  LbStatsSchema,
  listenersFromBody,
  ListenersBody,
  ListenerSchema,
  LoadBalancerSchema,
  presentBackends,
  presentListeners,
  presentLoadBalancer,
  presentStats,
  unknownStats,
} from './schemas';

/**
 * Load balancers (SPEC "Load balancers"). `{id}` is the lb service; its balancer (an HAProxy
 * process, or the simulator) is recorded in `lb_balancers` with the listener set it runs.
 *
 * Every change computes the complete resulting set, checks it (listener rules, the product's plan),
 * has the backend apply it (which checks again, with `haproxy -c` and a bind probe) and stores it,
 * all while holding the balancer's row: the answer comes after the balancer runs the new set, and a
 * refused set changes nothing, neither on the balancer nor in the database. These calls are short,
 * so the API makes them itself (no operation).
 */
const TAG = 'Load balancers';

const NOT_BUILT = { status: 409, description: 'The balancer is not built yet (order still provisioning) or any more (`conflict`)' };

const listenerListFingerprint = (serviceId: number) => listFingerprint('lb-listeners', { service: serviceId });
const backendListFingerprint = (serviceId: number) => listFingerprint('lb-backends', { service: serviceId });

/** A visible balancer whose `capability` is true; for a change (`action` named), one whose service takes actions (409 otherwise). */
async function capableTarget(deps: AppDeps, principal: Principal, id: string, capability: string, action?: string): Promise<LbTarget> {
  return findTarget(() => findVisibleLb(deps.db, principal, id), { capability, action });
}

/**
 * Replaces the balancer's listener set with `next(current)`, all or nothing. `paramOf` turns a
 * field of the resulting set (`listeners.0.backends.2.ip`) into the field of the request that
 * caused it (`ip` for an added backend). `targetErrors` judges where the set's backends point
 * (lb.rules.ts backendTargetProblem); a removal checks none, so a backend that is refused now can
 * still be taken out.
 */
async function changeListeners(
  deps: AppDeps,
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

export const lbRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/load-balancers',
    operationId: 'listLoadBalancers',
    summary: 'List load balancers',
    description:
      "From the control plane's database: `provisioning_state`, `healthy` and `listener_count` are `null` (read one load balancer for them). A page may hold fewer items than `limit` while `has_more` is true: the page is read from the account's services and then filtered to load balancers. Follow `next_cursor` until `has_more` is false.",
    tag: TAG,
    scope: 'lb:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of load balancers, newest first', schema: listOf(LoadBalancerSchema, 'LoadBalancerList') }],
    async handler({ query, principal, deps }) {
      const qb = visibleServicesWithBalancerQuery(deps.db, principal);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('load-balancers', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      const data = page.rows
        .filter((row) => row.family === 'lb')
        .map((row) => presentLoadBalancer(row, row.lb_service_id == null ? null : { address: row.lb_address }, 'not_asked'));
      return { body: listEnvelope(data, page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/load-balancers/{id}',
    operationId: 'getLoadBalancer',
    summary: 'Get a load balancer with its live state',
    description:
      '`provisioning_state`, `healthy` and `listener_count` come from the balancer; if it does not answer in time they are `null` and the call still succeeds.',
    tag: TAG,
    scope: 'lb:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The load balancer', schema: LoadBalancerSchema }],
    async handler({ params, principal, deps }) {
      const { service, balancer } = await findVisibleLb(deps.db, principal, params.id);
      const live = balancer ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.lb.status(service.id)) : null;
      return { body: presentLoadBalancer(service, balancer, live) };
    },
  }),
  defineBackendList({
    path: '/v1/load-balancers/{id}/listeners',
    operationId: 'listLoadBalancerListeners',
    summary: 'List the listeners of a load balancer, with their backends',
    description: 'The complete configuration the balancer runs (the last one applied), listeners sorted by name. Empty until the balancer is built.',
    tag: TAG,
    scope: 'lb:read',
    params: idParams,
    item: ListenerSchema,
    listId: 'LbListenerList',
    listed: 'A page of listeners',
    target: ({ params, principal, deps }) => capableTarget(deps, principal, params.id, 'listeners'),
    items: ({ balancer }) => presentListeners(balancer?.listeners ?? []),
    list: ({ service }) => listenerListFingerprint(service.id),
    sortKey: (l) => l.name,
    present: (l) => l,
  }),
  defineRoute({
    method: 'put',
    path: '/v1/load-balancers/{id}/listeners',
    operationId: 'replaceLoadBalancerListeners',
    summary: 'Replace the whole listener set of a load balancer',
    description:
      "Body `listeners`: the complete set. Listeners not in it are deleted with their backends; `[]` stops all traffic. Checked and applied (a configuration reload that drops no connection) before the answer. An invalid set (bad address, a backend pointing where backends may not (link-local/metadata, the platform's own servers and balancers, loopback outside development), a port used twice or already taken on the balancer's address, a listener without backends, more than the plan allows) applies nothing and answers `400 validation_failed` with the failing `param` (`listeners.1.port`, `listeners.0.backends.2.ip`).",
    tag: TAG,
    scope: 'lb:write',
    marks: ['D', 'I'],
    params: idParams,
    body: ListenersBody,
    exampleBody: {
      listeners: [
        {
          name: 'web',
          protocol: 'http',
          port: 80,
          algorithm: 'roundrobin',
          health_check: { path: '/healthz', interval_seconds: 5 },
          backends: [
            { ip: '10.0.0.11', port: 8080, weight: 1 },
            { ip: '10.0.0.12', port: 8080, weight: 1 },
          ],
        },
      ],
    },
    responses: [{ status: 200, description: 'The applied set, every listener on one page', schema: listOf(ListenerSchema, 'LbListenerList') }, NOT_BUILT],
    async handler({ params, body, principal, deps }) {
      const target = await capableTarget(deps, principal, params.id, 'listeners', 'a listener change');
      const policy = await deps.providers.lbTargets();
      const applied = await changeListeners(
        deps,
        target,
        () => listenersFromBody(body),
        undefined,
        (wanted) => backendTargetErrors(wanted, policy),
      );
      const all = presentListeners(applied).sort((a, b) => (a.name < b.name ? -1 : 1));
      return { body: listEnvelope(all, { hasMore: false, nextCursor: null }) };
    },
  }),
  defineBackendList({
    path: '/v1/load-balancers/{id}/backends',
    operationId: 'listLoadBalancerBackends',
    summary: 'List the backends of all listeners of a load balancer',
    description: 'Flattened: one item per backend, each with the name of its `listener`; sorted by listener, address and port.',
    tag: TAG,
    scope: 'lb:read',
    params: idParams,
    item: BackendSchema,
    listId: 'LbBackendList',
    listed: 'A page of backends',
    target: ({ params, principal, deps }) => capableTarget(deps, principal, params.id, 'backends'),
    items: ({ balancer }) => presentBackends(balancer?.listeners ?? []),
    list: ({ service }) => backendListFingerprint(service.id),
    sortKey: backendSortKey,
    present: (b) => b,
  }),
  defineRoute({
    method: 'post',
    path: '/v1/load-balancers/{id}/backends',
    operationId: 'addLoadBalancerBackend',
    summary: 'Add a backend to a listener of a load balancer',
    description:
      'Body `listener`, `ip`, `port` (and `weight`, default 1). The whole resulting configuration is checked and applied before the answer, all or nothing: an unknown listener, a bad address, an address or port backends may not point at (see `ip`; `param` `ip` or `port`) or a backend the listener already has answers `400 validation_failed` and changes nothing.',
    tag: TAG,
    scope: 'lb:write',
    marks: ['R', 'I'],
    params: idParams,
    body: BackendBody,
    exampleBody: { listener: 'web', ip: '10.0.0.13', port: 8080 },
    responses: [{ status: 201, description: 'The backend, applied', schema: BackendSchema }, NOT_BUILT],
    async handler({ params, body, principal, deps }) {
      const target = await capableTarget(deps, principal, params.id, 'backends', 'adding a backend');
      const own = backendErrors(body, '');
      if (own.length > 0) throw validationFailed(own);
      // Only the added backend: the listener's others were judged when they were added.
      const refused = backendTargetProblem(body.ip, body.port, await deps.providers.lbTargets());
      if (refused) throw validationFailed([{ param: refused.field, message: refused.message }]);
      let index = -1;
      const applied = await changeListeners(
        deps,
        target,
        (current) => {
          index = current.findIndex((l) => l.name === body.listener);
          if (index < 0)
            throw validationFailed([
              { param: 'listener', message: `no listener is named ${body.listener}; add listeners with PUT /v1/load-balancers/{id}/listeners` },
            ]);
          return current.map((l, i) => (i === index ? { ...l, backends: [...l.backends, { ip: body.ip, port: body.port, weight: body.weight }] } : l));
        },
        (param) => {
          const added = new RegExp(`^listeners\\.${index}\\.backends\\.(\\d+)\\.(ip|port|weight)$`).exec(param);
          if (added) return added[2];
          return param.startsWith('listeners') ? 'listener' : param;
        },
      );
      const listener = applied[index];
      const backend = listener.backends[listener.backends.length - 1];
      return { status: 201, body: { object: 'lb_backend' as const, listener: listener.name, ip: backend.ip, port: backend.port, weight: backend.weight } };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/load-balancers/{id}/backends/{listener}/{ip}/{port}',
    operationId: 'deleteLoadBalancerBackend',
    summary: 'Remove a backend from a listener of a load balancer',
    description:
      "The backend is `listener/ip/port`; percent-encode an IPv6 address (`2001%3Adb8%3A%3A11`). Applied before the answer. A listener's last backend cannot be removed (`400 validation_failed`): replace the listener set to remove the listener itself.",
    tag: TAG,
    scope: 'lb:write',
    marks: ['D', 'I'],
    params: backendParams,
    responses: [{ status: 204, description: 'Removed and applied' }, NOT_BUILT],
    async handler({ params, principal, deps }) {
      const target = await capableTarget(deps, principal, params.id, 'backends', 'removing a backend');
      const problems: FieldError[] = [];
      const ipProblem = backendIpProblem(params.ip);
      if (ipProblem) problems.push({ param: 'ip', message: ipProblem });
      const port = /^\d{1,5}$/.test(params.port) ? Number(params.port) : 0;
      if (port < 1 || port > 65535) problems.push({ param: 'port', message: 'must be an integer from 1 to 65535' });
      if (problems.length > 0) throw validationFailed(problems);
      await changeListeners(deps, target, (current) => {
        const listener = current.find((l) => l.name === params.listener);
        if (!listener) throw notFound('listener');
        if (!listener.backends.some((b) => sameBackend(b, params.ip, port))) throw notFound('backend');
        if (listener.backends.length === 1) {
          throw validationFailed([
            {
              param: 'listener',
              message: `${params.ip} port ${port} is the last backend of listener ${listener.name}; a listener needs one. Replace the listener set to remove the listener.`,
            },
          ]);
        }
        return current.map((l) => (l === listener ? { ...l, backends: l.backends.filter((b) => !sameBackend(b, params.ip, port)) } : l));
      });
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/load-balancers/{id}/stats',
    operationId: 'getLoadBalancerStats',
    summary: 'Get point-in-time statistics of a load balancer',
    description:
      "Per listener: state, current connections, bytes in and out since the balancer last started (configuration changes keep counting), and each backend's health (`unknown` without a health check). No history. When the balancer does not answer, every listener is `unknown` with zero counters.",
    tag: TAG,
    scope: 'lb:read',
    marks: [],
    params: idParams,
    responses: [{ status: 200, description: 'The statistics', schema: LbStatsSchema }],
    async handler({ params, principal, deps }) {
      const { service, balancer } = await capableTarget(deps, principal, params.id, 'stats');
      if (!balancer) return { body: presentStats({ listeners: [] }) };
      const live = await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.lb.stats(service.id));
      return { body: presentStats(live ?? unknownStats(balancer.listeners)) };
    },
  }),
];
