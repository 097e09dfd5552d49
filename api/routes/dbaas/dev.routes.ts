import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { attachDbaasInstance, findInstance } from '../../../domain/dbaas/store';
import { findServiceOfFamily } from '../../../domain/services';
import { conflict } from '../../../domain/errors';
import { defineDevRoute } from '../../route';
import { idParams } from './schemas';

/**
 * Local stand-ins for the DBaaS family (CLOUD_DEV_ENDPOINTS=1, loopback only): give a dbaas
 * service its instance (what provisioning does), and take an instance down or bring it back (what
 * a crash or an operator would do) to see the API answer without it.
 */
export const dbaasDevRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/dbaas/{id}/instance',
    operationId: 'devDbaasAttachInstance',
    summary: 'Build the database instance of a dbaas service (what provisioning does)',
    params: idParams,
    body: z.object({ engine: z.enum(['postgresql', 'mysql']).optional() }).strict(),
    responses: [{ status: 200, description: 'The instance record' }],
    async handler({ params, body, deps }) {
      const service = await findServiceOfFamily(deps.db, params.id, 'dbaas');
      const row = await attachDbaasInstance(deps.db, deps.providers, deps.keyring, service, body.engine);
      return {
        body: {
          object: 'dbaas_instance',
          service: formatId('svc', row.service_id),
          instance: row.instance,
          engine: row.engine,
          host: row.host,
          port: row.port,
        },
      };
    },
  }),
  defineDevRoute({
    method: 'post',
    path: '/_dev/dbaas/{id}/power',
    operationId: 'devDbaasPower',
    summary: 'Stop or start the database instance of a dbaas service',
    params: idParams,
    body: z.object({ action: z.enum(['stop', 'start']) }).strict(),
    responses: [{ status: 200, description: 'The action is done' }],
    async handler({ params, body, deps }) {
      const service = await findServiceOfFamily(deps.db, params.id, 'dbaas');
      const row = await findInstance(deps.db, service.id);
      if (!row) throw conflict('This database service has no instance.');
      if (body.action === 'stop') await deps.providers.dbaas.stopInstance(row.instance);
      else await deps.providers.dbaas.startInstance(row.instance);
      return { body: { object: 'dbaas_instance_power', instance: row.instance, action: body.action } };
    },
  }),
];
