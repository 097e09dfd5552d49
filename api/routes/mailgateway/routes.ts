import { z } from 'zod';
import { formatId, parseNumericId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { recordsOf } from '../../../domain/mailgateway/domains';
import { addDomain, createKey, deleteDomain, domainNamed, revokeKey, verifyDomain } from '../../../domain/mailgateway/manage';
import { gatewayMetrics, type Thresholds } from '../../../domain/mailgateway/metrics';
import { monthlyLimitOf } from '../../../domain/mailgateway/plans';
import { messageView } from '../../../domain/mailgateway/present';
import {
  activeSmtpUsername,
  createSmtpCredential,
  rotateSmtpCredential,
  smtpAddressOf as addressOf,
  type SmtpCredential,
} from '../../../domain/mailgateway/smtp';
import { countsOf, findVisibleGateway, monthSends, type DomainRow, type GatewayTarget, type KeyRow } from '../../../domain/mailgateway/store';
import { notFound } from '../../../domain/errors';
import type { Principal } from '../../../domain/principal';
import { requireActionable } from '../../../domain/services';
import type { AppDeps } from '../../deps';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { idParam, listOf } from '../../schemas';

/**
 * Mail gateway (SPEC "Mail gateway", DECISIONS "Mail gateway"): the account's one gateway, its
 * sending domains (records to publish and their verification) and sending keys. Mail itself is sent
 * at the gateway's `api_endpoint` (`POST /emails`) with a key, never here.
 */
const TAG = 'Mail gateway';

const UsageCounts = { month: z.string().meta({ description: 'The current UTC month, `YYYY-MM`' }), accepted: z.number().int(), rejected: z.number().int() };

export const MailGatewaySchema = z
  .object({
    object: z.literal('mail_gateway'),
    service_id: z.string(),
    status: z.enum(['active', 'suspended']).meta({ description: '`suspended`: the service is suspended, or sending is (see `suspended_reason`)' }),
    suspended_reason: z.string().nullable().meta({ description: 'Why sending is suspended (a rate over its limit), or null' }),
    api_endpoint: z.string().meta({ description: 'The data plane: `POST {api_endpoint}/emails` with a sending key' }),
    usage: z.object(UsageCounts),
    domain_count: z.number().int(),
    key_count: z.number().int().meta({ description: 'Active (not revoked) sending keys' }),
    created_at: z.string(),
  })
  .meta({ id: 'MailGateway' });

const UsageSchema = z
  .object({
    object: z.literal('mail_usage'),
    ...UsageCounts,
    limit: z.number().int().meta({ description: 'Accepted sends included each month; past it `/emails` answers `429 quota_exceeded`' }),
  })
  .meta({ id: 'MailUsage' });

const RecordSchema = z
  .object({
    purpose: z.enum(['dkim', 'mail_from_mx', 'mail_from_spf', 'spf', 'dmarc']),
    type: z.enum(['TXT', 'MX']),
    host: z.string().meta({ description: 'The full name to publish at' }),
    value: z.string().meta({ description: 'The value, as plain text (an MX value is `<priority> <host>`)' }),
    status: z.enum(['pending', 'verified', 'info']).meta({ description: '`dkim` and `mail_from_mx` are verified; the others are advice (`info`)' }),
  })
  .meta({ id: 'MailDnsRecord' });

const DomainSchema = z
  .object({
    object: z.literal('mail_domain'),
    domain: z.string(),
    status: z.enum(['pending', 'verified']),
    verified_at: z.string().nullable(),
    records: z.array(RecordSchema),
    created_at: z.string(),
  })
  .meta({ id: 'MailDomain' });

const KeySchema = z
  .object({
    object: z.literal('mail_key'),
    id: z.string(),
    name: z.string(),
    secret: z.string().nullable().meta({ description: '`mg_live_...`, in the answer that creates the key only; null everywhere else' }),
    created_at: z.string(),
    last_used_at: z.string().nullable(),
    revoked_at: z.string().nullable(),
  })
  .meta({ id: 'MailKey' });

const RecipientSchema = z.object({
  email: z.string(),
  status: z.enum(['queued', 'deferred', 'delivered', 'opened', 'bounced', 'complained']),
  response: z.string().nullable().meta({ description: "The receiving server's last reply" }),
});
const MessageSchema = z
  .object({
    object: z.literal('mail_message'),
    id: z.string(),
    domain: z.string(),
    from: z.string(),
    subject: z.string(),
    status: z
      .enum(['queued', 'deferred', 'delivered', 'opened', 'bounced', 'complained'])
      .meta({ description: 'The highest-severity event of the message: queued < deferred < delivered < opened < bounced < complained' }),
    recipients: z.array(RecipientSchema),
    created_at: z.string(),
    updated_at: z.string(),
  })
  .meta({ id: 'MailMessage' });

const MetricCounts = { sent: z.number().int(), delivered: z.number().int(), opened: z.number().int(), bounced: z.number().int(), complained: z.number().int() };
const MetricsSchema = z
  .object({
    object: z.literal('mail_metrics'),
    days: z.number().int(),
    ...MetricCounts,
    delivery_rate: z.number().nullable(),
    open_rate: z.number().nullable(),
    bounce_rate: z.number().nullable(),
    complaint_rate: z.number().nullable(),
    latency_ms: z.object({ p50: z.number().nullable(), p95: z.number().nullable() }).meta({ description: 'From acceptance to the first delivery' }),
    bounce_rate_limit: z.number(),
    complaint_rate_limit: z.number(),
    daily: z.array(z.object({ date: z.string(), ...MetricCounts })).meta({ description: 'Each UTC day of the window, today last' }),
    domains: z.array(z.object({ domain: z.string(), ...MetricCounts })),
  })
  .meta({ id: 'MailMetrics' });

const SmtpSchema = z
  .object({
    object: z.literal('mail_smtp'),
    host: z.string(),
    port: z.number().int(),
    username: z.string().nullable(),
    status: z.enum(['none', 'active']),
  })
  .meta({ id: 'MailSmtp' });
const SmtpCredentialSchema = z
  .object({
    object: z.literal('mail_smtp_credential'),
    host: z.string(),
    port: z.number().int(),
    username: z.string(),
    password: z.string().meta({ description: 'Shown this once; only its hash is kept' }),
  })
  .meta({ id: 'MailSmtpCredential' });

const DomainBody = z.object({ domain: z.string().min(1).max(253).meta({ description: 'The sending domain (two labels or more)', example: 'example.com' }) });
const KeyBody = z.object({ name: z.string().trim().min(1).max(100).meta({ example: 'production' }) });
const domainParams = z.object({ domain: z.string().min(1).max(253).meta({ example: 'example.com' }) });
const keyParams = z.object({ key_id: idParam('mgk_1') });

const thresholdsOf = (deps: AppDeps): Thresholds => ({
  bounce_rate_limit: deps.config.MAIL_BOUNCE_RATE_LIMIT,
  complaint_rate_limit: deps.config.MAIL_COMPLAINT_RATE_LIMIT,
  min_sends: deps.config.MAIL_SUSPEND_MIN_SENDS,
});

const smtpAddressOf = (deps: AppDeps) => addressOf(deps.config);

const presentCredential = (deps: AppDeps, c: SmtpCredential) => ({ object: 'mail_smtp_credential' as const, ...smtpAddressOf(deps), ...c });

async function gatewayOf(deps: AppDeps, principal: Principal, action?: string): Promise<GatewayTarget> {
  const target = await findVisibleGateway(deps.db, principal);
  if (action) requireActionable(target.service, action);
  return target;
}

const presentDomain = (deps: AppDeps, d: DomainRow, options: { verifiedAtShown: boolean } = { verifiedAtShown: true }) => ({
  object: 'mail_domain' as const,
  domain: d.domain,
  status: d.status,
  verified_at: options.verifiedAtShown ? iso(d.verified_at) : null,
  records: recordsOf(d, deps.config.MAIL_MX_HOST),
  created_at: iso(d.created_at)!,
});

const presentKey = (k: KeyRow & { secret?: string }) => ({
  object: 'mail_key' as const,
  id: formatId('mgk', k.id),
  name: k.name,
  secret: k.secret ?? null,
  created_at: iso(k.created_at)!,
  last_used_at: iso(k.last_used_at),
  revoked_at: iso(k.revoked_at),
});

export const mailGatewayRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway',
    operationId: 'getMailGateway',
    summary: "The account's mail gateway",
    description:
      "Status, the data plane's `api_endpoint`, this UTC month's accepted and rejected sends, and the counts of domains and active keys. `404` when the account has none (or the credential cannot see it).",
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    responses: [{ status: 200, description: 'The mail gateway', schema: MailGatewaySchema }],
    async handler({ principal, deps }) {
      const { service, gateway } = await gatewayOf(deps, principal);
      const [usage, counts] = await Promise.all([monthSends(deps.db, gateway.service_id), countsOf(deps.db, gateway.service_id)]);
      const suspended = service.status !== 'active' || gateway.sending_suspended_at !== null;
      return {
        body: {
          object: 'mail_gateway' as const,
          service_id: formatId('svc', service.id),
          status: suspended ? ('suspended' as const) : ('active' as const),
          suspended_reason: gateway.sending_suspended_reason ?? (service.status !== 'active' ? `The service is ${service.status}.` : null),
          api_endpoint: gateway.api_endpoint,
          usage,
          domain_count: counts.domains,
          key_count: counts.activeKeys,
          created_at: iso(gateway.created_at)!,
        },
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/usage',
    operationId: 'getMailUsage',
    summary: "This month's sends",
    description:
      'Accepted and rejected sends of the current UTC calendar month. Accepted sends are billed; rejected ones (stopped before the MTA: a revoked key, an unverified domain, a suspension, the quota) are not.',
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    responses: [{ status: 200, description: 'The usage', schema: UsageSchema }],
    async handler({ principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      return { body: { object: 'mail_usage' as const, ...(await monthSends(deps.db, gateway.service_id)), limit: monthlyLimitOf(gateway.plan) } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/mail-gateway/domains',
    operationId: 'addMailDomain',
    summary: 'Add a sending domain',
    description:
      "Body `domain` (two labels or more, else `400 validation_failed`). Answers the DNS records to publish: a DKIM key of its own (RSA 2048, own selector), the bounce host's MX and SPF, SPF and DMARC advice. Adding a domain that is there already changes nothing and returns the same records (`200`). Then publish them and `POST .../verify`.",
    tag: TAG,
    scope: 'mailgateway:write',
    marks: ['R', 'I'],
    body: DomainBody,
    exampleBody: { domain: 'example.com' },
    responses: [
      { status: 201, description: 'Added', schema: DomainSchema },
      { status: 200, description: 'There already', schema: DomainSchema },
    ],
    async handler({ body, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'adding a domain');
      const added = await addDomain(deps.db, deps.keyring, gateway, body.domain);
      return { status: added.created ? 201 : 200, body: presentDomain(deps, added.domain) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/domains',
    operationId: 'listMailDomains',
    summary: 'List the sending domains',
    description: 'Newest first: each domain with its records, their statuses and `verified_at`.',
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of domains', schema: listOf(DomainSchema, 'MailDomainList') }],
    async handler({ query, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      const page = await keysetPage<DomainRow>(deps.db('mail_domains').where({ service_id: gateway.service_id }), {
        cursors: deps.cursors,
        list: listFingerprint('mail.domains', { service: gateway.service_id }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
        keyOf: (d) => Number(d.id),
      });
      return {
        body: listEnvelope(
          page.rows.map((d) => presentDomain(deps, d)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/mail-gateway/domains/{domain}',
    operationId: 'deleteMailDomain',
    summary: 'Remove a sending domain',
    description:
      'Sending from the domain stops at once; the records published in DNS stay. Adding the domain again makes a new DKIM key pair (new records to publish). `404` when it is not there.',
    tag: TAG,
    scope: 'mailgateway:write',
    marks: ['D', 'I'],
    params: domainParams,
    responses: [{ status: 204, description: 'Removed' }],
    async handler({ params, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'removing a domain');
      await deleteDomain(deps.db, gateway, await domainNamed(deps.db, gateway, params.domain));
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/mail-gateway/domains/{domain}/verify',
    operationId: 'verifyMailDomain',
    summary: "Check a domain's records",
    description:
      'Looks the `dkim` TXT and the `mail_from_mx` MX up now (through `DNS_RESOLVER` where set) and updates the record and domain statuses: `verified` once both are published as given. `pending` is not an error. `verified_at` is `null` in this answer (read it from the list). `503 backend_unavailable` when the resolver does not answer.',
    tag: TAG,
    scope: 'mailgateway:write',
    marks: [],
    params: domainParams,
    responses: [{ status: 200, description: 'The domain after the check', schema: DomainSchema }],
    async handler({ params, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'verifying a domain');
      const domain = await domainNamed(deps.db, gateway, params.domain);
      // The check is the mail provider's (SPEC): its outage switch answers 503 (POST /_dev/backends/mailgateway/outage).
      await deps.providers.switchboard.assertUp('mailgateway');
      const checked = await verifyDomain(deps.db, gateway, domain, deps.config.MAIL_MX_HOST, deps.config.DNS_RESOLVER);
      return { body: presentDomain(deps, checked, { verifiedAtShown: false }) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/mail-gateway/keys',
    operationId: 'createMailKey',
    summary: 'Create a sending key',
    description:
      'Body `name`. Answers the key with its `secret` (`mg_live_...`), shown this once: send with it as `Authorization: Bearer` at `{api_endpoint}/emails`.',
    tag: TAG,
    scope: 'mailgateway:send',
    marks: ['R', 'I'],
    returnsSecret: true,
    body: KeyBody,
    exampleBody: { name: 'production' },
    responses: [{ status: 201, description: 'The key, with its secret', schema: KeySchema }],
    async handler({ body, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'creating a sending key');
      return { status: 201, body: presentKey(await createKey(deps.db, gateway, body.name)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/keys',
    operationId: 'listMailKeys',
    summary: 'List the sending keys',
    description: 'Newest first, revoked keys included; `secret` is always null.',
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of keys', schema: listOf(KeySchema, 'MailKeyList') }],
    async handler({ query, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      const qb = deps.db('mail_keys').where({ service_id: gateway.service_id }).select('id', 'service_id', 'name', 'created_at', 'last_used_at', 'revoked_at');
      const page = await keysetPage<KeyRow>(qb, {
        cursors: deps.cursors,
        list: listFingerprint('mail.keys', { service: gateway.service_id }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
        keyOf: (k) => Number(k.id),
      });
      return {
        body: listEnvelope(
          page.rows.map((k) => presentKey({ ...k, id: Number(k.id) })),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/mail-gateway/keys/{key_id}',
    operationId: 'revokeMailKey',
    summary: 'Revoke a sending key',
    description:
      '`/emails` refuses the key within a second; mail it already sent is still delivered. Answers the key with `revoked_at`; revoking it again changes nothing.',
    tag: TAG,
    scope: 'mailgateway:write',
    marks: ['D', 'I'],
    params: keyParams,
    responses: [{ status: 200, description: 'The revoked key', schema: KeySchema }],
    async handler({ params, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'revoking a sending key');
      const id = parseNumericId('mgk', params.key_id);
      if (id === null) throw notFound('mail key');
      return { body: presentKey(await revokeKey(deps.db, gateway, id)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/messages',
    operationId: 'listMailMessages',
    summary: 'List sent messages',
    description:
      "One item per message, newest first, with each recipient's status and the receiving server's last reply; no bodies. A message's status is its highest-severity event (`bounced` beats `delivered`). Messages are kept 90 days.",
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of messages', schema: listOf(MessageSchema, 'MailMessageList') }],
    async handler({ query, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      const qb = deps.db('mail_messages').where({ service_id: gateway.service_id });
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('mail.messages', { service: gateway.service_id }),
        column: 'id',
        limit: query.limit,
        cursor: query.cursor,
      });
      const ids = page.rows.map((m) => m.id);
      const recipients: Array<{ message_id: string; email: string; status: string; response: string | null }> = ids.length
        ? await deps.db('mail_recipients').whereIn('message_id', ids).orderBy(['message_id', 'email'])
        : [];
      return {
        body: listEnvelope(
          page.rows.map((m) =>
            messageView(
              m,
              recipients.filter((r) => r.message_id === m.id),
            ),
          ),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/metrics',
    operationId: 'getMailMetrics',
    summary: 'Delivery metrics',
    description:
      'Over the last `days` UTC days (1 to 90, default 30; today included): messages sent, delivered, opened, bounced and complained about, the rates over `sent` (fractions 0 to 1, null when nothing was sent), send-to-delivery latency, a daily series (today last), a per-domain breakdown, and the bounce and complaint rate limits: crossing one (over the last 30 days, with enough sends) suspends sending.',
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    query: z.object({ days: z.coerce.number().int().min(1).max(90).default(30) }),
    responses: [{ status: 200, description: 'The metrics', schema: MetricsSchema }],
    async handler({ query, principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      return { body: await gatewayMetrics(deps.db, gateway.service_id, query.days, thresholdsOf(deps)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/mail-gateway/smtp',
    operationId: 'getMailSmtp',
    summary: 'The SMTP submission endpoint',
    description: 'Host, port, the active username and `status` (`none` before `POST .../smtp`). Never the password.',
    tag: TAG,
    scope: 'mailgateway:read',
    marks: [],
    responses: [{ status: 200, description: 'The SMTP endpoint', schema: SmtpSchema }],
    async handler({ principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal);
      const username = await activeSmtpUsername(deps.db, gateway.service_id);
      return { body: { object: 'mail_smtp' as const, ...smtpAddressOf(deps), username, status: username ? ('active' as const) : ('none' as const) } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/mail-gateway/smtp',
    operationId: 'createMailSmtpCredential',
    summary: 'Make the SMTP credential',
    description:
      'Answers the username and password (AUTH PLAIN or LOGIN; plain text on loopback), shown this once. While one is active, `409 conflict`: rotate it instead.',
    tag: TAG,
    scope: 'mailgateway:send',
    marks: [],
    returnsSecret: true,
    responses: [{ status: 200, description: 'The credential, with its password', schema: SmtpCredentialSchema }],
    async handler({ principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'making an SMTP credential');
      return { body: presentCredential(deps, await createSmtpCredential(deps.db, gateway)) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/mail-gateway/smtp/rotate',
    operationId: 'rotateMailSmtpCredential',
    summary: 'Rotate the SMTP credential',
    description: 'Deactivates the active credential for good (it cannot be reactivated) and answers a new username and password.',
    tag: TAG,
    scope: 'mailgateway:send',
    marks: ['D', 'I'],
    returnsSecret: true,
    responses: [{ status: 200, description: 'The new credential', schema: SmtpCredentialSchema }],
    async handler({ principal, deps }) {
      const { gateway } = await gatewayOf(deps, principal, 'rotating the SMTP credential');
      return { body: presentCredential(deps, await rotateSmtpCredential(deps.db, gateway)) };
    },
  }),
];
