import { z } from 'zod';
import { absoluteName } from '../../../domain/dns/names';
import { deleteRRset, patchRRsets, putRRset, readRecords, readRRset } from '../../../domain/dns/records';
import { parseRRsetChange, parseRRsetType } from '../../../domain/dns/rrsets';
import { findVisibleZone, recordZoneFacts, visibleZonesQuery, type DnsZoneRow } from '../../../domain/dns/store';
import type { Principal } from '../../../domain/principal';
import { findTarget } from '../../../domain/services';
import { liveRead } from '../../../providers/errors';
import type { AppDeps } from '../../deps';
import { keysetPage, listEnvelope, listFingerprint, pageOfItems, paginationQuery } from '../../pagination';
import { defineRoute } from '../../route';
import { listOf } from '../../schemas';
import {
  DnsPatchSchema,
  DnsRRsetSchema,
  DnsZoneSchema,
  PatchRecordsBody,
  presentRRset,
  presentZone,
  PutRRsetBody,
  rrsetParams,
  rrsetSortKey,
  zoneParams,
} from './schemas';

/**
 * DNS zones and their RRsets (SPEC "DNS", DECISIONS "DNS"). `{zone}` is the zone a visible dns
 * service owns. The zones list comes from the database; everything else is read from the DNS server
 * (PowerDNS) itself, and writes go to it at once under the zone's lock, guarded by `If-Match`.
 * Backend errors are mapped once in api/app.ts (503 unreachable, 409 refused or gone).
 */
const TAG = 'DNS';

const ETAG_NOTE = "The `ETag` header is the zone's: it changes with every change of any RRset, also one made on the DNS server directly.";
const IF_MATCH_NOTE =
  'Send an `ETag` of this zone as `If-Match` to write only if nothing changed since (else `412 precondition_failed`); without `If-Match` the write applies.';
const PRECONDITION = { status: 412, description: "`If-Match` does not match the zone's current ETag (`precondition_failed`)" };
const CONFLICT = {
  status: 409,
  description:
    "A CNAME would share its name with other types, the DNS server refused the change or no longer has the zone, or the zone's service is suspended, terminated, cancelled or held for review (`conflict`, the message names the status)",
};
const UNAVAILABLE = { status: 503, description: 'The DNS server does not answer (`backend_unavailable`)' };
/** Reads that go to the DNS server: its service's row says the zone is there, the server says it is not. */
const GONE = { status: 409, description: 'The zone is not on the DNS server any more (`conflict`)' };

const ifMatch = (header: string | string[] | undefined) => (Array.isArray(header) ? header.join(', ') : header);

/**
 * The zone a write names, checked like every family's action (docs/security.md "Suspended and
 * terminated services"): visible (else 404), its `records` capability (else 400), then a service in
 * good standing (else `409 conflict` naming the status). The zone of a terminated or cancelled
 * service is found here until its teardown frees the name, so that the answer says why.
 */
async function writableZone(deps: AppDeps, principal: Principal, rawZone: string): Promise<DnsZoneRow> {
  const { zone } = await findTarget(() => findVisibleZone(deps.db, principal, rawZone, { ended: true }), {
    capability: 'records',
    action: 'a change of DNS records',
  });
  return zone;
}

