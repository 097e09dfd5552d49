import express, { type NextFunction, type Request, type Response } from 'express';
import { type z } from 'zod';
import { newUlidId } from '../common/ids';
import { runIdempotent } from '../domain/idempotency';
import type { Principal } from '../domain/principal';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import type { AppDeps } from './deps';
import { ApiError, backendUnavailable, conflict, forbidden, insufficientScope, validationFailed, type FieldError } from './errors';
import { isMutation, toExpressPath, type AnyRoute } from './route';

const BODY_LIMIT = '1mb';
const IDEMPOTENCY_KEY_MAX = 255;

interface Locals {
  requestId: string;
  startedAt: bigint;
  route?: string;
  scope?: string | null;
  principal?: Principal;
  errorCode?: string;
}

const locals = (res: Response) => res.locals as Locals;

export function clientIp(req: Request): string | null {
  const addr = req.socket.remoteAddress ?? null;
  return addr?.startsWith('::ffff:') ? addr.slice(7) : addr;
}

export function isLoopback(ip: string | null): boolean {
  return ip !== null && (ip === '::1' || ip.startsWith('127.'));
}

function channel(req: Request): 'api' | 'cli' | 'mcp' {
  const value = String(req.headers['cloud-channel'] ?? '').toLowerCase();
  return value === 'cli' || value === 'mcp' ? value : 'api';
}

/** Zod issues -> `validation_failed` with dot-notation params (`records.0.ttl`). */
export function zodToApiError(error: z.ZodError, prefix?: string): ApiError {
  const errors: FieldError[] = error.issues.map((issue) => ({
    param: [...(prefix ? [prefix] : []), ...issue.path.map(String)].join('.') || (prefix ?? 'body'),
    message: issue.message,
  }));
  return validationFailed(errors);
}

/**
 * The dotted path of the first string (or object key) in a request part that holds U+0000, which
 * PostgreSQL cannot store in text or jsonb: refused here as `validation_failed` instead of failing in SQL.
 */
function nulPath(value: unknown, path: string[] = []): string[] | null {
  if (typeof value === 'string') return value.includes('\u0000') ? path : null;
  if (value === null || typeof value !== 'object') return null;
  for (const [key, item] of Object.entries(value)) {
    if (key.includes('\u0000')) return [...path, key];
    const found = nulPath(item, [...path, key]);
    if (found) return found;
  }
  return null;
}

function rejectNul(value: unknown) {
  const path = nulPath(value);
  if (path) throw validationFailed([{ param: path.join('.') || 'body', message: 'must not contain the NUL character (U+0000)' }]);
}

function parsePart<T extends z.ZodType | undefined>(schema: T, value: unknown, prefix?: string) {
  if (!schema) return undefined;
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw zodToApiError(parsed.error, prefix);
  return parsed.data;
}

/** `/v1/x/{id}` -> a RegExp for the 405 check. */
function pathMatcher(path: string): RegExp {
  const pattern = path
    .split(/\{[a-zA-Z_]+\}/)
    .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
    .join('[^/]+');
  return new RegExp(`^${pattern}/?$`);
}

/**
 * Builds the HTTP application from the route table. Every route runs the same pipeline:
 * authenticate -> rate limit -> session/scope checks -> validate -> idempotency -> handler.
 */
