import express, { type NextFunction, type Request, type Response } from 'express';
import { type z } from 'zod';
import { newUlidId } from '../common/ids';
import { jsonBytes } from './json-body';
import { runIdempotent } from '../domain/idempotency';
import type { Principal } from '../domain/principal';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import type { AppDeps } from './deps';
import { backendUnavailable, conflict, DomainError, forbidden, insufficientScope, validationFailed, type FieldError } from '../domain/errors';
import { ApiError, databaseUnavailable } from './errors';
import { isDatabaseUnavailable } from '../db/errors';
import { isMutation, toExpressPath, type AnyRoute, type ResponseSpec } from './route';
import { mountReferencePage } from './reference-page';
import { clientIp, forwardedClient, isLoopback } from './client-address';
import { authenticateRequest } from './authenticate';

const BODY_LIMIT = '1mb';
/**
 * JSON bodies nested deeper than this are refused before parsing: every walk over a body (the NUL
 * check, zod, the idempotency fingerprint) is recursive, and no request of this API needs more.
 */
export const MAX_JSON_DEPTH = 64;
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

function channel(req: Request): 'api' | 'cli' | 'mcp' {
  const value = String(req.headers['cloud-channel'] ?? '').toLowerCase();
  return value === 'cli' || value === 'mcp' ? value : 'api';
}

/** Zod issues -> `validation_failed` with dot-notation params (`records.0.ttl`). */
export function zodToApiError(error: z.ZodError, prefix?: string): DomainError {
  const errors: FieldError[] = error.issues.map((issue) => ({
    param: [...(prefix ? [prefix] : []), ...issue.path.map(String)].join('.') || (prefix ?? 'body'),
    message: issue.message,
  }));
  return validationFailed(errors);
}

/** Scans raw JSON for its bracket depth (outside strings) without parsing it. */
function checkJsonDepth(buf: Buffer): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i];
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > MAX_JSON_DEPTH) throw Object.assign(new Error('JSON nested too deeply'), { type: 'entity.too.deep' });
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
}

/**
 * The dotted path of the first string (or object key) in a request part that holds U+0000, which
 * PostgreSQL cannot store in text or jsonb: refused here as `validation_failed` instead of failing in
 * SQL. Null when there is none; the path is built only when there is one.
 */
