import type { Knex } from 'knex';
import { DomainError, backendUnavailable, conflict, notFound, validationFailed } from '../errors';
import { fingerprintRRsets, type DnsProvider, type DnsRRset, type RRsetType } from '../../providers/dns.provider';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../../providers/errors';
import { etagOf, ifMatchAllows } from './etag';
import { assertCnameExclusive, parseRRsetChange, withParamPrefix, type RRsetChange } from './rrsets';
import { withZoneLock } from './store';

/**
 * Reading and writing a zone's RRsets on the DNS server. Every answer carries the zone's ETag (the
 * fingerprint of its RRsets as the server holds them). A write runs under the zone's lock: read the
 * RRsets, compare `If-Match` with their ETag (412 when it differs), check CNAME exclusivity, write,
 * read the new ETag. So of two writes sent with the same ETag exactly one applies.
 */
export interface ZoneRecords {
  /** The customer's RRsets (SOA is the server's own and not among them), sorted. */
  rrsets: DnsRRset[];
  etag: string;
}

export function preconditionFailed(): DomainError {
  return new DomainError(
    412,
    'invalid_request_error',
    'precondition_failed',
    'The zone has changed since the ETag sent in If-Match was read (here or on the DNS server directly). Read the records again and retry with their ETag.',
  );
}

async function readZone(provider: DnsProvider, zone: string): Promise<{ all: DnsRRset[]; etag: string }> {
  const all = await provider.listRRsets(zone);
  return { all, etag: etagOf(fingerprintRRsets(all)) };
}

export async function readRecords(provider: DnsProvider, zone: string): Promise<ZoneRecords> {
  const { all, etag } = await readZone(provider, zone);
  return { rrsets: all.filter((r) => r.type !== 'SOA'), etag };
}

export async function readRRset(provider: DnsProvider, zone: string, fqdn: string, type: RRsetType): Promise<{ rrset: DnsRRset; etag: string }> {
  const { all, etag } = await readZone(provider, zone);
  const rrset = all.find((r) => r.name === fqdn && r.type === type);
  if (!rrset) throw notFound('RRset');
  return { rrset, etag };
}

/** A refusal by the server for one change, in the request's terms (`param` is where it applies). */
function refusalAt(err: BackendRefusedError, param: string): DomainError {
  return err.code === 'conflict'
    ? new DomainError(409, 'invalid_request_error', 'conflict', err.message, param)
    : validationFailed([{ param, message: err.message }]);
}

async function applyChange(provider: DnsProvider, zone: string, current: DnsRRset[], change: RRsetChange): Promise<void> {
  assertCnameExclusive(current, zone, change);
  if (change.values.length === 0) await provider.deleteRRset(zone, change.fqdn, change.type);
  else await provider.replaceRRset(zone, { name: change.fqdn, type: change.type, ttl: change.ttl, values: change.values });
  const rest = current.filter((r) => !(r.name === change.fqdn && r.type === change.type));
  current.splice(0, current.length, ...rest);
  if (change.values.length > 0) current.push({ name: change.fqdn, type: change.type, ttl: change.ttl, values: [...change.values].sort() });
}

/**
 * The zone's ETag after this request's writes, without reading the whole zone again: the RRsets read
 * before (with the changes applied) and the SOA the server now has (its serial moved). Had someone
 * else changed the zone in between, this ETag describes no real state, so it can never match later:
 * it errs towards 412, never towards a lost update.
 */
async function etagAfterWrites(provider: DnsProvider, zone: string, current: DnsRRset[]): Promise<string> {
  const soa = await provider.getRRset(zone, zone, 'SOA');
  const rest = current.filter((r) => !(r.name === zone && r.type === 'SOA'));
  return etagOf(fingerprintRRsets(soa ? [...rest, soa] : rest));
}

