import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { reservedZones } from '../../../domain/dns/zone-policy';
import { unsupportedForProduct } from '../../../domain/errors';
import {
  addDomain,
  CERT_FAILURES_PER_HOUR,
  deleteDomain,
  makePrimary,
  retryCertificates,
  setCdn,
  verifyDomain,
  cdnUrlOf,
  type DomainDeps,
} from '../../../domain/wordpress/domains';
import { domainsOf, findVisibleSite, type DomainRow } from '../../../domain/wordpress/store';
import { findTarget } from '../../../domain/services';
import type { AppDeps } from '../../deps';
import { listEnvelope, listFingerprint, pageOfItems, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { idParam, listOf } from '../../schemas';
import { NOT_READY, siteParams, siteTarget, TAG } from './shared';

/**
 * A hosted site's domains and certificates, its CDN, and the edge proxy (SPEC "Hosted sites",
 * DECISIONS "Hosted WordPress"). The rules live in domain/wordpress/domains.ts.
 */
const domainParams = z.object({ id: idParam('svc_1'), domain_id: idParam('dom_1') });

const DomainSchema = z
  .object({
    object: z.literal('wordpress_domain'),
    id: z.string(),
    domain: z.string(),
    platform: z.boolean().meta({ description: 'The platform hostname (the order’s `site_name`): cannot be removed' }),
    primary: z.boolean().meta({ description: 'The site’s `home` and `siteurl` are `http://<domain>` (an apex: `http://www.<domain>`)' }),
    certificate_status: z.enum(['none', 'pending', 'active', 'failed']),
  })
  .meta({ id: 'WordpressDomain' });

const DnsRecordSchema = z.object({ type: z.enum(['A', 'AAAA']), host: z.string(), value: z.string() }).meta({ id: 'WordpressDnsRecord' });

const CreatedDomainSchema = DomainSchema.extend({
  dns_records: z.array(DnsRecordSchema).meta({ description: 'What to publish: the domain (and an apex’s `www.`) to the site’s `ip`' }),
}).meta({ id: 'WordpressCreatedDomain' });

const VerifySchema = z
  .object({
    domain: z.string(),
    points_here: z.boolean(),
    reason: z.string().nullable().meta({ description: 'Why not (`null` when it points here), e.g. `shop.example.com: no A record`' }),
  })
  .meta({ id: 'WordpressDomainVerification' });

const CdnSchema = z
  .object({
    object: z.literal('wordpress_cdn'),
    enabled: z.boolean(),
    url: z.string().nullable().meta({ description: 'The edge’s base URL for the site’s uploads; `null` while off' }),
  })
  .meta({ id: 'WordpressCdn' });

const EdgeProxySchema = z
  .object({
    object: z.literal('wordpress_edgeproxy'),
    enabled: z.boolean(),
    domains: z.array(z.object({ domain: z.string(), status: z.string(), dns_records: z.array(DnsRecordSchema) })),
  })
  .meta({ id: 'WordpressEdgeProxy' });

const AddDomainBody = z.object({
  domain: z.string().min(1).max(300).meta({ description: 'A DNS name (lower-cased, a final dot dropped)', example: 'shop.example.com' }),
  force: z.boolean().default(false).meta({ description: 'Add it even when it does not point here yet (its certificate then fails until it does)' }),
});

function presentDomain(d: DomainRow) {
  return {
    object: 'wordpress_domain' as const,
    id: formatId('dom', d.id),
    domain: d.domain,
    platform: d.platform,
    primary: d.primary,
    certificate_status: d.certificate_status,
  };
}

function domainDeps(deps: AppDeps): DomainDeps {
  return {
    db: deps.db,
    wordpress: deps.providers.wordpress,
    resolver: deps.config.DNS_RESOLVER,
    reserved: [...reservedZones(deps.config), deps.config.CAAS_APPS_DOMAIN],
  };
}

const byId = (d: DomainRow) => String(d.id).padStart(20, '0');

const NO_EDGE_PROXY =
  'No product offered here has an edge proxy (`capabilities.edgeproxy` is false on every site): the call answers `400 unsupported_for_product` after the site is found.';

/**
 * The edge-proxy routes: the site is looked up (404), then its capability refuses (400), then, for a
 * change, the service's status (409), as for every action.
 */
async function edgeProxyRefused(deps: AppDeps, principal: Parameters<typeof siteTarget>[1], id: string, action?: string): Promise<never> {
  await findTarget(() => findVisibleSite(deps.db, principal, id), { capability: 'edgeproxy', action });
  // Reached only if a product ever turned the capability on without an edge proxy provider.
  throw unsupportedForProduct('edgeproxy');
}

export const domainRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/domains',
    operationId: 'listWordpressDomains',
    summary: 'List a site’s domains',
    description: 'The platform hostname (`platform: true`) and the custom domains, oldest first.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of domains', schema: listOf(DomainSchema, 'WordpressDomainList') }],
    async handler({ params, query, principal, deps }) {
      const { service } = await findTarget(() => findVisibleSite(deps.db, principal, params.id), { capability: 'domains' });
      const page = pageOfItems(deps.cursors, listFingerprint(`wordpress.domains:${service.id}`, {}), await domainsOf(deps.db, service.id), byId, query);
      return { body: listEnvelope(page.data.map(presentDomain), page) };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/domains',
    operationId: 'addWordpressDomain',
    summary: 'Add a custom domain to a site',
    description: `\`domain\`: a DNS name of two labels or more (not an IP address, a public suffix or a name of the platform's own). It must resolve (A records through the platform's resolver) to the site's \`ip\`, and an apex's \`www.\` form too, else \`400 domain_not_pointed\` unless \`force\`. A name of this site already: \`409 already_exists\`; one another site serves: \`400 hostname_taken\`. The first custom domain becomes primary and the site's URLs are rewritten. Its certificate is requested at once: \`active\`, or \`failed\` while the names do not point here (the certificate authority allows ${CERT_FAILURES_PER_HOUR} failures per domain per hour), or \`pending\` when the attempt could not be made (\`domains/ssl/retry\` tries again). Certificates come from the platform's local certificate authority and are stored, not served: sites answer plain HTTP here. \`dns_records\` lists what to publish.`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    body: AddDomainBody,
    exampleBody: { domain: 'shop.example.com', force: true },
    responses: [
      { status: 201, description: 'The domain, with the DNS records to publish', schema: CreatedDomainSchema },
      { status: 409, description: 'A domain of this site already (`already_exists`), or the site is not ready (`conflict`)' },
    ],
    async handler({ params, body, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'domains', 'adding a domain');
      const { domain, dnsRecords } = await addDomain(domainDeps(deps), site, body.domain, body.force);
      return { status: 201, body: { ...presentDomain(domain), dns_records: dnsRecords } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/domains/ssl/retry',
    operationId: 'retryWordpressCertificates',
    summary: 'Retry the certificates of a site’s domains',
    description: `Every custom domain without an active certificate loses its \`failed\` status and is tried again (its names must point here). The certificate authority's own count is kept: a domain with ${CERT_FAILURES_PER_HOUR} failures in the last hour stays \`failed\`, untried, until the oldest of them is an hour old. Answers every domain with its certificate status.`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The site’s domains after the attempts', schema: listOf(DomainSchema, 'WordpressDomainRetryList') }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'domains', 'requesting certificates');
      const rows = await retryCertificates(domainDeps(deps), site);
      return { body: listEnvelope(rows.map(presentDomain), { hasMore: false, nextCursor: null }) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/wordpress/{id}/domains/{domain_id}',
    operationId: 'deleteWordpressDomain',
    summary: 'Remove a custom domain from a site',
    description:
      'The site stops answering to it (and to an apex’s `www.`), and its certificate is dropped. The platform hostname cannot be removed (`400 validation_failed`, param `domain_id`). Removing the primary domain makes the platform hostname primary and rewrites the site’s URLs.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['D', 'I'],
    params: domainParams,
    responses: [{ status: 204, description: 'Removed' }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'domains', 'removing a domain');
      await deleteDomain(domainDeps(deps), site, params.domain_id);
      return { status: 204 };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/domains/{domain_id}/primary',
    operationId: 'setWordpressPrimaryDomain',
    summary: 'Make a domain the site’s primary',
    description:
      'Rewrites the site’s `home` and `siteurl` in its database to `http://<domain>`; an apex becomes its `www.` form (`http://www.<apex>`). Any domain of the site, the platform hostname included.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: domainParams,
    responses: [{ status: 200, description: 'The domain, now primary', schema: DomainSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'domains', 'changing the primary domain');
      return { body: presentDomain(await makePrimary(domainDeps(deps), site, params.domain_id)) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/domains/{domain_id}/verify',
    operationId: 'verifyWordpressDomain',
    summary: 'Check where a domain points',
    description:
      'Resolves the domain now (and an apex’s `www.`) through the platform’s resolver: `points_here` when its A records hold the site’s `ip`, else `reason`. `503 backend_unavailable` when the resolver does not answer.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: domainParams,
    responses: [{ status: 200, description: 'Where it points', schema: VerifySchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'domains');
      return { body: await verifyDomain(domainDeps(deps), site, params.domain_id) };
    },
  }),

  // ---- CDN --------------------------------------------------------------------------------------
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/cdn',
    operationId: 'getWordpressCdn',
    summary: 'Get a site’s CDN',
    description: 'While enabled, front-end `<home>/wp-content/uploads/` URLs start with `url`; the edge caches what it serves.',
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The CDN', schema: CdnSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'cdn');
      return { body: { object: 'wordpress_cdn' as const, enabled: site.cdn_enabled, url: site.cdn_enabled ? cdnUrlOf(site) : null } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/cdn/enable',
    operationId: 'enableWordpressCdn',
    summary: 'Serve a site’s media from the CDN',
    description:
      'Front-end pages (not wp-admin, REST or feeds’ stored content: the database is unchanged) have `<home>/wp-content/uploads/` rewritten to `<url>/wp-content/uploads/`. Locally the edge is a caching location of the sites’ own web server (`X-Cache-Status` shows HIT or MISS).',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The CDN', schema: CdnSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'cdn', 'enabling the CDN');
      return { body: { object: 'wordpress_cdn' as const, ...(await setCdn({ db: deps.db, wordpress: deps.providers.wordpress }, site, true)) } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/cdn/disable',
    operationId: 'disableWordpressCdn',
    summary: 'Stop serving a site’s media from the CDN',
    description: 'Media URLs are the site’s own again; the edge forgets what it cached.',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The CDN', schema: CdnSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { site } = await siteTarget(deps, principal, params.id, 'cdn', 'disabling the CDN');
      return { body: { object: 'wordpress_cdn' as const, ...(await setCdn({ db: deps.db, wordpress: deps.providers.wordpress }, site, false)) } };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/cdn/purge',
    operationId: 'purgeWordpressCdn',
    summary: 'Purge a site’s CDN cache',
    description:
      'Empties what the edge cached of the site’s uploads: the next request of each file fetches it from the site again. Allowed while disabled (nothing is cached then).',
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The CDN', schema: CdnSchema }, NOT_READY],
    async handler({ params, principal, deps }) {
      const { service, site } = await siteTarget(deps, principal, params.id, 'cdn', 'purging the CDN');
      await deps.providers.wordpress.purgeCdn(service.id);
      return { body: { object: 'wordpress_cdn' as const, enabled: site.cdn_enabled, url: site.cdn_enabled ? cdnUrlOf(site) : null } };
    },
  }),

  // ---- Edge proxy ---------------------------------------------------------------------------------
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/edgeproxy',
    operationId: 'getWordpressEdgeProxy',
    summary: 'Get a site’s edge proxy',
    description: `Per-domain status, on sites whose \`capabilities.edgeproxy\` is true. ${NO_EDGE_PROXY}`,
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The edge proxy (sites with the capability)', schema: EdgeProxySchema }],
    handler: ({ params, principal, deps }) => edgeProxyRefused(deps, principal, params.id),
  }),
  defineRoute({
    method: 'get',
    path: '/v1/wordpress/{id}/edgeproxy/records',
    operationId: 'getWordpressEdgeProxyRecords',
    summary: 'Re-fetch a site’s edge-proxy DNS records',
    description: `The DNS records each domain needs and their verification status. ${NO_EDGE_PROXY}`,
    tag: TAG,
    scope: 'wordpress:read',
    marks: [],
    params: siteParams,
    responses: [{ status: 200, description: 'The edge proxy (sites with the capability)', schema: EdgeProxySchema }],
    handler: ({ params, principal, deps }) => edgeProxyRefused(deps, principal, params.id),
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/edgeproxy/enable',
    operationId: 'enableWordpressEdgeProxy',
    summary: 'Put a site behind the edge proxy',
    description: `Registers each custom domain with the edge-proxy provider. ${NO_EDGE_PROXY}`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The edge proxy (sites with the capability)', schema: EdgeProxySchema }, NOT_READY],
    handler: ({ params, principal, deps }) => edgeProxyRefused(deps, principal, params.id, 'enabling the edge proxy'),
  }),
  defineRoute({
    method: 'post',
    path: '/v1/wordpress/{id}/edgeproxy/disable',
    operationId: 'disableWordpressEdgeProxy',
    summary: 'Take a site off the edge proxy',
    description: `Removes the edge-proxy hostnames, back to per-domain certificates. ${NO_EDGE_PROXY}`,
    tag: TAG,
    scope: 'wordpress:write',
    marks: ['R', 'I'],
    params: siteParams,
    responses: [{ status: 200, description: 'The edge proxy (sites with the capability)', schema: EdgeProxySchema }, NOT_READY],
    handler: ({ params, principal, deps }) => edgeProxyRefused(deps, principal, params.id, 'disabling the edge proxy'),
  }),
];
