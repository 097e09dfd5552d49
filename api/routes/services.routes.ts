import { z } from 'zod';
import { keysetFetch, listEnvelope, listFingerprint, paginationQuery, type ListEnvelope } from '../pagination';
import { reusableBody } from '../json-body';
import { validationFailed } from '../../domain/errors';
import { defineRoute } from '../route';
import { ServiceSchema, idParam, listOf } from '../schemas';
import { findVisibleService, listVisibleServices, presentService, SERVICE_FAMILIES } from '../../domain/services';

/**
 * The answer for each held page of rows: domain/services.ts gives every request of an unchanged page
 * the same rows, and the same rows (under the same key: filters, limit, cursor) make the same
 * answer, so it is presented and serialised once (api/json-body.ts).
 */
const answers = new WeakMap<readonly unknown[], ListEnvelope<ReturnType<typeof presentService>>>();

export const serviceRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/services',
    operationId: 'listServices',
    summary: 'List the services the credential can see',
    description: "Only services visible to the credential: the key allowlist and the owning user's per-service permissions both apply.",
    tag: 'Services',
    scope: 'services:read',
    marks: [],
    query: z.object({
      ...paginationQuery(),
      family: z.enum(SERVICE_FAMILIES).optional(),
      status: z.enum(['active', 'pending', 'suspended', 'terminated', 'cancelled', 'fraud', 'unknown']).optional(),
    }),
    responses: [{ status: 200, description: 'A page of services, newest first', schema: listOf(ServiceSchema, 'ServiceList') }],
    async handler({ query, principal, deps }) {
      let fetched: readonly unknown[] = [];
      const page = await keysetFetch(
        async (after, take) => {
          if (after !== undefined && typeof after !== 'number') throw validationFailed([{ param: 'cursor', message: 'is not a cursor issued for this list' }]);
          const rows = await listVisibleServices(deps.db, principal, { family: query.family, status: query.status, beforeId: after, limit: take });
          fetched = rows;
          return rows;
        },
        {
          cursors: deps.cursors,
          list: listFingerprint('services', { family: query.family, status: query.status }),
          limit: query.limit,
          cursor: query.cursor,
          keyOf: (row) => row.id,
        },
      );
      let body = answers.get(fetched);
      if (!body) answers.set(fetched, (body = reusableBody(listEnvelope(page.rows.map(presentService), page))));
      return { body };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/services/{id}',
    operationId: 'getService',
    summary: 'Get a service',
    tag: 'Services',
    scope: 'services:read',
    marks: [],
    params: z.object({ id: idParam('svc_1') }),
    responses: [{ status: 200, description: 'The service', schema: ServiceSchema }],
    async handler({ params, principal, deps }) {
      return { body: presentService(await findVisibleService(deps.db, principal, params.id)) };
    },
  }),
];
