import { z } from 'zod';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../pagination';
import { defineRoute } from '../route';
import { ServiceSchema, idParam, listOf } from '../schemas';
import { findVisibleService, presentService, SERVICE_FAMILIES } from '../../domain/services';
import { whereVisibleService } from '../../domain/principal';

export const serviceRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/services',
    operationId: 'listServices',
    summary: 'List the services the credential can see',
    description: "Only services visible to the credential: the key allowlist and the owning user's per-service permissions both apply.",
    tag: 'Services',
    scope: 'services:read',
    credential: 'credential',
    marks: [],
    query: z.object({
      ...paginationQuery(),
      family: z.enum(SERVICE_FAMILIES).optional(),
      status: z.enum(['active', 'pending', 'suspended', 'terminated', 'cancelled', 'fraud', 'unknown']).optional(),
    }),
    responses: [{ status: 200, description: 'A page of services, newest first', schema: listOf(ServiceSchema, 'ServiceList') }],
    async handler({ query, principal, deps }) {
      const qb = deps.db('services').where('account_id', principal.accountId);
      whereVisibleService(qb, principal, 'id');
      if (query.family) qb.where('family', query.family);
      if (query.status) qb.where('status', query.status);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('services', { family: query.family, status: query.status }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return { body: listEnvelope(page.rows.map(presentService), page) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/services/{id}',
    operationId: 'getService',
    summary: 'Get a service',
    tag: 'Services',
    scope: 'services:read',
    credential: 'credential',
    marks: [],
    params: z.object({ id: idParam('svc_1') }),
    responses: [{ status: 200, description: 'The service', schema: ServiceSchema }],
    async handler({ params, principal, deps }) {
      return { body: presentService(await findVisibleService(deps.db, principal, params.id)) };
    },
  }),
];
