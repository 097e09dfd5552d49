import { z } from 'zod';
import { formatId, parseNumericId } from '../../../common/ids';
import { attachVpsMachine, findServer } from '../../../domain/vps/store';
import { findServiceOfFamily } from '../../../domain/services';
import { TASK_KINDS } from '../../../providers/hypervisor.provider';
import { notFound } from '../../../domain/errors';
import { defineDevRoute } from '../../route';
import { HOSTNAME_RE, idParams } from './schemas';

/**
 * Local stand-ins for the VPS family (CLOUD_DEV_ENDPOINTS=1, loopback only): give a VPS service a
 * machine on the hypervisor, and make a machine's next task fail (simulated hypervisor only).
 */
export const vpsDevRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/vps/{id}/machine',
    operationId: 'devVpsAttachMachine',
    summary: 'Build the hypervisor machine of a VPS service (what provisioning does)',
    params: idParams,
    body: z
      .object({ type: z.enum(['qemu', 'lxc']).default('qemu'), hostname: z.string().regex(HOSTNAME_RE).max(253).optional(), node: z.string().optional() })
      .strict(),
    responses: [{ status: 200, description: 'The machine record' }],
    async handler({ params, body, deps }) {
      const service = await findServiceOfFamily(deps.db, params.id, 'vps');
      const server = await attachVpsMachine(deps.db, deps.providers.hypervisor, service, body);
      return { body: { object: 'vps_machine', service: formatId('svc', server.service_id), vmid: server.vmid, node: server.node, type: server.type } };
    },
  }),
  defineDevRoute({
    method: 'post',
    path: '/_dev/vps/{id}/fail-next-task',
    operationId: 'devVpsFailNextTask',
    summary: 'Make the next hypervisor task of a VPS fail',
    params: idParams,
    body: z.object({ message: z.string().min(1).max(200).optional(), kind: z.enum(TASK_KINDS).optional() }).strict(),
    responses: [{ status: 200, description: 'The fault is armed' }],
    async handler({ params, body, deps }) {
      const faults = deps.providers.faults;
      if (!faults) throw notFound('simulated hypervisor');
      const id = parseNumericId('svc', params.id);
      const server = id === null ? null : await findServer(deps.db, id);
      if (!server) throw notFound('vps');
      await faults.failNext('vps', server.vmid, { kind: body.kind, message: body.message ?? 'simulated hypervisor task failure' });
      return { body: { object: 'vps_fault', vmid: server.vmid, fail_next_task: body.kind ?? 'any' } };
    },
  }),
];
