import { z } from 'zod';
import { formatId, parseNumericId } from '../../common/ids';
import { sha256Hex } from '../../common/crypto';
import { API_KEY_PREFIX, newApiKeyToken } from '../../domain/credentials';
import { canSeeService, type Principal } from '../../domain/principal';
import { GRANTABLE_TO_KEYS, isKnownScope, SESSION_ONLY_SCOPES } from '../../domain/scopes';
import { ApiKeyModel } from '../../db/models';
import type { AppDeps } from '../deps';
import { conflict, forbidden, insufficientScope, notFound, validationFailed, type FieldError } from '../../domain/errors';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../pagination';
import { defineRoute } from '../route';
import { ApiKeySchema, CreatedApiKeySchema, idParam, iso, isoDateTime, listOf } from '../schemas';
import { RATE_LIMIT_TIERS } from '../../infra/rate-limit';
import { enumField } from '../enums';

const name = z.string().min(1).max(255);
/** Why a scope cannot be granted to a key (the `message` of its `scopes.N` error). */
function scopeRefusal(scope: string): string {
  if (scope === '*' || scope.endsWith(':*')) return `"${scope}" is not accepted: list concrete scopes`;
  if (SESSION_ONLY_SCOPES.includes(scope)) return `"${scope}" is session-only and cannot be granted to an API key`;
  if (!isKnownScope(scope)) return `"${scope}" is not a scope of this API (see GET /v1/capabilities)`;
  return `"${scope}" cannot be granted to an API key`;
}

/** Concrete scopes a key can hold: an enum in the document, each refusal explained. */
const scopes = z
  .array(enumField(GRANTABLE_TO_KEYS as [string, ...string[]], scopeRefusal))
  .min(1)
  .max(100);
const allowlist = z.array(z.string().max(50)).max(1000);

const CreateBody = z
  .object({
    name,
    scopes,
    service_allowlist: allowlist.optional(),
    expires_at: isoDateTime().optional(),
    rate_limit_tier: z.enum(Object.keys(RATE_LIMIT_TIERS) as [string, ...string[]]).optional(),
  })
  .strict();

const UpdateBody = z.object({ name: name.optional(), scopes: scopes.optional(), service_allowlist: allowlist.optional() }).strict();

export function presentApiKey(row: ApiKeyModel) {
  return {
    object: 'api_key' as const,
    id: formatId('key', row.id),
    name: row.name,
    token_prefix: row.token_prefix,
    token_last4: row.token_last4,
    scopes: row.scopes,
    service_allowlist: row.service_allowlist.map((id) => formatId('svc', id)),
    rate_limit_tier: row.rate_limit_tier,
    last_used_at: iso(row.last_used_at),
    expires_at: iso(row.expires_at),
    created_at: iso(row.created_at),
    revoked_at: iso(row.revoked_at),
  };
}

/** A user can only grant what they hold (the schema let only concrete, grantable scopes through). */
function checkScopes(principal: Principal, requested: string[]): string[] {
  const notHeld = requested.find((s) => !principal.scopes.has(s));
  if (notHeld) throw insufficientScope(notHeld);
  return [...new Set(requested)];
}

async function checkAllowlist(deps: AppDeps, principal: Principal, raw: string[]): Promise<number[]> {
  const ids = raw.map((value) => parseNumericId('svc', value));
  const known = new Set<number>(
    (
      await deps
        .db('services')
        .where('account_id', principal.accountId)
        .whereIn(
          'id',
          ids.filter((id): id is number => id !== null),
        )
        .select('id')
    ).map((r: { id: number }) => r.id),
  );
  const errors: FieldError[] = [];
  ids.forEach((id, i) => {
    if (id === null || !known.has(id) || !canSeeService(principal, id))
      errors.push({ param: `service_allowlist.${i}`, message: `no such service "${raw[i]}"` });
  });
  if (errors.length) throw validationFailed(errors);
  return [...new Set(ids as number[])];
}

/** Owners manage every key of the account; other users their own. */
async function findKey(deps: AppDeps, principal: Principal, rawId: string): Promise<ApiKeyModel> {
  const id = parseNumericId('key', rawId);
  if (id === null) throw notFound('API key');
  const qb = ApiKeyModel.query(deps.db).findOne({ id, account_id: principal.accountId });
  if (!principal.isOwner) qb.where('user_id', principal.userId);
  const row = await qb;
  if (!row) throw notFound('API key');
  return row;
}

