import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { createToken, monthUsage, rotateTokens, type IssuedToken } from '../../../domain/serverless/manage';
import { METRICS, planOf, planSettingsOf, PRIMITIVES, type Primitive } from '../../../domain/serverless/plans';
import { findVisibleTenant, type TenantTarget } from '../../../domain/serverless/store';
import type { Principal } from '../../../domain/principal';
import { requireActionable } from '../../../domain/services';
import { iso } from '../../../common/time';
import type { AppDeps } from '../../deps';
import { defineRoute } from '../../route';
import { graceBody } from '../../schemas';

/**
 * Serverless primitives (SPEC "Serverless", DECISIONS "Serverless"): the account's tenant of each
 * primitive (cron, db, functions, kv), its data-plane tokens and its usage. The primitives
 * themselves are served by the data planes at each tenant's `api_endpoint`
 * (dataplane/serverless/), never here. Every primitive has the same three endpoints; kv has a fourth.
 */
const TAG = 'Serverless';

const TITLE: Record<Primitive, string> = { cron: 'cron', db: 'database', functions: 'functions', kv: 'key-value' };

/** What the GET adds for each primitive, read from the control plane's records of the data plane. */
const LIVE_FIELD: Record<Primitive, { name: string; schema: z.ZodType; description: string } | null> = {
  cron: { name: 'schedule_count', schema: z.number().int().nullable(), description: 'Schedules that exist (null when it cannot be read)' },
  db: { name: 'namespaces', schema: z.array(z.string()).nullable(), description: 'The names of the live namespaces, one SQL database each' },
  functions: { name: 'deployed_count', schema: z.number().int().nullable(), description: 'Functions deployed' },
  kv: null,
};

const metricsShape = (p: Primitive, value: z.ZodType) => Object.fromEntries(METRICS[p].map((m) => [m, value]));

const tenantSchema = (p: Primitive) => {
  const live = LIVE_FIELD[p];
  return z
    .object({
      object: z.literal(`serverless_${p}`),
      service_id: z.string(),
      status: z.string().meta({ description: "The service's status; the data plane serves only `active` tenants" }),
      plan: z.string().meta({ description: 'The product slug' }),
      api_endpoint: z.string().meta({ description: 'The data plane (Bearer token of this primitive)' }),
      limits: z.record(z.string(), z.number().int()),
      month_usage: z.object(metricsShape(p, z.number().int())).meta({ description: 'This UTC month so far' }),
      ...(live ? { [live.name]: live.schema.meta({ description: live.description }) } : {}),
    })
    .meta({ id: `Serverless${p[0].toUpperCase()}${p.slice(1)}` });
};

const TokenSchema = z
  .object({
    object: z.literal('serverless_token'),
    token: z.string().meta({ description: 'Shown once: the prefix of the primitive (`crt_`, `dbt_`, `fnt_`, `kvt_`) and 40 base62 characters' }),
    previous_valid_until: z
      .string()
      .nullable()
      .meta({ description: 'When the earlier tokens stop (rotation with grace); null when they stopped at once or none was retired' }),
  })
  .meta({ id: 'ServerlessToken' });

const usageSchema = (p: Primitive) =>
  z
    .object({
      object: z.literal('serverless_usage'),
      primitive: z.literal(p),
      period_start: z.string(),
      period_end: z.string(),
      ...metricsShape(p, z.number().int()),
      included: z.object({ ...metricsShape(p, z.number().int().nullable()), hard_cap: z.boolean() }).meta({
        description: 'Per UTC month; null for a metric without a quota. With `hard_cap` the primitive stops at quota instead of billing.',
      }),
      overage: z.object(metricsShape(p, z.number().int())),
      total_usd: z.number().meta({ description: 'The overage priced (no plan fee); 0 under a hard cap' }),
      daily: z
        .array(z.object({ date: z.string(), ...metricsShape(p, z.number().int()) }))
        .meta({ description: 'Each UTC day of the period so far, oldest first' }),
    })
    .meta({ id: `Serverless${p[0].toUpperCase()}${p.slice(1)}Usage` });

const GraceBody = graceBody('How long the earlier tokens keep working, 0 to 604800 (default 0: they stop at once)');

async function tenantOf(deps: AppDeps, principal: Principal, primitive: Primitive, action?: string): Promise<TenantTarget> {
  const target = await findVisibleTenant(deps.db, principal, primitive);
  if (action) requireActionable(target.service, action);
  return target;
}

const presentToken = (t: IssuedToken) => ({ object: 'serverless_token' as const, token: t.token, previous_valid_until: iso(t.previous_valid_until) });

/** The GET's live field of a primitive, from the records the data plane keeps in PostgreSQL. */
async function liveField(deps: AppDeps, p: Primitive, serviceId: number): Promise<Record<string, unknown>> {
  if (p === 'cron') {
    const [{ n }] = await deps.db('serverless_cron_schedules').where({ service_id: serviceId }).whereNull('deleted_at').count({ n: '*' });
    return { schedule_count: Number(n) };
  }
  if (p === 'db') {
    const rows: Array<{ name: string }> = await deps.db('serverless_db_namespaces').where({ service_id: serviceId }).orderBy('name').select('name');
    return { namespaces: rows.map((r) => r.name) };
  }
  if (p === 'functions') {
    const [{ n }] = await deps.db('serverless_functions').where({ service_id: serviceId }).count({ n: '*' });
    return { deployed_count: Number(n) };
  }
  return {};
}