function nulPath(value: unknown): string[] | null {
  if (typeof value === 'string') return value.includes('\u0000') ? [] : null;
  if (value === null || typeof value !== 'object') return null;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    if (key.includes('\u0000')) return [key];
    const found = nulPath((value as Record<string, unknown>)[key]);
    if (found) return [key, ...found];
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

/**
 * Whether a request is under /v1 and so audited. Routing is case-sensitive and exact, but the audit
 * looks at what a client may have meant: any case, percent-encoded letters, doubled slashes. So a
 * `/V1/...` or `//v1/...` probe, which runs no handler, is still on record.
 */
export function isAuditedPath(path: string): boolean {
  // Every request of the API itself: decoding and normalising cannot take this prefix away.
  if (path.startsWith('/v1/')) return true;
  let decoded = path;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    // Not valid percent-encoding: judge the raw path.
  }
  const normalised = decoded.replace(/\/+/g, '/').toLowerCase();
  return normalised === '/v1' || normalised.startsWith('/v1/');
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
/**
 * A client of the API served beside it, outside /v1 (the MCP endpoint, mcp/http.ts): the wiring
 * (api/bootstrap.ts) passes it in, so the API itself depends on none of its clients.
 */
export type MountBeside = (app: express.Express, deps: AppDeps, routes: AnyRoute[]) => void;

export function createApp(deps: AppDeps, routes: AnyRoute[], beside: MountBeside[] = []): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('query parser', 'simple');
  // X-Forwarded-For is believed only from the configured reverse proxies; by default from nobody.
  app.set('trust proxy', deps.config.TRUSTED_PROXIES.length > 0 ? deps.config.TRUSTED_PROXIES : false);
  // `/V1/services` is not `/v1/services`: no handler runs for a path the route table does not name.
  app.set('case sensitive routing', true);

  app.use((req, res, next) => {
    const requestId = newUlidId('req');
    res.locals.requestId = requestId;
    res.locals.startedAt = process.hrtime.bigint();
    res.setHeader('X-Request-Id', requestId);
    if (isAuditedPath(req.path)) recordAuditOnFinish(deps, req, res);
    next();
  });

  // JSON only: a body in any other media type is refused before parsing (and a request without one
  // does not go through the parser at all).
  const parseJson = express.json({ limit: BODY_LIMIT, type: ['application/json', 'application/*+json'], verify: (_req, _res, buf) => checkJsonDepth(buf) });
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
  // Clients of the API served beside it, outside /v1: the reference page, and the ones passed in
  // (the MCP endpoint: each of its tool calls is a /v1 request of its own, audited with via mcp).
  mountReferencePage(app);
  for (const mount of beside) mount(app, deps, routes);

  const matchers = routes.map((route) => ({ route, re: pathMatcher(route.path) }));
  app.use((req, res, next) => {
    const allowed = matchers.filter((m) => m.re.test(req.path)).map((m) => m.route.method.toUpperCase());
    if (allowed.length > 0) {
      res.setHeader('Allow', [...new Set(allowed)].join(', '));
      return next(new ApiError(405, 'invalid_request_error', 'method_not_allowed', `${req.method} is not allowed here; use ${allowed.join(' or ')}.`));
    }
    return next(new ApiError(404, 'invalid_request_error', 'route_not_found', `No route ${req.method} ${req.path}.`));
  });

  app.use(async (err: unknown, req: Request, res: Response, _next: NextFunction) => {
    let apiError = toApiError(err, deps, req);
    // An unexpected failure while PostgreSQL does not answer is the outage, however it surfaced.
    if (apiError.status === 500 && !(await databaseAnswers(deps))) apiError = databaseUnavailable();
    locals(res).errorCode = apiError.code;
    await attributeToCredential(deps, req, res);
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
      // A guessed token counts against the client address like a failed sign-in (api/authenticate.ts).
      principal = await authenticateRequest(deps, req);
    } catch (err) {
      // For the audit log only, never to authorise: the credential as this process last knew it,
      // when the database cannot say now. The request still fails (503).
      if (isDatabaseUnavailable(err)) l.principal = deps.credentials.lastKnown(req.headers.authorization) ?? undefined;
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
      // A tier above standard counts only on an owner's key (one made by someone else before that rule is standard).
      principal?.isOwner ? principal.rateLimitTier : null,
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

  const run = () => route.handler({ params, query, body, principal, deps, req, res, requestId: l.requestId });

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
        {
          db: deps.db,
          keyring: deps.keyring,
          abandonAfterMs: deps.config.IDEMPOTENCY_ABANDON_AFTER,
          startOperation: (id) => deps.operations.startFromRow(id),
          logger: deps.logger,
        },
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
  else if (route.responses.find((r: ResponseSpec) => r.status === status)?.contentType === 'text/plain')
    res.status(status).type('text/plain; charset=utf-8').send(String(result.body));
  else sendJson(res, status, result.body);
}

/**
 * `res.status().json()` without Express's send(): the API turns ETags off and sets no
 * Last-Modified, so its freshness checks never apply; the same bytes and headers, one write.
 */
function sendJson(res: Response, status: number, body: unknown): void {
  const bytes = jsonBytes(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', bytes.length);
  res.end(bytes);
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

/**
 * The one mapping of errors to the error envelope: the domain's keep their code and status
 * (domain/errors.ts), backend and body-parser errors get theirs here, anything else is a 500.
 */
function toApiError(err: unknown, deps: AppDeps, req: Request): ApiError {
  return ApiError.from(classify(err, deps, req));
}

function classify(err: unknown, deps: AppDeps, req: Request): DomainError {
  if (err instanceof DomainError) return err;
  // Backend errors, mapped once for every family: unreachable 503; a refusal 409 (or 400 when it
  // names the request field at fault, like an invalid load-balancer configuration); gone 409.
  if (err instanceof BackendUnavailableError) {
    // The detail is for operators (a host that is down, a command that failed), never for the customer.
    deps.logger.warn({ backend: err.backend, detail: err.detail, method: req.method, path: req.path }, 'backend unavailable');
    return backendUnavailable(err.backend, err.subject);
  }
  if (err instanceof BackendRefusedError) return err.param ? validationFailed([{ param: err.param, message: err.message }]) : conflict(err.message);
  if (err instanceof BackendGoneError) return conflict(err.message);
  if (isDatabaseUnavailable(err)) {
    deps.logger.warn({ err: (err as Error).message, method: req.method, path: req.path }, 'database unavailable');
    return databaseUnavailable();
  }
  // The router could not percent-decode a path parameter (e.g. a backup id encoded by hand).
  if (err instanceof URIError && (err as { status?: number }).status === 400) {
    return validationFailed([{ param: 'path', message: 'a path segment is not valid percent-encoding; encode each parameter with encodeURIComponent' }]);
  }
  const bodyErr = err as { type?: string; status?: number };
  switch (bodyErr?.type) {
    case 'entity.too.large':
      return new ApiError(413, 'invalid_request_error', 'payload_too_large', `Request bodies are limited to ${BODY_LIMIT}.`);
    case 'entity.too.deep':
      return validationFailed([{ param: 'body', message: `is nested more than ${MAX_JSON_DEPTH} levels deep` }]);
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

/**
 * A request refused before authentication (malformed JSON, a body too large, an unknown route or
 * method, a wrong media type) but sent with a valid credential is recorded under that credential's
 * account, so the account sees it in its audit log. Only for attribution: nothing is authorised here.
 */
async function attributeToCredential(deps: AppDeps, req: Request, res: Response): Promise<void> {
  const l = locals(res);
  if (l.principal || !req.headers.authorization || !isAuditedPath(req.path)) return;
  l.principal =
    (await deps.credentials.authenticate(req.headers.authorization).catch(() => undefined)) ??
    deps.credentials.lastKnown(req.headers.authorization) ??
    undefined;
}

/** Whether PostgreSQL answers a trivial query within half a second. */
async function databaseAnswers(deps: AppDeps): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), 500)));
  try {
    return await Promise.race([
      deps.db.raw('select 1').then(
        () => true,
        () => false,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
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
      ip: forwardedClient(deps.keyring, req) ?? clientIp(req),
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