export const apiKeyRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/api-keys',
    operationId: 'createApiKey',
    summary: 'Create an API key',
    description:
      "Returns the clear `token` once; only its SHA-256 hash is stored. Never replayed by Idempotency-Key (it returns a secret). `rate_limit_tier` above `standard` multiplies the key's own budgets; only the account owner may set it (`403 owner_required`), and it never raises the per-account budgets.",
    tag: 'API keys',
    scope: 'apikeys:write',
    credential: 'session',
    marks: ['R', 'I'],
    returnsSecret: true,
    body: CreateBody,
    responses: [{ status: 201, description: 'The created key, with its token', schema: CreatedApiKeySchema }],
    async handler({ body, principal, deps }) {
      if (body.rate_limit_tier && body.rate_limit_tier !== 'standard' && !principal.isOwner) {
        throw forbidden('owner_required', `Only the account owner can give a key the rate-limit tier "${body.rate_limit_tier}".`);
      }
      const grantedScopes = checkScopes(principal, body.scopes);
      const serviceAllowlist = await checkAllowlist(deps, principal, body.service_allowlist ?? []);
      if (body.expires_at && new Date(body.expires_at).getTime() <= Date.now()) {
        throw validationFailed([{ param: 'expires_at', message: 'must be in the future' }]);
      }
      const token = newApiKeyToken();
      const [row] = await deps
        .db('api_keys')
        .insert({
          account_id: principal.accountId,
          user_id: principal.userId,
          name: body.name,
          token_hash: sha256Hex(token),
          token_prefix: token.slice(0, API_KEY_PREFIX.length + 4),
          token_last4: token.slice(-4),
          scopes: grantedScopes,
          service_allowlist: serviceAllowlist,
          rate_limit_tier: body.rate_limit_tier ?? 'standard',
          expires_at: body.expires_at ?? null,
        })
        .returning('*');
      const view = presentApiKey(row);
      return { status: 201, headers: { Location: `/v1/api-keys/${view.id}` }, body: { ...view, token } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/api-keys',
    operationId: 'listApiKeys',
    summary: 'List API keys',
    description: 'Never tokens: only their prefix and last four characters.',
    tag: 'API keys',
    scope: 'apikeys:read',
    credential: 'session',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of API keys', schema: listOf(ApiKeySchema, 'ApiKeyList') }],
    async handler({ query, principal, deps }) {
      const qb = deps.db('api_keys').where('account_id', principal.accountId);
      if (!principal.isOwner) qb.where('user_id', principal.userId);
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('api-keys', {}),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r) => presentApiKey(r as unknown as ApiKeyModel)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/api-keys/{id}',
    operationId: 'getApiKey',
    summary: 'Get an API key',
    tag: 'API keys',
    scope: 'apikeys:read',
    credential: 'session',
    marks: [],
    params: z.object({ id: idParam('key_1') }),
    responses: [{ status: 200, description: 'The API key', schema: ApiKeySchema }],
    async handler({ params, principal, deps }) {
      return { body: presentApiKey(await findKey(deps, principal, params.id)) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/api-keys/{id}/revoke',
    operationId: 'revokeApiKey',
    summary: 'Revoke an API key (irreversible)',
    description: 'Takes effect in every API process within a second. Revoking a revoked key changes nothing.',
    tag: 'API keys',
    scope: 'apikeys:write',
    credential: 'session',
    marks: ['D', 'I'],
    params: z.object({ id: idParam('key_1') }),
    responses: [{ status: 200, description: 'The revoked key', schema: ApiKeySchema }],
    async handler({ params, principal, deps }) {
      const key = await findKey(deps, principal, params.id);
      const [row] = await deps
        .db('api_keys')
        .where({ id: key.id })
        .update({ revoked_at: deps.db.raw('coalesce(revoked_at, now())') })
        .returning('*');
      deps.credentials.invalidate();
      return { body: presentApiKey(row) };
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/v1/api-keys/{id}',
    operationId: 'updateApiKey',
    summary: 'Rename an API key or narrow its scopes and allowlist',
    description: 'Scopes and allowlist may only narrow; widening returns 403. An unrestricted key may gain an allowlist but never lose it.',
    tag: 'API keys',
    scope: 'apikeys:write',
    credential: 'session',
    marks: ['R', 'I'],
    params: z.object({ id: idParam('key_1') }),
    body: UpdateBody,
    responses: [{ status: 200, description: 'The updated key', schema: ApiKeySchema }],
    async handler({ params, body, principal, deps }) {
      const key = await findKey(deps, principal, params.id);
      if (key.revoked_at) throw conflict('This API key is revoked; revocation is final.');
      const patch: Record<string, unknown> = {};
      if (body.name !== undefined) patch.name = body.name;
      if (body.scopes !== undefined) {
        const widened = body.scopes.filter((s) => !key.scopes.includes(s));
        if (widened.length) throw forbidden('key_widening_not_allowed', `Scopes can only be narrowed; "${widened[0]}" is not on this key.`);
        patch.scopes = [...new Set(body.scopes)];
      }
      if (body.service_allowlist !== undefined) {
        const next = await checkAllowlist(deps, principal, body.service_allowlist);
        const current = key.service_allowlist.map(Number);
        const widens = current.length > 0 && (next.length === 0 || next.some((id) => !current.includes(id)));
        if (widens) throw forbidden('key_widening_not_allowed', 'The service allowlist can only be narrowed; a restricted key cannot lose its restriction.');
        if (next.length > 0) patch.service_allowlist = next;
      }
      const [row] = Object.keys(patch).length ? await deps.db('api_keys').where({ id: key.id }).update(patch).returning('*') : [key];
      deps.credentials.invalidate();
      return { body: presentApiKey(row) };
    },
  }),
];
