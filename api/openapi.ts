import { OpenAPIRegistry, OpenApiGeneratorV31 } from '@asteasolutions/zod-to-openapi';
import { ErrorSchema } from './schemas';
import { isMutation, type AnyRoute } from './route';

const STANDARD_ERRORS: Array<[number, string]> = [
  [400, 'Invalid request (`validation_failed`, `invalid_json`, ...)'],
  [401, 'Missing or invalid credential'],
  [403, 'The credential lacks the scope (`insufficient_scope`) or the credential type'],
  [404, 'Not found, or not visible to this credential'],
  [429, 'Rate limited'],
  [500, 'Internal error'],
];

/** Errors the shared pipeline (api/app.ts) can answer on a route, by what the route takes. */
function pipelineErrors(route: AnyRoute): Array<[number, string]> {
  const errors: Array<[number, string]> = [];
  if (route.body) {
    errors.push([413, 'The body is over 1 MiB (`payload_too_large`)'], [415, 'The body is not `application/json` (`unsupported_media_type`)']);
  }
  if (route.credential !== 'none' && isMutation(route.method)) {
    errors.push([409, 'Conflicts with the current state (`conflict`), or a request with this Idempotency-Key is still running (`idempotency_key_in_use`)']);
    if (!route.returnsSecret) errors.push([422, 'This Idempotency-Key was used with another method, path or body (`idempotency_key_reused`)']);
  }
  if (route.credential !== 'none') errors.push([503, 'A backend the call needs is not answering (`backend_unavailable`)']);
  return errors;
}

const TAG_DESCRIPTIONS: Record<string, string> = {
  Meta: 'What this instance offers: version, resources, scopes, limits, and this document.',
  Sessions: "Signing in with email and password; a session acts with its user's permissions.",
  'API keys': 'Keys for programs. Session only: an API key can never manage keys.',
  Account: 'The account, the credential in use, and the audit log of API activity.',
  Services: 'Billing contracts of every product family; family endpoints act on these ids.',
  Operations: 'Work that takes time: every asynchronous endpoint answers 202 with one.',
};

/**
 * The OpenAPI 3.1 document, generated from the same route table that builds the router. Marks go in
 * `x-cloud-marks` (plus one boolean extension per mark), the scope in the security requirement and
 * in `x-cloud-scope`.
 */
export function buildOpenApiDocument(routes: AnyRoute[], info: { version: string; serverUrl?: string }) {
  const registry = new OpenAPIRegistry();
  const bearer = registry.registerComponent('securitySchemes', 'bearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'An API key (`cloud_live_...`) or a session token (`cloud_sess_...`).',
  });

  for (const route of routes) {
    if (route.internal) continue;
    const responses: Record<string, object> = {};
    for (const r of route.responses) {
      const schema = r.schema ?? (r.status >= 400 ? ErrorSchema : undefined);
      responses[String(r.status)] = schema
        ? { description: r.description, content: { [r.contentType ?? 'application/json']: { schema } } }
        : { description: r.description };
    }
    for (const [status, description] of [...STANDARD_ERRORS, ...pipelineErrors(route)].sort(([a], [b]) => a - b)) {
      responses[String(status)] ??= { description, content: { 'application/json': { schema: ErrorSchema } } };
    }
    const headers = [
      ...(route.idempotencyKey === 'required' || route.method !== 'get'
        ? [
            {
              name: 'Idempotency-Key',
              in: 'header' as const,
              required: route.idempotencyKey === 'required',
              // As api/app.ts checks it: 1 to 255 characters.
              schema: { type: 'string' as const, minLength: 1, maxLength: 255 },
              description: route.returnsSecret
                ? 'Accepted, but this call returns a secret and is never replayed.'
                : 'Replays the stored 2xx answer of an earlier request with the same key for 24 hours.',
            },
          ]
        : []),
    ];
    registry.registerPath({
      method: route.method,
      path: route.path,
      operationId: route.operationId,
      summary: route.summary,
      description: route.description,
      tags: [route.tag],
      security: route.credential === 'none' ? [] : [{ [bearer.name]: route.scope ? [route.scope] : [] }],
      request: {
        params: route.params,
        query: route.query,
        body: route.body
          ? {
              content: {
                'application/json': { schema: route.body, ...(route.exampleBody !== undefined ? { example: route.exampleBody } : {}) },
              },
              // A request without a body is validated as `{}` (api/app.ts): the body is required only
              // when `{}` is not a valid one.
              required: !route.body.safeParse({}).success,
            }
          : undefined,
      },
      parameters: headers,
      responses,
      'x-cloud-scope': route.scope,
      'x-cloud-credential': route.credential,
      'x-cloud-marks': route.marks,
      'x-cloud-reversible': route.marks.includes('R'),
      'x-cloud-destructive': route.marks.includes('D'),
      'x-cloud-async': route.marks.includes('A'),
      'x-cloud-idempotent': route.marks.includes('I'),
    });
  }

  const generator = new OpenApiGeneratorV31(registry.definitions);
  return generator.generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Cloud control-plane API',
      version: info.version,
      description:
        'One JSON-over-HTTP API for every hosting product of a customer account. Errors share one envelope; lists use opaque cursors; work that takes time answers 202 with an operation.',
    },
    servers: [{ url: info.serverUrl ?? '/' }],
    tags: [...new Set(routes.filter((r) => !r.internal).map((r) => r.tag))].map((name) => ({
      name,
      description: TAG_DESCRIPTIONS[name] ?? `${name} endpoints.`,
    })),
  });
}
