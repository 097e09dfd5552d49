import { z } from 'zod';
import { parseUlidId } from '../../common/ids';
import { presentOperation } from '../../domain/operations/contract';
import { visibleServiceIds } from '../../domain/principal';
import { notFound } from '../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../pagination';
import { defineRoute } from '../route';
import { OperationSchema, idParam, listOf } from '../schemas';

export const operationRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/operations',
    operationId: 'listOperations',
    summary: 'List recent operations of the account',
    description: 'Served from the database (the state each workflow last recorded), newest first.',
    tag: 'Operations',
    scope: 'operations:read',
    marks: [],
    query: z.object({
      ...paginationQuery(),
      status: z.enum(['pending', 'running', 'succeeded', 'failed']).optional(),
      type: z.string().max(100).optional(),
      resource_id: z.string().max(200).optional(),
    }),
    responses: [{ status: 200, description: 'A page of operations', schema: listOf(OperationSchema, 'OperationList') }],
    async handler({ query, principal, deps }) {
      const qb = deps.db('operations').where('account_id', principal.accountId);
      const visible = visibleServiceIds(principal);
      if (visible) qb.where((w) => w.whereNull('service_id').orWhereIn('service_id', visible));
      if (query.status) qb.where('status', query.status);
      if (query.type) qb.where('type', query.type);
      if (query.resource_id) qb.where('resource_id', query.resource_id);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('operations', { status: query.status, type: query.type, resource_id: query.resource_id }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((row) => presentOperation(row as never)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/operations/{id}',
    operationId: 'getOperation',
    summary: 'Get an operation',
    description:
      'A running operation is read from its workflow (cached 2 s); a finished one from the database. If Temporal does not answer, the last stored state comes back with `stale: true`.',
    tag: 'Operations',
    scope: 'operations:read',
    marks: [],
    params: z.object({ id: idParam('op_01JD0000000000000000000000') }),
    responses: [{ status: 200, description: 'The operation', schema: OperationSchema }],
    async handler({ params, principal, deps }) {
      const id = parseUlidId('op', params.id);
      if (!id) throw notFound('operation');
      return { body: await deps.operations.get(principal, id) };
    },
  }),
];
