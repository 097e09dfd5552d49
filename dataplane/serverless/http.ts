import type http from 'node:http';
import { DomainError } from '../../domain/errors';
import { BackendRefusedError } from '../../providers/errors';
import { DataPlaneError } from '../errors';

const tooLarge = (maxBytes: number) =>
  new DataPlaneError(413, 'invalid_request_error', 'payload_too_large', `The body is over ${Math.round(maxBytes / 1024)} KiB.`);

/** A body read whole already (plain-http.ts), refused as `readBody` refuses it past `maxBytes`. */
export function bodyWithin(body: Buffer, maxBytes: number): Buffer {
  if (body.length > maxBytes) throw tooLarge(maxBytes);
  return body;
}

/**
 * The request's body, refused with `413 payload_too_large` past `maxBytes` (as dataplane/errors.ts
 * `readBody`, with less per call: a small body has usually been parsed whole by the time the handler
 * runs, and is then taken from the stream's buffer at once). Past the limit the rest is not read;
 * the router answers with `Connection: close`.
 */
export function readBody(req: http.IncomingMessage, maxBytes: number): Promise<Buffer> {
  if (req.complete && !req.destroyed) {
    const chunks: Buffer[] = [];
    let size = 0;
    for (let chunk = req.read() as Buffer | null; chunk !== null; chunk = req.read() as Buffer | null) {
      size += chunk.length;
      if (size > maxBytes) return Promise.reject(tooLarge(maxBytes));
      chunks.push(chunk);
    }
    return Promise.resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
  }
  // The listeners are shared (the request is `this`), the state hangs on the request: no closures per call.
  const promise = new Promise<Buffer>((resolve, reject) => ((req as Reading)[READING] = { chunks: [], size: 0, maxBytes, resolve, reject }));
  req.on('data', onBodyData);
  req.on('end', onBodyEnd);
  req.on('error', onBodyError);
  req.on('close', onBodyClose);
  return promise;
}

const READING = Symbol('reading the body');

interface Reading extends http.IncomingMessage {
  [READING]?: { chunks: Buffer[]; size: number; maxBytes: number; resolve(body: Buffer): void; reject(err: Error): void };
}

function stopReading(req: Reading) {
  const state = req[READING]!;
  req[READING] = undefined;
  req.off('data', onBodyData);
  req.off('end', onBodyEnd);
  req.off('error', onBodyError);
  req.off('close', onBodyClose);
  return state;
}

function onBodyData(this: Reading, chunk: Buffer) {
  const state = this[READING]!;
  state.size += chunk.length;
  if (state.size <= state.maxBytes) {
    state.chunks.push(chunk);
    return;
  }
  stopReading(this);
  this.pause();
  state.reject(tooLarge(state.maxBytes));
}

function onBodyEnd(this: Reading) {
  const state = stopReading(this);
  state.resolve(state.chunks.length === 1 ? state.chunks[0] : Buffer.concat(state.chunks, state.size));
}

function onBodyError(this: Reading, err: Error) {
  stopReading(this).reject(err);
}

/** Closed before its end without an error: the client went away mid-body. */
function onBodyClose(this: Reading) {
  stopReading(this).reject(new Error('aborted'));
}

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

/** One request as the data plane's router hands it on; the query is parsed when a handler asks for it. */
export class PlaneCall implements Call {
  private parsedQuery: URLSearchParams | null = null;

  constructor(
    readonly req: http.IncomingMessage,
    readonly res: http.ServerResponse,
    readonly requestId: string,
    readonly segments: string[],
    private readonly search: string,
  ) {}

  get query(): URLSearchParams {
    return (this.parsedQuery ??= new URLSearchParams(this.search));
  }
}

/** Characters a URL path keeps as they are (WHATWG URL: nothing to encode, no backslash); no `//` at the start (it would name a host). */
const PLAIN_PATH = /^\/(?!\/)[A-Za-z0-9\-._~!$&'()*+,;=:@%/]*$/;
/** A query string WHATWG URL keeps as it is (no space, quote, `#`, `<`, `>`, nor anything past ASCII). */
const PLAIN_QUERY = /^\?[A-Za-z0-9\-._~!$&'()*+,;=:@%/?]*$/;
/** A `.` or `..` segment, also percent-encoded: WHATWG URL resolves them. */
const DOT_SEGMENT = /(?:^|\/)(?:\.|%2e){1,2}(?:\/|$)/i;

/**
 * A request target's path split at `/` (still percent-encoded; the first element is the empty string
 * before the leading `/`) and its query string, exactly as `new URL(target, base)` reads them. A
 * plain path (the usual case) is split as it is, without building a URL; anything else goes through
 * `new URL`, which encodes, resolves dot segments and turns a backslash into `/`.
 */
export function parseTarget(target: string): { segments: string[]; search: string } {
  const q = target.indexOf('?');
  const path = q < 0 ? target : target.slice(0, q);
  const search = q < 0 ? '' : target.slice(q);
  if (isPlain(path, search)) return { segments: path.split('/'), search };
  const url = new URL(target, 'http://plane');
  return { segments: url.pathname.split('/'), search: url.search };
}

const isPlain = (path: string, search: string) => PLAIN_PATH.test(path) && !DOT_SEGMENT.test(path) && (search === '' || PLAIN_QUERY.test(search));

/** Whether `new URL` would keep the target as it is (parseTarget splits it without one). */
export function isPlainTarget(target: string): boolean {
  const q = target.indexOf('?');
  return q < 0 ? isPlain(target, '') : isPlain(target.slice(0, q), target.slice(q));
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