const DATA_PLANE: Record<Primitive, string> = {
  cron: '`POST {api_endpoint}/v1/schedules` and the schedules under it',
  db: '`PUT|DELETE {api_endpoint}/v1/ns/{ns}` and `POST {api_endpoint}/v1/ns/{ns}/query`',
  functions: '`PUT|DELETE {api_endpoint}/v1/functions/{name}`',
  kv: '`PUT|GET|DELETE {api_endpoint}/v1/ns/{ns}/keys/{key}`',
};

function routesOf(p: Primitive) {
  const base = `/v1/serverless/${p}`;
  const Name = `Serverless${p[0].toUpperCase()}${p.slice(1)}`;
  return [
    defineRoute({
      method: 'get',
      path: base,
      operationId: `get${Name}`,
      summary: `The account's serverless ${TITLE[p]} service`,
      description: `Plan, limits, this UTC month's usage and the data plane's \`api_endpoint\` (${DATA_PLANE[p]}). \`404\` when the account has none (or the credential cannot see it).`,
      tag: TAG,
      scope: 'serverless:read',
      marks: [],
      responses: [{ status: 200, description: 'The tenant', schema: tenantSchema(p) }],
      async handler({ principal, deps }) {
        const { service, tenant } = await tenantOf(deps, principal, p);
        const plan = planOf(tenant.plan, planSettingsOf(deps.config));
        const [usage, live] = await Promise.all([monthUsage(deps.db, tenant, plan), liveField(deps, p, tenant.service_id)]);
        return {
          body: {
            object: `serverless_${p}` as const,
            service_id: formatId('svc', service.id),
            status: service.status,
            plan: tenant.plan,
            api_endpoint: tenant.api_endpoint,
            limits: plan.limits,
            month_usage: usage.totals,
            ...live,
          },
        };
      },
    }),
    ...(p === 'kv'
      ? [
          defineRoute({
            method: 'post',
            path: `${base}/keys`,
            operationId: `create${Name}Token`,
            summary: 'Create a kv data-plane token',
            description:
              'A new `kvt_...` token, shown once (only its SHA-256 is kept), beside the live ones: a tenant may hold several. It authenticates the data plane at `{api_endpoint}/v1/ns/...`.',
            tag: TAG,
            scope: 'serverless:keys',
            marks: ['R', 'I'],
            returnsSecret: true,
            responses: [{ status: 201, description: 'The token', schema: TokenSchema }],
            async handler({ principal, deps }) {
              const { tenant } = await tenantOf(deps, principal, p, 'creating a token');
              return { status: 201, body: presentToken(await createToken(deps.db, tenant)) };
            },
          }),
        ]
      : []),
    defineRoute({
      method: 'post',
      path: `${base}/keys/rotate`,
      operationId: `rotate${Name}Tokens`,
      summary: `Rotate the ${TITLE[p]} data-plane tokens`,
      description: `A new token, shown once; every earlier token of the tenant stops at \`previous_valid_until\` (now + \`grace_seconds\`; at once, within a second, with 0, the default). The first rotation issues the first token.${
        p === 'cron' ? ' Schedules keep firing: they do not depend on the token.' : p === 'functions' ? ' Deployed functions keep serving.' : ''
      }`,
      tag: TAG,
      scope: 'serverless:keys',
      marks: ['D', 'I'],
      returnsSecret: true,
      body: GraceBody,
      exampleBody: { grace_seconds: 3600 },
      responses: [{ status: 200, description: 'The new token', schema: TokenSchema }],
      async handler({ body, principal, deps }) {
        const { tenant } = await tenantOf(deps, principal, p, 'rotating the tokens');
        return { body: presentToken(await rotateTokens(deps.db, tenant, body.grace_seconds)) };
      },
    }),
    defineRoute({
      method: 'get',
      path: `${base}/usage`,
      operationId: `get${Name}Usage`,
      summary: `This month's serverless ${TITLE[p]} usage`,
      description: `${METRICS[p].map((m) => `\`${m}\``).join(', ')} of the current UTC month (a peak is the largest day), the plan's included amounts, the overage and its price in USD (0 on a plan with \`hard_cap\`, where the primitive stops at quota instead${
        p === 'cron'
          ? ': firings beyond it are skipped and counted as `skipped`, not billed'
          : p === 'functions'
            ? ': invocations answer 429'
            : ': writes answer 429'
      }), and one entry per UTC day so far. Counted within 5 seconds of the traffic.`,
      tag: TAG,
      scope: 'serverless:read',
      marks: [],
      responses: [{ status: 200, description: 'The usage', schema: usageSchema(p) }],
      async handler({ principal, deps }) {
        const { tenant } = await tenantOf(deps, principal, p);
        const { totals, ...report } = await monthUsage(deps.db, tenant, planOf(tenant.plan, planSettingsOf(deps.config)));
        return { body: { object: 'serverless_usage' as const, ...report, ...totals, primitive: p } };
      },
    }),
  ];
}

export const serverlessRoutes = PRIMITIVES.flatMap(routesOf);