export const dnsRoutes = [
  defineRoute({
    method: 'get',
    path: '/v1/dns/zones',
    operationId: 'listDnsZones',
    summary: 'List DNS zones',
    description: "From the control plane's database: `serial` and `record_count` are `null` (read one zone for live values). Newest first.",
    tag: TAG,
    scope: 'dns:read',
    marks: [],
    query: z.object({ ...paginationQuery() }),
    responses: [{ status: 200, description: 'A page of zones', schema: listOf(DnsZoneSchema, 'DnsZoneList') }],
    async handler({ query, principal, deps }) {
      const page = await keysetPage(visibleZonesQuery(deps.db, principal), {
        cursors: deps.cursors,
        list: listFingerprint('dns.zones', {}),
        column: 'services.id',
        limit: query.limit,
        cursor: query.cursor,
      });
      return {
        body: listEnvelope(
          page.rows.map((row: DnsZoneRow) => presentZone({ ...row, service_id: Number(row.service_id) }, null)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dns/zones/{zone}',
    operationId: 'getDnsZone',
    summary: 'Get a DNS zone with its live serial and record count',
    description: 'Live fields come from the DNS server; if it does not answer in time, `serial` and `record_count` are `null` and the call still succeeds.',
    tag: TAG,
    scope: 'dns:read',
    marks: [],
    params: zoneParams,
    responses: [{ status: 200, description: 'The zone', schema: DnsZoneSchema }],
    async handler({ params, principal, deps }) {
      const { zone } = await findVisibleZone(deps.db, principal, params.zone);
      const live = await liveRead(deps.config.BACKEND_LIVE_TIMEOUT, () => deps.providers.dns.zoneInfo(zone.name));
      if (live && (live.kind !== zone.kind || live.nameservers.join(',') !== zone.nameservers.join(','))) {
        await recordZoneFacts(deps.db, zone.service_id, { kind: live.kind, nameservers: live.nameservers });
      }
      return { body: presentZone(zone, live) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dns/zones/{zone}/export',
    operationId: 'exportDnsZone',
    summary: 'Export a DNS zone file',
    description: 'The zone file exactly as the DNS server writes it (`text/plain`, one record per line, absolute names).',
    tag: TAG,
    scope: 'dns:read',
    marks: [],
    params: zoneParams,
    responses: [{ status: 200, description: 'The zone file', schema: z.string(), contentType: 'text/plain' }, GONE, UNAVAILABLE],
    async handler({ params, principal, deps }) {
      const { zone } = await findTarget(() => findVisibleZone(deps.db, principal, params.zone), { capability: 'export' });
      return { body: await deps.providers.dns.exportZone(zone.name) };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dns/zones/{zone}/records',
    operationId: 'listDnsRecords',
    summary: 'List the records of a DNS zone, grouped into RRsets',
    description: `One item per name and type, with all its \`values\`, read from the DNS server (the SOA is the server's own and not listed; see the zone's \`serial\` and the export). ${ETAG_NOTE}`,
    tag: TAG,
    scope: 'dns:read',
    marks: [],
    params: zoneParams,
    query: z.object({ ...paginationQuery() }),
    responses: [
      { status: 200, description: 'A page of RRsets, apex first, then by name from the right-most label', schema: listOf(DnsRRsetSchema, 'DnsRRsetList') },
      GONE,
      UNAVAILABLE,
    ],
    async handler({ params, query, principal, deps }) {
      const { zone } = await findTarget(() => findVisibleZone(deps.db, principal, params.zone), { capability: 'records' });
      const { rrsets, etag } = await readRecords(deps.providers.dns, zone.name);
      const page = pageOfItems(deps.cursors, listFingerprint('dns.records', { zone: zone.name }), rrsets, rrsetSortKey, query);
      return {
        headers: { ETag: etag },
        body: listEnvelope(
          page.data.map((r) => presentRRset(r, zone.name)),
          page,
        ),
      };
    },
  }),
  defineRoute({
    method: 'get',
    path: '/v1/dns/zones/{zone}/records/{name}/{type}',
    operationId: 'getDnsRRset',
    summary: 'Get one RRset',
    description: ETAG_NOTE,
    tag: TAG,
    scope: 'dns:read',
    marks: [],
    params: rrsetParams,
    responses: [{ status: 200, description: 'The RRset', schema: DnsRRsetSchema }, GONE, UNAVAILABLE],
    async handler({ params, principal, deps }) {
      const { zone } = await findTarget(() => findVisibleZone(deps.db, principal, params.zone), { capability: 'records' });
      const fqdn = absoluteName(params.name, zone.name);
      const { rrset, etag } = await readRRset(deps.providers.dns, zone.name, fqdn, parseRRsetType(params.type));
      return { headers: { ETag: etag }, body: presentRRset(rrset, zone.name) };
    },
  }),
  defineRoute({
    method: 'put',
    path: '/v1/dns/zones/{zone}/records/{name}/{type}',
    operationId: 'putDnsRRset',
    summary: 'Replace an RRset',
    description: `Replaces every value of that name and type (creating the RRset when there is none). Each value is checked for its type (\`400 validation_failed\`, param \`values.N\`); a CNAME cannot share its name with other types (\`409 conflict\`). ${IF_MATCH_NOTE} The answer carries the zone's new ETag.`,
    tag: TAG,
    scope: 'dns:write',
    marks: ['R', 'I'],
    params: rrsetParams,
    body: PutRRsetBody,
    exampleBody: { ttl: 300, values: ['192.0.2.10'] },
    responses: [{ status: 200, description: 'The RRset as the server now has it', schema: DnsRRsetSchema }, CONFLICT, PRECONDITION, UNAVAILABLE],
    async handler({ params, body, principal, deps, req }) {
      const zone = await writableZone(deps, principal, params.zone);
      const change = parseRRsetChange(zone.name, { name: params.name, type: params.type, ttl: body.ttl, values: body.values }, { allowEmpty: false });
      const { rrset, etag } = await putRRset(deps.db, deps.providers.dns, zone.name, change, ifMatch(req.headers['if-match']));
      return { headers: { ETag: etag }, body: presentRRset(rrset, zone.name) };
    },
  }),
  defineRoute({
    method: 'delete',
    path: '/v1/dns/zones/{zone}/records/{name}/{type}',
    operationId: 'deleteDnsRRset',
    summary: 'Delete an RRset',
    description: `Deletes every value of that name and type (404 when there is none). ${IF_MATCH_NOTE} The answer (204) carries the zone's new ETag.`,
    tag: TAG,
    scope: 'dns:write',
    marks: ['D', 'I'],
    params: rrsetParams,
    responses: [{ status: 204, description: 'Deleted' }, CONFLICT, PRECONDITION, UNAVAILABLE],
    async handler({ params, principal, deps, req }) {
      const zone = await writableZone(deps, principal, params.zone);
      const fqdn = absoluteName(params.name, zone.name);
      const { etag } = await deleteRRset(deps.db, deps.providers.dns, zone.name, fqdn, parseRRsetType(params.type), ifMatch(req.headers['if-match']));
      return { status: 204, headers: { ETag: etag } };
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/v1/dns/zones/{zone}/records',
    operationId: 'patchDnsRecords',
    summary: 'Replace or delete several RRsets, in order, not atomically',
    description: `Body \`records\`: each element \`{name, type, ttl?, values}\` replaces its RRset; \`values: []\` deletes it. Elements apply in order. The first one that fails stops the run: the error (\`400\` invalid, \`409\` conflict, \`503\` backend) has \`param\` \`records.N...\` and \`applied: N\`, and the elements before it stay applied. A body whose JSON shape is wrong is refused before anything applies. ${IF_MATCH_NOTE}`,
    tag: TAG,
    scope: 'dns:write',
    marks: ['D', 'I'],
    params: zoneParams,
    body: PatchRecordsBody,
    exampleBody: {
      records: [
        { name: 'www', type: 'A', ttl: 300, values: ['192.0.2.10'] },
        { name: 'old', type: 'TXT', values: [] },
      ],
    },
    responses: [{ status: 200, description: 'Every element applied', schema: DnsPatchSchema }, CONFLICT, PRECONDITION, UNAVAILABLE],
    async handler({ params, body, principal, deps, req }) {
      const zone = await writableZone(deps, principal, params.zone);
      const { applied, etag } = await patchRRsets(deps.db, deps.providers.dns, zone.name, body.records, ifMatch(req.headers['if-match']));
      return { headers: { ETag: etag }, body: { object: 'dns_patch' as const, applied, etag } };
    },
  }),
];