/** PUT: replaces the RRset (values canonical, at least one). Answers it as the server now has it. */
export async function putRRset(
  db: Knex,
  provider: DnsProvider,
  zone: string,
  change: RRsetChange,
  ifMatch: string | undefined,
): Promise<{ rrset: DnsRRset; etag: string }> {
  return withZoneLock(db, zone, async () => {
    const before = await readZone(provider, zone);
    if (!ifMatchAllows(ifMatch, before.etag)) throw preconditionFailed();
    const current = before.all;
    try {
      await applyChange(provider, zone, current, change);
    } catch (err) {
      throw err instanceof BackendRefusedError ? refusalAt(err, 'values') : err;
    }
    const rrset = await provider.getRRset(zone, change.fqdn, change.type);
    if (!rrset) throw notFound('RRset');
    // What the server has, in case it wrote the values differently from how they were sent.
    const model = current.map((r) => (r.name === rrset.name && r.type === rrset.type ? rrset : r));
    return { rrset, etag: await etagAfterWrites(provider, zone, model) };
  });
}

/** DELETE: removes every value of that name and type (404 when there is none). */
export async function deleteRRset(
  db: Knex,
  provider: DnsProvider,
  zone: string,
  fqdn: string,
  type: RRsetType,
  ifMatch: string | undefined,
): Promise<{ etag: string }> {
  return withZoneLock(db, zone, async () => {
    const before = await readZone(provider, zone);
    if (!ifMatchAllows(ifMatch, before.etag)) throw preconditionFailed();
    if (!before.all.some((r) => r.name === fqdn && r.type === type)) throw notFound('RRset');
    await provider.deleteRRset(zone, fqdn, type);
    return {
      etag: await etagAfterWrites(
        provider,
        zone,
        before.all.filter((r) => !(r.name === fqdn && r.type === type)),
      ),
    };
  });
}

/**
 * PATCH: each element replaces its RRset (`values: []` deletes it), in order, and not atomically:
 * the first element that fails stops the run, the ones before it stay applied, and the error names
 * it (`param` `records.N...`) and says how many were applied (`applied: N`).
 */
export async function patchRRsets(
  db: Knex,
  provider: DnsProvider,
  zone: string,
  records: Array<{ name: unknown; type: unknown; ttl?: unknown; values: unknown }>,
  ifMatch: string | undefined,
): Promise<{ applied: number; etag: string }> {
  return withZoneLock(db, zone, async () => {
    // A server that cannot be read stops the run before its first element: that element is the one
    // that failed (`records.0`, `applied: 0`), as DECISIONS gives every failing element.
    const before = await readZone(provider, zone).catch((err: unknown) => {
      throw records.length > 0 ? stoppedAt(err, 'records.0', 0) : err;
    });
    if (!ifMatchAllows(ifMatch, before.etag)) throw preconditionFailed();
    const current = before.all;
    for (let i = 0; i < records.length; i++) {
      const at = `records.${i}`;
      try {
        await applyChange(provider, zone, current, parseRRsetChange(zone, records[i], { allowEmpty: true }));
      } catch (err) {
        throw stoppedAt(err, at, i);
      }
    }
    return { applied: records.length, etag: await etagAfterWrites(provider, zone, current) };
  });
}

/** The error of PATCH element `index`, with its param under `records.N` and the count applied before it. */
function stoppedAt(err: unknown, at: string, index: number): unknown {
  let domainError: DomainError;
  if (err instanceof DomainError) domainError = withParamPrefix(err, at) as DomainError;
  else if (err instanceof BackendRefusedError) domainError = refusalAt(err, `${at}.values`);
  else if (err instanceof BackendUnavailableError) domainError = backendUnavailable(err.backend);
  else if (err instanceof BackendGoneError) domainError = conflict(err.message);
  else return err;
  const param = domainError.param?.startsWith(at) ? domainError.param : at;
  return new DomainError(domainError.status, domainError.type, domainError.code, domainError.message, param, { ...domainError.extra, applied: index });
}
