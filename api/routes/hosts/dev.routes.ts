import { z } from 'zod';
import { HOST_NAME_PATTERN } from '../../../common/hosts';
import { listHosts, resourceRef, setDraining, type HostView } from '../../../domain/hosts/registry';
import { notFound } from '../../../domain/errors';
import type { HostDirectory } from '../../../providers/host-routing';
import { defineDevRoute } from '../../route';

/**
 * Local stand-ins for the operator's view of hosts (CLOUD_DEV_ENDPOINTS=1, loopback only; DECISIONS
 * "Hosts"): the hosts with their status and what is placed on them, and drain / undrain. In
 * production the same is `npm run hosts` (scripts/hosts.ts), run by an operator against the database.
 */
const nameParams = z.object({ name: z.string().regex(HOST_NAME_PATTERN, 'must be a host name') });

export function presentHost(host: HostView, directory: Pick<HostDirectory, 'resourceObject'>) {
  return {
    object: 'host' as const,
    name: host.name,
    families: host.families,
    status: host.status,
    heartbeat_at: host.heartbeat_at.toISOString(),
    capacity: host.capacity,
    resources: host.placements.map((p) => resourceRef((family) => directory.resourceObject(family), p)),
  };
}

const drainRoute = (action: 'drain' | 'undrain') =>
  defineDevRoute({
    method: 'post',
    path: `/_dev/hosts/{name}/${action}`,
    operationId: action === 'drain' ? 'devDrainHost' : 'devUndrainHost',
    summary: action === 'drain' ? 'Drain a host: no new placements there (what it has stays)' : 'Undrain a host: placements may choose it again',
    params: nameParams,
    responses: [{ status: 200, description: 'The host' }],
    async handler({ params, deps }) {
      const host = await setDraining(deps.db, params.name, action === 'drain');
      if (!host) throw notFound(`host ${params.name}`);
      return { body: presentHost(host, deps.providers.hosts) };
    },
  });

export const hostsDevRoutes = [
  defineDevRoute({
    method: 'get',
    path: '/_dev/hosts',
    operationId: 'devListHosts',
    summary: 'The hosts, their status and the resources placed on them',
    responses: [{ status: 200, description: 'The hosts, by name' }],
    async handler({ deps }) {
      const hosts = await listHosts(deps.db);
      return { body: { object: 'list' as const, data: hosts.map((h) => presentHost(h, deps.providers.hosts)) } };
    },
  }),
  drainRoute('drain'),
  drainRoute('undrain'),
];
