import { z } from 'zod';
import { liveRead } from '../../providers/errors';
import { formatId } from '../../common/ids';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../pagination';
import { defineRoute } from '../route';
import { AccountSchema, AuditLogSchema, CredentialSchema, iso, isoDateTime, listOf } from '../schemas';
import { AccountModel, type AuditLogModel } from '../../db/models';
import { visibleServiceIds, type Principal } from '../../domain/principal';

function presentCredential(principal: Principal) {
  return {
    object: 'credential' as const,
    id: principal.type === 'api_key' ? principal.credentialId : null,
    type: principal.type,
    scopes: [...principal.scopes].sort(),
    service_allowlist: principal.serviceAllowlist.map((id) => formatId('svc', id)),
    is_owner: principal.isOwner,
    rate_limit_tier: principal.rateLimitTier,
  };
}

/** What a redacted `path` reads when the request matched no route (its template is unknown). */
export const REDACTED_PATH = '(redacted)';

/**
 * An audit entry. For a credential narrowed to some services, the concrete path of another
 * credential's request (which may name a service it cannot see) is replaced by the route template
 * (docs/security.md).
 */
function presentAuditLog(row: AuditLogModel, principal: Principal) {
  const redact = visibleServiceIds(principal) !== null && row.credential_id !== principal.credentialId;
  return {
    object: 'audit_log' as const,
    id: formatId('log', row.id),
    request_id: row.request_id,
    method: row.method,
    path: redact ? (row.route ?? REDACTED_PATH) : row.path,
    route: row.route,
    status: row.status,
    error_code: row.error_code,
    scope_required: row.scope_required,
    credential_id: row.credential_id,
    ip: row.ip,
    via: row.via as 'api' | 'cli' | 'mcp' | null,
    duration_ms: row.duration_ms,
    created_at: iso(row.created_at),
  };
}

export const accountRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/account',
    operationId: 'getAccount',
    summary: 'The account and the credential in use',
    tag: 'Account',
    scope: 'account:read',
    marks: [],
    responses: [{ status: 200, description: 'The account', schema: AccountSchema }],
    async handler({ principal, deps }) {
      const account = await AccountModel.query(deps.db).findById(principal.accountId).throwIfNotFound();
      // The balance is billing's: read live, null while billing does not answer (SPEC: number or null).
      const credit = await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.billing.accountCredit(principal.accountId));
      return {
        body: {
          object: 'account' as const,
          id: formatId('cus', account.id),
          name: account.name,
          company: account.company,
          email: account.email,
          country: account.country,
          status: account.status,
          credit,
          currency: account.currency,
          credential: presentCredential(principal),
        },
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/account/credential',
    operationId: 'getCurrentCredential',
    summary: 'The credential in use: its type, effective scopes and service allowlist',
    description:
      'Answers for any valid credential, whatever its scopes, so that a client (the `cloud` CLI, the MCP server) can tell which calls it may make. The same object as `credential` in the account.',
    tag: 'Account',
    scope: null,
    marks: [],
    responses: [{ status: 200, description: 'The credential in use', schema: CredentialSchema }],
    async handler({ principal }) {
      return { body: presentCredential(principal) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/audit-logs',
    operationId: 'listAuditLogs',
    summary: 'The audit log of API activity',
    description:
      "Every /v1 request of the account, newest first: route template, status, error code, required scope, credential, ip, channel and duration. Never bodies or secrets. A credential narrowed to some services reads the route template as `path` of other credentials' requests.",
    tag: 'Account',
    scope: 'account:read',
    marks: [],
    query: z.object({
      ...paginationQuery(),
      method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE']).optional(),
      status: z.coerce.number().int().min(100).max(599).optional(),
      credential_id: z.string().max(100).optional(),
      via: z.enum(['api', 'cli', 'mcp']).optional(),
      created_after: isoDateTime().optional(),
      created_before: isoDateTime().optional(),
    }),
    responses: [{ status: 200, description: 'A page of audit log entries', schema: listOf(AuditLogSchema, 'AuditLogList') }],
    async handler({ query, principal, deps }) {
      const qb = deps.db('audit_logs').where('account_id', principal.accountId);
      if (query.method) qb.where('method', query.method);
      if (query.status) qb.where('status', query.status);
      if (query.credential_id) qb.where('credential_id', query.credential_id);
      if (query.via) qb.where('via', query.via);
      if (query.created_after) qb.where('created_at', '>', query.created_after);
      if (query.created_before) qb.where('created_at', '<', query.created_before);
      const { limit, cursor, ...filters } = query;
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('audit-logs', filters),
        column: 'id',
        limit,
        cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((r) => presentAuditLog(r as unknown as AuditLogModel, principal)),
          page,
        ),
      };
    },
  }),
];
