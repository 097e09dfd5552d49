import { createHash } from 'node:crypto';
import { z } from 'zod';
import { randomBase62 } from '../../../common/crypto';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import type { ServiceRow } from '../../../domain/services';
import { primaryHostOf } from '../../../domain/wordpress/domains';
import { domainsOf, findVisibleSite, visibleSitesQuery, type SiteRow } from '../../../domain/wordpress/store';
import { liveRead } from '../../../providers/errors';
import type { WpLive } from '../../../providers/wordpress.provider';
import type { AppDeps } from '../../deps';
import { keysetPage, listEnvelope, listFingerprint, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/** How long an autologin URL works (single use either way). */
export const AUTOLOGIN_TTL_SECONDS = 60;

const LiveSchema = z
  .object({
    state: z.enum(['up', 'down']),
    wp_version: z.string(),
    php_version: z.string(),
    recipe: z
      .record(z.string(), z.unknown())
      .nullable()
      .meta({ description: 'The `cloud_recipe` option: `{name, version, applied_at}` of the last recipe applied' }),
  })
  .meta({ id: 'WordpressLive' });

export const SiteSchema = z
  .object({
    object: z.literal('wordpress_site'),
    id: z.string(),
    name: z.string().meta({ description: 'The platform hostname (the order’s `site_name`)' }),
    status: z.string().meta({ description: 'The service’s billing status' }),
    primary_domain: z.string().nullable().meta({ description: 'The primary domain’s name (an apex custom domain is served with its `www.` form)' }),
    url: z
      .string()
      .nullable()
      .meta({ description: 'The site’s home: `http://<primary host>`, the primary domain, or its `www.` form for an apex custom domain' }),
    ip: z.string().nullable().meta({ description: 'Where the site answers HTTP by Host (domains must point here)' }),
    http_port: z.number().int().nullable(),
    capabilities: z.record(z.string(), z.boolean()),
    created_at: z.string(),
    live: LiveSchema.nullable().meta({ description: 'Read from the site; `null` in lists and when the site’s node does not answer' }),
  })
  .meta({ id: 'WordpressSite' });

const AutologinSchema = z
  .object({
    object: z.literal('wordpress_autologin'),
    url: z.string().meta({ description: 'A credential: the first GET sets the first administrator’s cookies and redirects to `/wp-admin/`' }),
    expires_in_seconds: z.number().int(),
  })
  .meta({ id: 'WordpressAutologin' });

/** The primary domain's name and the host `home` uses (an apex custom domain's `www.` form). */
interface Primary {
  domain: string;
  host: string;
}

/** The site's primary (the platform hostname when no row says otherwise). */
async function primaryOf(db: AppDeps['db'], site: Pick<SiteRow, 'service_id' | 'name'>): Promise<Primary> {
  const row = (await domainsOf(db, site.service_id)).find((d) => d.primary);
  return row ? { domain: row.domain, host: primaryHostOf(row) } : { domain: site.name, host: site.name };
}

function presentSite(service: ServiceRow, site: Pick<SiteRow, 'name' | 'ip' | 'http_port'> | null, primary: Primary | null, live: WpLive | null) {
  return {
    object: 'wordpress_site' as const,
    id: formatId('svc', service.id),
    name: site?.name ?? service.label ?? formatId('svc', service.id),
    status: service.status,
    primary_domain: primary?.domain ?? null,
    url: primary ? `http://${primary.host}` : null,
    ip: site?.ip ?? null,
    http_port: site?.http_port ?? null,
    capabilities: (service.capabilities ?? {}) as Record<string, boolean>,
    created_at: iso(service.created_at)!,
    live: live ? { state: live.state, wp_version: live.wpVersion, php_version: live.phpVersion, recipe: live.recipe } : null,
  };
}

export const siteRoutes = [
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/autologin',
    operationId: 'createWordpressAutologin',
    summary: 'Log in to wp-admin without a password',
    description: `A single-use URL that logs in as the site’s first administrator, valid for ${AUTOLOGIN_TTL_SECONDS} seconds. The URL is a credential: a used or expired one sets no cookie. Only its hash is stored, on the site.`,
    tag: TAG,
    scope: 'wordpress:console',
    marks: [],
    // A credential: never replayed from an Idempotency-Key, never cached (Cache-Control: no-store).
    returnsSecret: true,
    params: siteParams,
    responses: [{ status: 200, description: 'The login URL', schema: AutologinSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service, site } = await siteTarget(deps, principal, params.id, 'console', 'logging in');
      const token = randomBase62(43);
      const expires = new Date(Date.now() + AUTOLOGIN_TTL_SECONDS * 1000);
      await deps.providers.wordpress.armAutologin(service.id, createHash('sha256').update(token).digest('hex'), expires);
      // The host `home` names: WordPress sets its cookies for it.
      const { host } = await primaryOf(deps.db, site);
      return {
        body: { object: 'wordpress_autologin' as const, url: `http://${host}/?cloud_autologin=${token}`, expires_in_seconds: AUTOLOGIN_TTL_SECONDS },
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}',
    operationId: 'getWordpressSite',
    summary: 'Get a site with its live state',
    description: '`live` is read from the site (WordPress and PHP versions, the last recipe applied); `null` when its node does not answer in time.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The site', schema: SiteSchema }],
    async handler({ params, principal, deps }) {
      const { service, site } = await findVisibleSite(deps.db, principal, params.id);
      const primary = site ? await primaryOf(deps.db, site) : null;
      const live = site?.ip ? await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.wordpress.live(service.id)) : null;
      return { body: presentSite(service, site, primary, live) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress',
    operationId: 'listWordpressSites',
    summary: 'List sites',
    description: "From the control plane's database: `live` is `null`. Read one site for live values.",
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of sites, newest first', schema: listOf(SiteSchema, 'WordpressSiteList') }],
    async handler({ query, principal, deps }) {
      const qb = visibleSitesQuery(deps.db, principal).select(
        deps.db.raw('(select domain from wordpress_domains d where d.service_id = services.id and d."primary" limit 1) as site_primary'),
        deps.db.raw('(select platform from wordpress_domains d where d.service_id = services.id and d."primary" limit 1) as site_primary_platform'),
      );
      const page = await keysetPage(qb, {
        cursors: deps.cursors,
        list: listFingerprint('wordpress', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map(
            (
              row: ServiceRow & {
                site_name: string | null;
                site_ip: string | null;
                site_http_port: number | null;
                site_primary: string | null;
                site_primary_platform: boolean | null;
              },
            ) => {
              const primary = row.site_primary
                ? { domain: row.site_primary, host: primaryHostOf({ domain: row.site_primary, platform: row.site_primary_platform === true }) }
                : null;
              return presentSite(row, row.site_name ? { name: row.site_name, ip: row.site_ip, http_port: row.site_http_port } : null, primary, null);
            },
          ),
          page,
        ),
      };
    },
  }),
];
