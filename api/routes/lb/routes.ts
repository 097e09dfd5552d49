import { z } from 'zod';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import { addBackend, removeBackend, replaceListeners } from '../../../domain/lb/changes';
import { findVisibleLb, visibleServicesWithBalancerQuery, type LbTarget } from '../../../domain/lb/store';
import { liveRead } from '../../../providers/errors';
import type { AppDeps } from '../../deps';
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
 * process, or the simulator) is recorded in `lb_balancers` with the listener set it runs. Changes
 * of the listener set are made, all or nothing, by domain/lb/changes.ts before the answer (no
 * operation).
 */
const TAG = 'Load balancers';

const NOT_BUILT = { status: 409, description: 'The balancer is not built yet (order still provisioning) or any more (`conflict`)' };

const listenerListFingerprint = (serviceId: number) => listFingerprint('lb-listeners', { service: serviceId });
const backendListFingerprint = (serviceId: number) => listFingerprint('lb-backends', { service: serviceId });

/** A visible balancer whose `capability` is true; for a change (`action` named), one whose service takes actions (409 otherwise). */
async function capableTarget(deps: AppDeps, principal: Principal, id: string, capability: string, action?: string): Promise<LbTarget> {
  return findTarget(() => findVisibleLb(deps.db, principal, id), { capability, action });
}

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
      const applied = await replaceListeners(deps, target, listenersFromBody(body));
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
      const { listener, backend } = await addBackend(deps, target, body);
      return { status: 201, body: { object: 'lb_backend' as const, listener, ...backend } };
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
      await removeBackend(deps, target, { listener: params.listener, ip: params.ip, port: params.port });
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