export function createApp(deps: AppDeps, routes: AnyRoute[]): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');

  app.use((req, res, next) => {
    const requestId = newUlidId('req');
    res.locals.requestId = requestId;
    res.locals.startedAt = process.hrtime.bigint();
    res.setHeader('X-Request-Id', requestId);
    if (req.path.startsWith('/v1/') || req.path === '/v1') recordAuditOnFinish(deps, req, res);
    next();
  });

  // JSON only: a body in any other media type is refused before parsing (and a request without one
  // does not go through the parser at all).
  const parseJson = express.json({ limit: BODY_LIMIT, type: ['application/json', 'application/*+json'] });
  app.use((req, res, next) => {
    const hasBody = Number(req.headers['content-length'] ?? 0) > 0 || req.headers['transfer-encoding'] !== undefined;
    if (!hasBody) return next();
    if (!req.is(['application/json', 'application/*+json'])) {
      return next(new ApiError(415, 'invalid_request_error', 'unsupported_media_type', 'Send request bodies as application/json.'));
    }
    return parseJson(req, res, next);
  });

  for (const route of routes) {
    const expressPath = toExpressPath(route.path);
    app[route.method](expressPath, (req, res, next) => {
      handle(deps, route, expressPath, req, res).catch(next);
    });
  }

  const matchers = routes.map((route) => ({ route, re: pathMatcher(route.path) }));
  app.use((req, res, next) => {
    const allowed = matchers.filter((m) => m.re.test(req.path)).map((m) => m.route.method.toUpperCase());
    if (allowed.length > 0) {
      res.setHeader('Allow', [...new Set(allowed)].join(', '));
      return next(new ApiError(405, 'invalid_request_error', 'method_not_allowed', `${req.method} is not allowed here; use ${allowed.join(' or ')}.`));
    }
    return next(new ApiError(404, 'invalid_request_error', 'route_not_found', `No route ${req.method} ${req.path}.`));
  });

  app.use((err: unknown, req: Request, res: Response, _next: NextFunction) => {
    const apiError = toApiError(err, deps, req);
    locals(res).errorCode = apiError.code;
    if (res.headersSent) return res.end();
    for (const [name, value] of Object.entries(apiError.headers)) res.setHeader(name, value);
    res.status(apiError.status).json({
      error: {
        type: apiError.type,
        code: apiError.code,
        message: apiError.message,
        param: apiError.param,
        request_id: locals(res).requestId,
        ...apiError.extra,
      },
    });
  });

  return app;
}

async function handle(deps: AppDeps, route: AnyRoute, expressPath: string, req: Request, res: Response): Promise<void> {
  const l = locals(res);
  l.route = expressPath;
  l.scope = route.scope;

  if (route.internal && route.path.startsWith('/_dev') && !isLoopback(clientIp(req))) {
    throw new ApiError(404, 'invalid_request_error', 'route_not_found', `No route ${req.method} ${req.path}.`);
  }

  let principal: Principal | null = null;
  if (route.credential !== 'none') {
    try {
      principal = await deps.credentials.authenticate(req.headers.authorization);
    } catch (err) {
      await applyRateLimit(deps, res, `ip:${clientIp(req)}`, null, null, isMutation(route.method));
      throw err;
    }
    l.principal = principal;
  }
  if (!route.internal) {
    await applyRateLimit(
      deps,
      res,
      principal ? principal.credentialId : `ip:${clientIp(req)}`,
      principal ? String(principal.accountId) : null,
      principal?.rateLimitTier ?? null,
      isMutation(route.method),
    );
  }
  if (principal && route.credential === 'session' && principal.type !== 'session') {
    throw forbidden('session_required', 'This call needs a session credential; API keys cannot manage API keys or users.');
  }
  if (principal && route.scope && !principal.scopes.has(route.scope)) throw insufficientScope(route.scope);

  rejectNul(req.params);
  rejectNul(req.query);
  if (route.body) rejectNul(req.body);
  const params = parsePart(route.params, req.params);
  const query = parsePart(route.query, req.query);
  const body = route.body ? parsePart(route.body, req.body ?? {}) : undefined;

  const run = () =>
    route.handler({ params, query, body, principal, deps, req, res, requestId: l.requestId });

  const keyHeader = req.headers['idempotency-key'];
  const idempotencyKey = typeof keyHeader === 'string' ? keyHeader : undefined;
  let result;
  if (isMutation(route.method) && principal && !route.internal) {
    if (idempotencyKey !== undefined && (idempotencyKey.length < 1 || idempotencyKey.length > IDEMPOTENCY_KEY_MAX)) {
      throw validationFailed([{ param: 'Idempotency-Key', message: `must be 1 to ${IDEMPOTENCY_KEY_MAX} characters` }]);
    }
    if (idempotencyKey === undefined && route.idempotencyKey === 'required') {
      throw new ApiError(400, 'invalid_request_error', 'idempotency_key_required', 'This call requires an Idempotency-Key header.');
    }
    if (idempotencyKey !== undefined && !route.returnsSecret) {
      result = await runIdempotent(
        deps.db,
        { accountId: principal.accountId, key: idempotencyKey, method: req.method, path: req.path, body: req.body ?? null },
        run,
      );
    }
  }
  result ??= await run();

  for (const [name, value] of Object.entries(result.headers ?? {})) res.setHeader(name, value);
  if (route.returnsSecret) res.setHeader('Cache-Control', 'no-store');
  const status = result.status ?? 200;
  if (result.body === undefined || status === 204) res.status(status).end();
  else sendJson(res, status, result.body);
}

