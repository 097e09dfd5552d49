import { defineRoute, type AnyRoute } from '../route';
import { CapabilitiesSchema } from '../schemas';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../../domain/scopes';
import { DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE } from '../pagination';
import { buildOpenApiDocument } from '../openapi';

/** Resource families named by the first path segment after /v1 of the routes that exist. */
function resourcesOf(routes: AnyRoute[]): string[] {
  return [...new Set(routes.filter((r) => !r.internal).map((r) => r.path.split('/')[2]))].sort();
}

const FEATURE_PATHS: Record<string, string> = {
  api_keys: '/v1/api-keys',
  sessions: '/v1/sessions',
  operations: '/v1/operations',
  audit_log: '/v1/audit-logs',
  webhooks: '/v1/webhooks',
  orders: '/v1/orders',
  vps: '/v1/vps',
  dns: '/v1/dns',
  dbaas: '/v1/dbaas',
  caas: '/v1/caas',
  load_balancers: '/v1/load-balancers',
  object_storage: '/v1/object-storage',
  mail_gateway: '/v1/mail-gateway',
  images: '/v1/images',
  serverless: '/v1/serverless',
  wordpress: '/v1/wordpress',
};

/** The meta routes need the whole table (capabilities and the OpenAPI document describe it). */
export function metaRoutes(table: () => AnyRoute[]) {
  let document: unknown = null;
  return [
    defineRoute({
      method: 'get',
      path: '/v1/capabilities',
      operationId: 'getCapabilities',
      summary: 'Describe this instance: version, resources, scopes, limits, features',
      tag: 'Meta',
      scope: null,
      marks: [],
      responses: [{ status: 200, description: 'The instance description', schema: CapabilitiesSchema }],
      async handler({ deps }) {
        const routes = table();
        const has = (prefix: string) => routes.some((r) => r.path === prefix || r.path.startsWith(`${prefix}/`));
        const rl = deps.rateLimiter.buckets;
        return {
          body: {
            object: 'capabilities' as const,
            api_version: 'v1',
            brand: 'Cloud',
            resources: resourcesOf(routes),
            scopes: [...ALL_SCOPES],
            scopes_never_grantable_to_keys: [...SESSION_ONLY_SCOPES],
            limits: {
              max_page_size: MAX_PAGE_SIZE,
              default_page_size: DEFAULT_PAGE_SIZE,
              rate_limits: { default: rl.default, mutations: rl.mutations },
            },
            features: {
              ...Object.fromEntries(Object.entries(FEATURE_PATHS).map(([name, prefix]) => [name, has(prefix)])),
              idempotency_keys: true,
              cursor_pagination: true,
            },
          },
        };
      },
    }),
    defineRoute({
      method: 'get',
      path: '/v1/openapi.json',
      operationId: 'getOpenApiDocument',
      summary: 'The OpenAPI 3.1 document of this API',
      tag: 'Meta',
      scope: null,
      credential: 'none',
      marks: [],
      responses: [{ status: 200, description: 'OpenAPI 3.1 document' }],
      async handler() {
        document ??= buildOpenApiDocument(table(), { version: '1.0.0' });
        return { body: document };
      },
    }),
    defineRoute({
      method: 'get',
      path: '/healthz',
      operationId: 'healthz',
      summary: 'Liveness: the process answers',
      tag: 'Meta',
      scope: null,
      credential: 'none',
      marks: [],
      internal: true,
      responses: [{ status: 200, description: 'Alive' }],
      async handler() {
        return { body: { status: 'ok' } };
      },
    }),
    defineRoute({
      method: 'get',
      path: '/readyz',
      operationId: 'readyz',
      summary: 'Readiness: PostgreSQL answers (Temporal is reported, not required)',
      tag: 'Meta',
      scope: null,
      credential: 'none',
      marks: [],
      internal: true,
      responses: [
        { status: 200, description: 'Ready' },
        { status: 503, description: 'Not ready' },
      ],
      async handler({ deps }) {
        const database = await deps.db.raw('select 1').then(
          () => true,
          () => false,
        );
        const temporal = await deps.temporal
          .withDeadline(1_000, () => deps.temporal.client.workflowService.getSystemInfo({}))
          .then(
            () => true,
            () => false,
          );
        return { status: database ? 200 : 503, body: { status: database ? 'ready' : 'not_ready', database, temporal } };
      },
    }),
  ];
}
