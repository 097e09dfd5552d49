import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { addOrigin, createToken, deleteOrigin, monthUsage, revealSecret, rotateSecret, rotateTokens } from '../../../domain/images/manage';
import { planOf } from '../../../domain/images/plans';
import { findVisibleTenant, originsOf, type TenantTarget } from '../../../domain/images/store';
import type { Principal } from '../../../domain/principal';
import { requireActionable } from '../../../domain/services';
import type { AppDeps } from '../../deps';
import { listFingerprint, pageOfItems, paginationQuery, listEnvelope } from '../../pagination';
import { defineRoute } from '../../route';
import { graceBody, listOf } from '../../schemas';

/**
 * Image services (SPEC "Image services", DECISIONS "Images"): the account's one image tenant, its
 * delivery tokens, signing secret and origin allowlist, and its usage. Images themselves are served
 * by the delivery plane at the tenant's `api_endpoint` (dataplane/images/server.ts), never here.
 */
const TAG = 'Image services';

const Counters = { transformations: z.number().int(), deliveries: z.number().int(), egress_bytes: z.number().int() };

export const ImagesSchema = z
  .object({
    object: z.literal('images'),
    service_id: z.string(),
    plan: z.string(),
    tenant: z.string().meta({ description: 'The handle signed URLs carry (`tenant`)' }),
    api_endpoint: z.string().meta({ description: 'The delivery plane: `GET {api_endpoint}/v1/img`, `POST {api_endpoint}/v1/sign`' }),
    origin_count: z.number().int().meta({ description: '0 means nothing is served (the allowlist is fail-closed)' }),
    origin_limit: z.number().int(),
    month_usage: z.object(Counters),
    created_at: z.string(),
  })
  .meta({ id: 'Images' });

const TokenSchema = z
  .object({
    object: z.literal('images_token'),
    token: z.string().meta({ description: 'Shown once: `imgt_...`' }),
    created_at: z.string(),
    previous_valid_until: z
      .string()
      .nullable()
      .meta({ description: 'When the older tokens stop (rotation with grace); null when they stopped at once, or none was retired' }),
  })
  .meta({ id: 'ImagesToken' });

const SecretSchema = z
  .object({
    object: z.literal('images_signing_secret'),
    secret: z.string().meta({ description: '`imgs_...`: the HMAC-SHA256 key of signed URLs' }),
    created_at: z.string(),
    previous_valid_until: z.string().nullable().meta({ description: 'URLs signed with the previous secret work until then' }),
  })
  .meta({ id: 'ImagesSigningSecret' });

const OriginSchema = z.object({ object: z.literal('images_origin'), pattern: z.string(), created_at: z.string() }).meta({ id: 'ImagesOrigin' });

const UsageSchema = z
  .object({
    object: z.literal('images_usage'),
    period_start: z.string(),
    period_end: z.string(),
    ...Counters,
    included: z.object({ ...Counters, hard_cap: z.boolean() }),
    overage: z.object(Counters),
    total_usd: z.number().meta({ description: 'The overage priced (no plan fee); 0 on a plan with a hard cap' }),
    daily: z.array(z.object({ date: z.string(), ...Counters })).meta({ description: 'Each UTC day of the period so far, oldest first' }),
  })
  .meta({ id: 'ImagesUsage' });

const GraceBody = graceBody('How long the old one keeps working, 0 to 604800 (default 0: it stops at once)');
const OriginBody = z.object({
  pattern: z
    .string()
    .min(1)
    .max(300)
    .meta({ description: 'A host name (`img.example.com`) or `*.` and a domain (`*.example.com`: its subdomains, not itself)' }),
});
const originParams = z.object({
  pattern: z.string().min(1).max(300).meta({ description: 'The allowlisted pattern, URL-encoded', example: 'img.example.com' }),
});

async function tenantOf(deps: AppDeps, principal: Principal, action?: string): Promise<TenantTarget> {
  const target = await findVisibleTenant(deps.db, principal);
  if (action) requireActionable(target.service, action);
  return target;
}

const presentToken = (t: { token: string; created_at: Date; previous_valid_until: Date | null }) => ({
  object: 'images_token' as const,
  token: t.token,
  created_at: iso(t.created_at)!,
  previous_valid_until: iso(t.previous_valid_until),
});
const presentSecret = (s: { secret: string; created_at: Date; previous_valid_until: Date | null }) => ({
  object: 'images_signing_secret' as const,
  secret: s.secret,
  created_at: iso(s.created_at)!,
  previous_valid_until: iso(s.previous_valid_until),
});

