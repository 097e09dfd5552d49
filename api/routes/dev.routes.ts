import { z } from 'zod';
import { parseNumericId } from '../../common/ids';
import { moveServiceStatus, presentService } from '../../domain/services';
import { BACKEND_FAMILIES } from '../../providers/switchboard';
import { DomainError, notFound } from '../../domain/errors';
import { defineDevRoute } from '../route';

/**
 * Local stand-ins for the control panel and for faults (DECISIONS "Local development stand-ins").
 * Mounted only with CLOUD_DEV_ENDPOINTS=1 (refused in production) and answered only from loopback.
 */
const SERVICE_MOVES = { suspend: 'suspended', unsuspend: 'active', terminate: 'terminated' } as const;

export const devRoutes = [
  defineDevRoute({
    method: 'post',
    path: '/_dev/backends/{family}/outage',
    operationId: 'devBackendOutage',
    summary: 'Take a simulated backend family down or bring it back',
    params: z.object({ family: z.enum(BACKEND_FAMILIES) }),
    body: z.object({ down: z.boolean() }).strict(),
    responses: [{ status: 200, description: 'The switch position' }],
    async handler({ params, body, deps }) {
      await deps.providers.switchboard.setDown(params.family, body.down);
      return { body: { object: 'backend_outage', family: params.family, down: body.down } };
    },
  }),
  ...(['suspend', 'unsuspend', 'terminate'] as const).map((move) =>
    defineDevRoute({
      method: 'post',
      path: `/_dev/services/{id}/${move}`,
      operationId: `devService${move[0].toUpperCase()}${move.slice(1)}`,
      summary: `Billing ${move}s a service`,
      params: z.object({ id: z.string() }),
      responses: [{ status: 200, description: 'The service after the move' }],
      async handler({ params, deps }) {
        const id = parseNumericId('svc', params.id);
        const row = id === null ? undefined : await deps.db('services').where({ id }).first();
        if (!row) throw notFound('service');
        if (row.status === 'terminated')
          throw new DomainError(409, 'invalid_request_error', 'conflict', 'The service is terminated; billing cannot move it any more.');
        if (move === 'unsuspend' && row.status !== 'suspended') {
          throw new DomainError(409, 'invalid_request_error', 'conflict', `Only a suspended service can be unsuspended (this one is ${row.status}).`);
        }
        const updated = await moveServiceStatus(deps.db, row.id, SERVICE_MOVES[move]);
        return { body: presentService(updated) };
      },
    }),
  ),
];
