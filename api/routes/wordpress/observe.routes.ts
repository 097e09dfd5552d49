import { z } from 'zod';
import { iso } from '../../../common/time';
import { primaryHost } from '../../../domain/wordpress/domains';
import { MAIL_LOG_DAYS, mailFromOf, RECOVERY_EVENTS_SHOWN, recoveryOf } from '../../../domain/wordpress/observe';
import { measurePageSpeed } from '../../../domain/wordpress/pagespeed';
import { RECOVERY_HALT_AFTER } from '../../../domain/wordpress/keeper';
import { domainsOf } from '../../../domain/wordpress/store';
import { listEnvelope } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/**
 * A hosted site's mail, logs and monitoring (SPEC "Hosted sites", DECISIONS "Hosted WordPress"):
 * read from the site (mail log, logs), measured live (page speed), or from the keeper's record
 * (recovery: domain/wordpress/observe.ts).
 */
const EmailSchema = z
  .object({
    object: z.literal('wordpress_email'),
    method: z.literal('smtp').meta({ description: 'WordPress’s wp_mail, over SMTP through the platform’s relay' }),
    relay: z.string().nullable().meta({ description: 'The relay (`host:port`); `null`: none is configured and mail is not sent (the test mail says so)' }),
    from: z.string().meta({ description: 'The sender WordPress uses: `wordpress@<primary domain without www.>`' }),
  })
  .meta({ id: 'WordpressEmail' });

const MailLogEntrySchema = z
  .object({
    to: z.string(),
    subject: z.string(),
    method: z.string(),
    sent_at: z.string().meta({ description: 'ISO 8601' }),
  })
  .meta({ id: 'WordpressMailLogEntry' });

const EmailTestSchema = z
  .object({
    object: z.literal('wordpress_email_test'),
    result: z.object({
      sent: z.boolean().meta({ description: '`false` is a diagnosis, not an error' }),
      detail: z.string().meta({ description: 'What the relay answered, or why nothing was sent' }),
    }),
  })
  .meta({ id: 'WordpressEmailTest' });

const LogLineSchema = z
  .object({
    timestamp: z.string().meta({ description: 'ISO 8601, UTC' }),
    source: z.enum(['access', 'error', 'php']),
    level: z.string(),
    message: z.string(),
  })
  .meta({ id: 'WordpressLogLine' });

const LogsQuery = z.object({
  source: z
    .enum(['access', 'error', 'php'])
    .default('error')
    .meta({ description: '`access` (the web server’s requests), `error` (the web server’s), `php` (PHP’s); default `error`' }),
  lines: z.coerce.number().int().min(1).max(1000).default(100).meta({ description: 'How many of the last entries, 1 to 1000 (default 100)' }),
});

const PageSpeedResultSchema = z.object({
  score: z.number().meta({ description: '0-100, Lighthouse 10 weights without Speed Index' }),
  ttfb_ms: z.number(),
  fcp_ms: z.number(),
  lcp_ms: z.number(),
  cls: z.number(),
  tbt_ms: z.number(),
  dom_content_loaded_ms: z.number(),
  load_ms: z.number(),
  transfer_bytes: z.number(),
  requests: z.number(),
});

const PageSpeedSchema = z
  .object({ object: z.literal('wordpress_pagespeed'), mobile: PageSpeedResultSchema, desktop: PageSpeedResultSchema })
  .meta({ id: 'WordpressPageSpeed' });

const RecoverySchema = z
  .object({
    object: z.literal('wordpress_recovery'),
    halted: z
      .boolean()
      .meta({ description: `The platform gave up repairing the site: its last ${RECOVERY_HALT_AFTER} repairs failed; it tries again once the site answers` }),
    events: z.array(
      z.object({
        action: z.string().meta({ description: 'What was done: `restart_php`, `restart_web`, `repair` (failed), `check`' }),
        reason: z.string(),
        ok: z.boolean(),
        at: z.string().meta({ description: 'ISO 8601' }),
      }),
    ),
  })
  .meta({ id: 'WordpressRecovery' });

