import { SERVICE_FAMILIES } from '../common/families';
import { z } from 'zod';

/**
 * Response schemas of the core resources (SPEC "Resources and their fields"). They document the
 * OpenAPI document and are checked against real responses in the tests.
 */
const ts = z.string().nullable().meta({ description: 'ISO 8601 timestamp' });

export const ErrorSchema = z
  .object({
    error: z.object({
      type: z.enum(['authentication_error', 'authorization_error', 'invalid_request_error', 'rate_limit_error', 'api_error']),
      code: z.string(),
      message: z.string(),
      param: z.string().nullable(),
      request_id: z.string(),
      required_scope: z.string().optional(),
      retry_after: z.number().int().optional(),
      errors: z.array(z.object({ param: z.string(), message: z.string() })).optional(),
      applied: z
        .number()
        .int()
        .optional()
        .meta({ description: 'Non-atomic batches (DNS records PATCH): how many elements before the failing one were applied and stay applied' }),
    }),
  })
  .meta({ id: 'Error' });

export function listOf<T extends z.ZodType>(item: T, id: string) {
  return z
    .object({
      object: z.literal('list'),
      data: z.array(item),
      has_more: z.boolean(),
      next_cursor: z.string().nullable(),
    })
    .meta({ id });
}

export const CapabilitiesSchema = z
  .object({
    object: z.literal('capabilities'),
    api_version: z.string(),
    brand: z.string(),
    resources: z.array(z.string()),
    scopes: z.array(z.string()),
    scopes_never_grantable_to_keys: z.array(z.string()),
    limits: z.object({
      max_page_size: z.number().int(),
      default_page_size: z.number().int(),
      rate_limits: z.record(z.string(), z.object({ per_key: z.number().int(), per_account: z.number().int() })),
    }),
    features: z.record(z.string(), z.boolean()),
  })
  .meta({ id: 'Capabilities' });

export const CredentialSchema = z
  .object({
    object: z.literal('credential'),
    id: z.string().nullable(),
    type: z.enum(['api_key', 'session']),
    scopes: z.array(z.string()),
    service_allowlist: z.array(z.string()),
    is_owner: z.boolean(),
    rate_limit_tier: z.string().nullable(),
  })
  .meta({ id: 'Credential' });

export const AccountSchema = z
  .object({
    object: z.literal('account'),
    id: z.string(),
    name: z.string().nullable(),
    company: z.string().nullable(),
    email: z.string().nullable(),
    country: z.string().nullable(),
    status: z.string().nullable(),
    credit: z.number().nullable(),
    currency: z.string(),
    credential: CredentialSchema,
  })
  .meta({ id: 'Account' });

export const ApiKeySchema = z
  .object({
    object: z.literal('api_key'),
    id: z.string(),
    name: z.string().nullable(),
    token_prefix: z.string().nullable(),
    token_last4: z.string().nullable(),
    scopes: z.array(z.string()),
    service_allowlist: z.array(z.string()),
    rate_limit_tier: z.string().nullable(),
    last_used_at: ts,
    expires_at: ts,
    created_at: ts,
    revoked_at: ts,
  })
  .meta({ id: 'ApiKey' });

export const CreatedApiKeySchema = ApiKeySchema.extend({ token: z.string() }).meta({ id: 'CreatedApiKey' });

export const ServiceSchema = z
  .object({
    object: z.literal('service'),
    id: z.string(),
    family: z.enum(SERVICE_FAMILIES),
    status: z.enum(['active', 'pending', 'suspended', 'terminated', 'cancelled', 'fraud', 'unknown']),
    name: z.string().nullable(),
    label: z.string().nullable(),
    primary_ip: z.string().nullable(),
    billing_cycle: z.string().nullable(),
    next_due_date: z.string().nullable(),
    created_at: ts,
    capabilities: z.record(z.string(), z.boolean()),
  })
  .meta({ id: 'Service' });

export const OperationSchema = z
  .object({
    object: z.literal('operation'),
    id: z.string(),
    type: z.string(),
    status: z.enum(['pending', 'running', 'succeeded', 'failed']),
    progress: z.number().int().min(0).max(100).nullable(),
    resource: z.object({ object: z.string(), id: z.string() }).nullable(),
    result: z.unknown(),
    error: z.unknown(),
    stale: z.boolean(),
    created_at: ts,
    completed_at: ts,
  })
  .meta({ id: 'Operation' });

export const AuditLogSchema = z
  .object({
    object: z.literal('audit_log'),
    id: z.string(),
    request_id: z.string(),
    method: z.string(),
    path: z.string(),
    route: z.string().nullable(),
    status: z.number().int(),
    error_code: z.string().nullable(),
    scope_required: z.string().nullable(),
    credential_id: z.string().nullable(),
    ip: z.string().nullable(),
    via: z.enum(['api', 'cli', 'mcp']).nullable(),
    duration_ms: z.number().int().nullable(),
    created_at: ts,
  })
  .meta({ id: 'AuditLog' });

export const SessionSchema = z
  .object({
    object: z.literal('session'),
    token: z.string(),
    expires_at: z.string(),
    user: z.object({ id: z.string(), email: z.string(), is_owner: z.boolean() }),
  })
  .meta({ id: 'Session' });

const EARLIEST = Date.parse('0001-01-01T00:00:00Z');
const LATEST = Date.parse('9999-12-31T23:59:59.999Z');

/**
 * An ISO 8601 date-time with offset, for request fields and filters. It reaches SQL as a UTC ISO
 * string within the years 0001 to 9999 (UTC): PostgreSQL refuses offsets past ±15:59 and year 0.
 */
export const isoDateTime = () =>
  z.iso
    .datetime({ offset: true })
    .refine((value) => Date.parse(value) >= EARLIEST && Date.parse(value) <= LATEST, {
      message: 'must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z',
    })
    .transform((value) => new Date(value).toISOString());

/** A path parameter carrying a resource id (with or without its prefix). */
/**
 * The body of a rotation with a grace period (DECISIONS "Data planes and outbound fetches":
 * `grace_seconds` integer 0..604800, default 0); `description` says what keeps working during it.
 */
export const graceBody = (description: string) => z.object({ grace_seconds: z.number().int().min(0).max(604_800).default(0).meta({ description }) });

export const idParam = (example: string) => z.string().min(1).max(200).meta({ example });

export { iso } from '../common/time';
