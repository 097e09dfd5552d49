import type http from 'node:http';
import { DomainError } from '../../domain/errors';
import { BackendRefusedError } from '../../providers/errors';
import { DataPlaneError } from '../errors';

/** Names of namespaces and functions (DECISIONS "Serverless"). */
export const NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/** One request as the primitives' handlers see it. */
export interface Call {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  requestId: string;
  /** The path after the primitive's prefix, split at `/` (still percent-encoded). */
  segments: string[];
  query: URLSearchParams;
}

export function sendJson(call: Call, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  call.res.writeHead(status, {
    'X-Request-Id': call.requestId,
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-store',
  });
  call.res.end(text);
}

export function sendEmpty(call: Call, status = 204): void {
  call.res.writeHead(status, { 'X-Request-Id': call.requestId, 'Cache-Control': 'no-store' });
  call.res.end();
}

export const notFound = (what: string) => new DataPlaneError(404, 'invalid_request_error', 'not_found', `No such ${what}.`);
export const invalid = (param: string, message: string) => new DataPlaneError(400, 'invalid_request_error', 'validation_failed', `${param}: ${message}`, param);
export const methodNotAllowed = () => new DataPlaneError(405, 'invalid_request_error', 'method_not_allowed', 'This method is not allowed here.');
export const atQuota = (what: string) =>
  new DataPlaneError(
    429,
    'rate_limit_error',
    'quota_exceeded',
    `The plan's included ${what} for this month are used up (hard cap): ${what} are refused until the next month.`,
  );

/** A name from the path, or 400 naming `param`. */
export function nameParam(segment: string | undefined, param: string): string {
  let name: string;
  try {
    name = decodeURIComponent(segment ?? '');
  } catch {
    throw invalid(param, 'must match ^[a-z0-9][a-z0-9-]{0,62}$');
  }
  if (!NAME.test(name)) throw invalid(param, 'must match ^[a-z0-9][a-z0-9-]{0,62}$');
  return name;
}

/** A path segment decoded; a malformed escape names nothing (404 of `what`). */
export function segmentText(segment: string, what: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw notFound(what);
  }
}

/**
 * A domain error (the cron schedules' checks) or a backend's refusal as the data plane's answer;
 * null for anything else (the caller answers 503 and logs it).
 */
export function asDataPlaneError(err: unknown): DataPlaneError | null {
  if (err instanceof DataPlaneError) return err;
  if (err instanceof DomainError) return new DataPlaneError(err.status, err.type, err.code, err.message, err.param);
  if (err instanceof BackendRefusedError) {
    return err.param
      ? new DataPlaneError(400, 'invalid_request_error', 'validation_failed', err.message, err.param)
      : new DataPlaneError(409, 'invalid_request_error', err.code === 'refused' ? 'conflict' : err.code, err.message);
  }
  return null;
}

/** The body parsed as a JSON object, or 400. */
export function jsonObject(body: Buffer): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new DataPlaneError(400, 'invalid_request_error', 'invalid_json', 'The body is not valid JSON.');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new DataPlaneError(400, 'invalid_request_error', 'invalid_json', 'The body must be a JSON object.');
  return parsed as Record<string, unknown>;
}