export const observeRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/email',
    operationId: 'getWordpressEmail',
    summary: 'Get how a site sends mail',
    description: 'Mail leaves by the platform’s SMTP relay; `relay` is `null` when none is configured.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The site’s mail settings', schema: EmailSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service, site } = await siteTarget(deps, principal, params.id, 'email');
      return {
        body: {
          object: 'wordpress_email' as const,
          method: 'smtp' as const,
          relay: deps.config.WORDPRESS_SMTP_RELAY ?? null,
          from: mailFromOf(primaryHost(site, await domainsOf(deps.db, service.id))),
        },
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/email/log',
    operationId: 'listWordpressEmailLog',
    summary: 'List the mail a site sent',
    description: `The last ${MAIL_LOG_DAYS} days, newest first: recipient, subject and method, never bodies. One page.`,
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'Sent mail, newest first', schema: listOf(MailLogEntrySchema, 'WordpressMailLog') }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'email');
      const since = new Date(Date.now() - MAIL_LOG_DAYS * 86_400_000);
      const entries = await deps.providers.wordpress.mailLog(service.id, since);
      return {
        body: listEnvelope(
          entries.map((e) => ({ to: e.to, subject: e.subject, method: e.method, sent_at: e.sentAt })),
          { hasMore: false, nextCursor: null },
        ),
      };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/email/test',
    operationId: 'testWordpressEmail',
    summary: 'Send a test mail from a site',
    description:
      'WordPress sends a short test message to `to` with wp_mail through the relay. `result.sent` false is a diagnosis (no relay, refused by the relay), not an error; `detail` says what happened. The mail is in the site’s mail log either way.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['I'],
    params: siteParams,
    body: z.object({ to: z.email().max(254).meta({ description: 'A valid e-mail address', example: 'owner@example.com' }) }),
    exampleBody: { to: 'owner@example.com' },
    responses: [{ status: 200, description: 'What happened', schema: EmailTestSchema }, NOT_READY],
    async handler({ params, body, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'email', 'sending mail');
      const result = await deps.providers.wordpress.sendTestMail(service.id, body.to);
      return { body: { object: 'wordpress_email_test' as const, result: { sent: result.sent, detail: result.detail } } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/logs',
    operationId: 'getWordpressLogs',
    summary: 'Tail a site’s logs',
    description:
      'The last `lines` entries (default 100, at most 1000) of one log, oldest to newest: `source` `error` (default: the web server’s errors for the site), `access` (its requests, paths without query strings) or `php` (PHP’s errors and the pool’s notices).',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    query: LogsQuery,
    responses: [{ status: 200, description: 'Log entries, oldest first (one page)', schema: listOf(LogLineSchema, 'WordpressLogList') }, NOT_READY],
    async handler({ params, query, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'logs');
      const lines = await deps.providers.wordpress.logs(service.id, query.source, query.lines);
      return {
        body: listEnvelope(
          lines.map((l) => ({ timestamp: l.timestamp, source: l.source, level: l.level, message: l.message })),
          { hasMore: false, nextCursor: null },
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/monitoring/pagespeed',
    operationId: 'getWordpressPageSpeed',
    summary: 'Run a page-speed test of a site',
    description:
      'Loads the site’s home page (by its primary domain, at its `ip` and `http_port`) in a headless browser as a throttled phone and as a desktop: score and core web vitals for each. Takes 10 to 30 seconds; one test runs at a time. `503 backend_unavailable` when the page cannot be measured (it does not answer, answers an error, or takes too long).',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'Mobile and desktop results', schema: PageSpeedSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service, site } = await siteTarget(deps, principal, params.id, 'monitoring');
      const host = primaryHost(site, await domainsOf(deps.db, service.id));
      const address = site.ip!.includes(':') ? `[${site.ip}]` : site.ip;
      const report = await measurePageSpeed({ url: `http://${address}:${site.http_port}/`, host });
      return { body: { object: 'wordpress_pagespeed' as const, mobile: report.mobile, desktop: report.desktop } };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/monitoring/recovery',
    operationId: 'getWordpressRecovery',
    summary: 'Get what the platform repaired on a site',
    description: `The last ${RECOVERY_EVENTS_SHOWN} repairs, newest first (a PHP or web server the platform had to start again, a repair that failed), and \`halted\`: after ${RECOVERY_HALT_AFTER} failed repairs in a row the platform stops trying until the site answers again.`,
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'Repairs and whether the platform gave up', schema: RecoverySchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service } = await siteTarget(deps, principal, params.id, 'monitoring');
      const { halted, events } = await recoveryOf(deps.db, service.id);
      return {
        body: {
          object: 'wordpress_recovery' as const,
          halted,
          events: events.map((e) => ({ action: e.action, reason: e.reason, ok: e.ok, at: iso(e.at)! })),
        },
      };
    },
  }),
];