/**
 * `res.status().json()` without Express's send(): the API turns ETags off and sets no
 * Last-Modified, so its freshness checks never apply; the same bytes and headers, one write.
 */
function sendJson(res: Response, status: number, body: unknown): void {
  const json = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(json));
  res.end(json);
}

async function applyRateLimit(deps: AppDeps, res: Response, keyId: string, accountId: string | null, tier: string | null, mutation: boolean) {
  const decision = await deps.rateLimiter.hit({ keyId, accountId, tier, mutation });
  res.setHeader('RateLimit-Limit', String(decision.limit));
  res.setHeader('RateLimit-Remaining', String(decision.remaining));
  res.setHeader('RateLimit-Reset', String(decision.resetSeconds));
  if (!decision.allowed) {
    throw new ApiError(
      429,
      'rate_limit_error',
      'rate_limited',
      `Too many requests; retry in ${decision.resetSeconds} s.`,
      null,
      { retry_after: decision.resetSeconds },
      { 'Retry-After': String(decision.resetSeconds) },
    );
  }
}

function toApiError(err: unknown, deps: AppDeps, req: Request): ApiError {
  if (err instanceof ApiError) return err;
  // Backend errors, mapped once for every family: unreachable 503; a refusal 409 (or 400 when it
  // names the request field at fault, like an invalid load-balancer configuration); gone 409.
  if (err instanceof BackendUnavailableError) return backendUnavailable(err.backend);
  if (err instanceof BackendRefusedError) return err.param ? validationFailed([{ param: err.param, message: err.message }]) : conflict(err.message);
  if (err instanceof BackendGoneError) return conflict(err.message);
  // The router could not percent-decode a path parameter (e.g. a backup id encoded by hand).
  if (err instanceof URIError && (err as { status?: number }).status === 400) {
    return validationFailed([{ param: 'path', message: 'a path segment is not valid percent-encoding; encode each parameter with encodeURIComponent' }]);
  }
  const bodyErr = err as { type?: string; status?: number };
  switch (bodyErr?.type) {
    case 'entity.too.large':
      return new ApiError(413, 'invalid_request_error', 'payload_too_large', `Request bodies are limited to ${BODY_LIMIT}.`);
    case 'entity.parse.failed':
      return new ApiError(400, 'invalid_request_error', 'invalid_json', 'The request body is not valid JSON (an object or array is expected).');
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new ApiError(415, 'invalid_request_error', 'unsupported_media_type', 'Send request bodies as UTF-8 application/json.');
    case 'request.aborted':
    case 'request.size.invalid':
      return new ApiError(400, 'invalid_request_error', 'invalid_request', 'The request body was incomplete.');
  }
  deps.logger.error({ err, method: req.method, path: req.path }, 'unhandled error');
  return new ApiError(500, 'api_error', 'internal_error', 'Something went wrong on our side. The request id identifies it for support.');
}

function recordAuditOnFinish(deps: AppDeps, req: Request, res: Response) {
  const record = () => {
    const l = locals(res);
    const entry = {
      request_id: l.requestId,
      account_id: l.principal?.accountId ?? null,
      method: req.method,
      path: req.path,
      route: l.route ?? null,
      status: res.statusCode,
      error_code: l.errorCode ?? null,
      scope_required: l.scope ?? null,
      credential_id: l.principal?.credentialId ?? null,
      ip: clientIp(req),
      via: channel(req),
      duration_ms: Number((process.hrtime.bigint() - l.startedAt) / 1_000_000n),
      created_at: new Date(),
    };
    deps.audit.record(entry);
    // The same fields as the audit entry (no bodies, headers or query strings), for operators at debug level.
    deps.logger.debug(entry, 'request');
  };
  // 'close' follows 'finish' for every response, and also ends one whose connection dropped first.
  res.once('close', record);
}