export const imagesRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/images',
    operationId: 'getImages',
    summary: "The account's image service",
    description:
      "Plan, the delivery plane's `api_endpoint`, the allowlist's size and limit, and this UTC month's usage. `404` when the account has none (or the credential cannot see it).",
    tag: TAG,
    scope: 'images:read',
    marks: [],
    responses: [{ status: 200, description: 'The image service', schema: ImagesSchema }],
    async handler({ principal, deps }) {
      const { service, tenant } = await tenantOf(deps, principal);
      const [origins, usage] = await Promise.all([originsOf(deps.db, tenant.service_id), monthUsage(deps.db, tenant)]);
      return {
        body: {
          object: 'images' as const,
          service_id: formatId('svc', service.id),
          plan: tenant.plan,
          tenant: tenant.tenant,
          api_endpoint: tenant.api_endpoint,
          origin_count: origins.length,
          origin_limit: planOf(tenant.plan).origin_limit,
          month_usage: { transformations: usage.transformations, deliveries: usage.deliveries, egress_bytes: usage.egress_bytes },
          created_at: iso(tenant.created_at)!,
        },
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/images/keys',
    operationId: 'createImagesToken',
    summary: 'Create a delivery token',
    description: 'Returns the whole token (`imgt_...`) once; only its SHA-256 is kept. Tokens coexist until a rotation retires them.',
    tag: TAG,
    scope: 'images:keys',
    marks: ['R', 'I'],
    returnsSecret: true,
    responses: [{ status: 201, description: 'The token', schema: TokenSchema }],
    async handler({ principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'creating a delivery token');
      return { status: 201, body: presentToken(await createToken(deps.db, tenant)) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/images/keys/rotate',
    operationId: 'rotateImagesTokens',
    summary: 'Rotate the delivery tokens',
    description: 'A new token; every older one stops at `previous_valid_until` (now + `grace_seconds`), at once with 0 (the default).',
    tag: TAG,
    scope: 'images:keys',
    marks: ['D', 'I'],
    returnsSecret: true,
    body: GraceBody,
    exampleBody: { grace_seconds: 3600 },
    responses: [{ status: 200, description: 'The new token', schema: TokenSchema }],
    async handler({ body, principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'rotating the delivery tokens');
      return { body: presentToken(await rotateTokens(deps.db, tenant, body.grace_seconds)) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/images/origins',
    operationId: 'addImagesOrigin',
    summary: 'Allow an origin',
    description:
      "Body `pattern`: a host name or `*.` and a domain of two labels or more (no scheme, port or path: `400`). Adding one that is listed changes nothing (`200`); a new one is `201`; past the plan's `origin_limit`, `429 quota_exceeded`.",
    tag: TAG,
    scope: 'images:write',
    marks: ['R', 'I'],
    body: OriginBody,
    exampleBody: { pattern: '*.example.com' },
    responses: [
      { status: 201, description: 'Added', schema: OriginSchema },
      { status: 200, description: 'Listed already', schema: OriginSchema },
      { status: 429, description: 'The plan allows no more (`quota_exceeded`)' },
    ],
    async handler({ body, principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'adding an origin');
      const added = await addOrigin(deps.db, tenant, body.pattern);
      return { status: added.created ? 201 : 200, body: { object: 'images_origin' as const, pattern: added.pattern, created_at: iso(added.created_at)! } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/images/origins',
    operationId: 'listImagesOrigins',
    summary: 'List the allowed origins',
    description: 'By pattern. The allowlist is fail-closed: empty, nothing is served.',
    tag: TAG,
    scope: 'images:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of origins', schema: listOf(OriginSchema, 'ImagesOriginList') }],
    async handler({ query, principal, deps }) {
      const { tenant } = await tenantOf(deps, principal);
      const rows: Array<{ pattern: string; created_at: Date }> = await deps.db('images_origins').where({ service_id: tenant.service_id });
      const page = pageOfItems(deps.cursors, listFingerprint('images.origins', { service: tenant.service_id }), rows, (r) => r.pattern, query);
      return {
        body: listEnvelope(
          page.data.map((r) => ({ object: 'images_origin' as const, pattern: r.pattern, created_at: iso(r.created_at)! })),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/images/origins/{pattern}',
    operationId: 'deleteImagesOrigin',
    summary: 'Remove an allowed origin',
    description:
      'Immediate: the next request for an image of that origin is refused, cached or not. Adding the pattern back restores it. `404` when it is not listed.',
    tag: TAG,
    scope: 'images:write',
    marks: ['R', 'I'],
    params: originParams,
    responses: [{ status: 204, description: 'Removed' }],
    async handler({ params, principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'removing an origin');
      await deleteOrigin(deps.db, tenant, params.pattern);
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/images/signing-secret',
    operationId: 'revealImagesSigningSecret',
    summary: 'Reveal the URL-signing secret',
    description: 'The HMAC-SHA256 key of signed URLs (docs/images.md says how to sign). Revealing changes nothing.',
    tag: TAG,
    scope: 'images:keys',
    marks: [],
    returnsSecret: true,
    responses: [{ status: 200, description: 'The secret', schema: SecretSchema }],
    async handler({ principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'revealing the signing secret');
      return { body: presentSecret(await revealSecret(deps.db, deps.keyring, tenant)) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/images/signing-secret/rotate',
    operationId: 'rotateImagesSigningSecret',
    summary: 'Rotate the URL-signing secret',
    description:
      'A new secret; URLs signed with the old one keep working until `previous_valid_until` (now + `grace_seconds`; with 0, the default, they stop at once).',
    tag: TAG,
    scope: 'images:keys',
    marks: ['D', 'I'],
    returnsSecret: true,
    body: GraceBody,
    exampleBody: { grace_seconds: 86400 },
    responses: [{ status: 200, description: 'The new secret', schema: SecretSchema }],
    async handler({ body, principal, deps }) {
      const { tenant } = await tenantOf(deps, principal, 'rotating the signing secret');
      return { body: presentSecret(await rotateSecret(deps.db, deps.keyring, tenant, body.grace_seconds)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/images/usage',
    operationId: 'getImagesUsage',
    summary: "This month's image usage",
    description:
      "Transformations (cache misses), deliveries and egress bytes of the current UTC month, the plan's included amounts, the overage and its price in USD (the overage only; 0 on a plan with `hard_cap`, which stops serving at quota instead), and one entry per UTC day so far. Counted within 5 seconds of a delivery.",
    tag: TAG,
    scope: 'images:read',
    marks: [],
    responses: [{ status: 200, description: 'The usage', schema: UsageSchema }],
    async handler({ principal, deps }) {
      const { tenant } = await tenantOf(deps, principal);
      return { body: { object: 'images_usage' as const, ...(await monthUsage(deps.db, tenant)) } };
    },
  }),
];
