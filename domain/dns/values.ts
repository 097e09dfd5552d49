import { validationFailed } from '../errors';
import type { RRsetType } from '../../providers/dns.provider';
import * as grammar from '../../providers/dns.values';

/**
 * Record values per type. The grammar lives with the DNS server's provider (providers/dns.values.ts:
 * the simulator refuses with it what PowerDNS refuses); this gives its refusals the API's answer,
 * `400 validation_failed` at the value's `param` (`values.2`).
 */

/** Runs `check`, turning the grammar's DnsValueError into `400 validation_failed` (same `param`, same message). */
export function asValidationError<T>(check: () => T): T {
  try {
    return check();
  } catch (err) {
    if (err instanceof grammar.DnsValueError) throw validationFailed([{ param: err.param, message: err.message }]);
    throw err;
  }
}

/** The parts of a TXT value as text (for showing or comparing), the inverse of the quoting. */
export function txtStrings(canonical: string): string[] {
  return asValidationError(() => grammar.txtStrings(canonical));
}

/** One value of an RRset of `type`, checked and in canonical form; 400 validation_failed at `param`. */
export function canonicalValue(type: RRsetType, value: unknown, param: string): string {
  return asValidationError(() => grammar.canonicalValue(type, value, param));
}
