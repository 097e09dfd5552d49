import { z } from 'zod';
import { formatId } from '../../../common/ids';
import { iso } from '../../../common/time';
import { relativeName } from '../../../domain/dns/names';
import { MAX_VALUES, TTL_DEFAULT, TTL_MAX, TTL_MIN } from '../../../domain/dns/rrsets';
import type { DnsZoneRow } from '../../../domain/dns/store';
import { RRSET_TYPES, type DnsRRset, type DnsZoneInfo } from '../../../providers/dns.provider';

/**
 * The DNS family's request and response schemas (DECISIONS "DNS") and the presenters that build
 * responses from the zone record and what the DNS server says.
 */
export const zoneParams = z.object({
  zone: z.string().min(1).max(300).meta({ example: 'example.org', description: 'The zone name; any case, a trailing dot and IDN are accepted' }),
});

export const rrsetParams = zoneParams.extend({
  name: z
    .string()
    .min(1)
    .max(300)
    .meta({ example: 'www', description: 'Relative to the zone (`@` for the apex); an absolute name inside the zone is accepted' }),
  type: z
    .string()
    .min(1)
    .max(10)
    .meta({ example: 'A', description: `One of ${RRSET_TYPES.join(', ')} (any case)` }),
});

export const DnsZoneSchema = z
  .object({
    object: z.literal('dns_zone'),
    name: z.string().meta({ description: 'Lower case, punycode for IDN, no trailing dot' }),
    service_id: z.string(),
    kind: z.enum(['native', 'master', 'slave']),
    serial: z
      .number()
      .int()
      .nullable()
      .meta({ description: 'Live SOA serial; rises with every change. Null in lists and when the DNS server does not answer' }),
    record_count: z
      .number()
      .int()
      .nullable()
      .meta({ description: 'Live number of records, SOA and NS included. Null in lists and when the DNS server does not answer' }),
    nameservers: z.array(z.string()),
    created_at: z.string().nullable(),
  })
  .meta({ id: 'DnsZone' });

export const DnsRRsetSchema = z
  .object({
    object: z.literal('dns_rrset'),
    name: z.string().meta({ description: 'Relative to the zone, `@` for the apex' }),
    fqdn: z.string().meta({ description: 'Absolute, without the trailing dot' }),
    type: z.enum(RRSET_TYPES),
    ttl: z.number().int(),
    values: z.array(z.string()).meta({ description: "In the server's presentation form (host names end with a dot, text is quoted), sorted" }),
  })
  .meta({ id: 'DnsRRset' });

const ttlField = z
  .number()
  .int()
  .optional()
  .meta({ description: `Seconds, ${TTL_MIN} to ${TTL_MAX}; default ${TTL_DEFAULT}` });

export const PutRRsetBody = z
  .object({
    ttl: ttlField,
    values: z.array(z.string().max(70_000)).min(1).max(MAX_VALUES).meta({
      description: 'Every value of the RRset; each is checked for the type (`values.N`). Host names may omit the trailing dot; TXT may be plain or quoted text',
    }),
  })
  .strict()
  .meta({ id: 'DnsRRsetPut' });

export const PatchRecordsBody = z
  .object({
    records: z
      .array(
        z
          .object({
            name: z.string().max(300),
            type: z.string().max(10),
            ttl: ttlField,
            values: z.array(z.string().max(70_000)).max(MAX_VALUES).meta({ description: 'Replaces the RRset; `[]` deletes it' }),
          })
          .strict(),
      )
      .min(1)
      .max(100),
  })
  .strict()
  .meta({ id: 'DnsRecordsPatch' });

export const DnsPatchSchema = z
  .object({
    object: z.literal('dns_patch'),
    applied: z.number().int(),
    etag: z.string().meta({ description: "The zone's ETag after the changes (also in the ETag header)" }),
  })
  .meta({ id: 'DnsPatch' });

export function presentZone(row: DnsZoneRow, live: DnsZoneInfo | null): z.input<typeof DnsZoneSchema> {
  return {
    object: 'dns_zone',
    name: row.name,
    service_id: formatId('svc', row.service_id),
    kind: (live?.kind ?? row.kind) as 'native' | 'master' | 'slave',
    serial: live?.serial ?? null,
    record_count: live?.recordCount ?? null,
    nameservers: live?.nameservers ?? row.nameservers,
    created_at: iso(row.created_at),
  };
}

export function presentRRset(rrset: DnsRRset, zone: string): z.input<typeof DnsRRsetSchema> {
  return {
    object: 'dns_rrset',
    name: relativeName(rrset.name, zone),
    fqdn: rrset.name,
    type: rrset.type as (typeof RRSET_TYPES)[number],
    ttl: rrset.ttl,
    values: rrset.values,
  };
}

/** Listing order: the apex first, then by name from the right-most label, then by type. */
export function rrsetSortKey(rrset: DnsRRset): string {
  return `${rrset.name.split('.').reverse().join('\u0001')}\u0000${rrset.type}`;
}
