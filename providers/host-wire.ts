import { isConnectionFailure } from '../db/errors';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from './errors';

/**
 * How a provider call and its outcome travel to a resource's host and back (a Temporal payload,
 * so JSON): dates are tagged so they come back as dates, and the provider errors of
 * providers/errors.ts come back as the same classes with the same fields, so the caller cannot tell a
 * remote call from a local one. Anything else thrown on the host comes back as a plain Error with
 * its message.
 */

export type WireError =
  | { kind: 'unavailable'; backend: string; detail?: string; subject?: string }
  | { kind: 'refused'; backend: string; message: string; code: string; param: string | null }
  | { kind: 'gone'; backend: string; what: string; message: string }
  | { kind: 'error'; message: string };

export type WireOutcome = { ok: true; value: unknown } | { ok: false; error: WireError };

const DATE_TAG = '$date';

export function encodeValue(value: unknown): unknown {
  if (value instanceof Date) return { [DATE_TAG]: value.toISOString() };
  if (Array.isArray(value)) return value.map(encodeValue);
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, encodeValue(v)]));
  return value;
}

export function decodeValue(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(decodeValue);
  if (value && typeof value === 'object') {
    const entries = Object.entries(value);
    if (entries.length === 1 && entries[0][0] === DATE_TAG && typeof entries[0][1] === 'string') return new Date(entries[0][1]);
    return Object.fromEntries(entries.map(([k, v]) => [k, decodeValue(v)]));
  }
  return value;
}

export function encodeError(err: unknown, family: string): WireError {
  if (err instanceof BackendUnavailableError) {
    return { kind: 'unavailable', backend: err.backend, ...(err.detail ? { detail: err.detail } : {}), ...(err.subject ? { subject: err.subject } : {}) };
  }
  if (err instanceof BackendRefusedError) return { kind: 'refused', backend: err.backend, message: err.message, code: err.code, param: err.param };
  if (err instanceof BackendGoneError) return { kind: 'gone', backend: err.backend, what: err.what, message: err.message };
  // The control plane's database not answering on the host (its placement lookup): an outage there, not a bug.
  if (isConnectionFailure(err)) return { kind: 'unavailable', backend: family, detail: `the host's database connection failed: ${(err as Error).message}` };
  return { kind: 'error', message: err instanceof Error ? err.message : String(err) };
}

export function decodeError(wire: WireError): Error {
  switch (wire.kind) {
    case 'unavailable':
      return new BackendUnavailableError(wire.backend, wire.detail, wire.subject);
    case 'refused':
      return new BackendRefusedError(wire.backend, wire.message, wire.code, wire.param);
    case 'gone':
      return new BackendGoneError(wire.backend, wire.what, wire.message);
    default:
      return new Error(wire.message);
  }
}
