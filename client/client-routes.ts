import type { CredentialRule, HttpMethod, Mark } from '../api/route';

/**
 * A route seen from a client: the route table's fields without the handler, and where each input
 * goes (path, query, body) with its JSON Schema, from the same zod schemas that validate it on the
 * server. The CLI turns these into arguments and flags, the MCP server into one tool input schema;
 * both build the request with `buildRequest`. Plain data, so the CLI can cache it (cli/route-manifest.ts).
 */
export type JsonSchema = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export type InputLocation = 'path' | 'query' | 'body';

export interface RouteInput {
  name: string;
  in: InputLocation;
  required: boolean;
  schema: JsonSchema;
}

export interface RouteInputs {
  /** Path parameters in the order they appear in the path. */
  path: RouteInput[];
  query: RouteInput[];
  /** The fields of an object body; empty when the body is not an object (see `wholeBody`). */
  body: RouteInput[];
  /** The JSON Schema of a body that is not a plain object (an array, a union): sent as one value. */
  wholeBody: JsonSchema | null;
}

export interface ClientRoute {
  method: HttpMethod;
  path: string;
  operationId: string;
  summary: string;
  description: string | null;
  tag: string;
  scope: string | null;
  credential: CredentialRule;
  marks: Mark[];
  returnsSecret: boolean;
  /** The route takes a request body. */
  hasBody: boolean;
  /** The query has `cursor`: a paginated list. */
  paginated: boolean;
  inputs: RouteInputs;
}

/** Path parameter names in path order: `/v1/x/{id}/y/{y_id}` -> ['id', 'y_id']. */
export function pathParamNames(path: string): string[] {
  return [...path.matchAll(/\{([a-zA-Z_][a-zA-Z0-9_]*)\}/g)].map((m) => m[1]);
}

export interface PlannedRequest {
  method: Uppercase<HttpMethod>;
  /** The concrete path with each parameter percent-encoded, plus the query string. */
  url: string;
  body: unknown;
}

export class MissingPathParameterError extends Error {
  constructor(readonly param: string) {
    super(`${param}: required`);
  }
}

function queryString(values: Record<string, unknown>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) {
      search.append(name, typeof item === 'object' ? JSON.stringify(item) : String(item));
    }
  }
  const text = search.toString();
  return text ? `?${text}` : '';
}

/**
 * The HTTP request for a route from named values (path parameters, query fields, body fields).
 * `body` replaces the whole body when given (a non-object body, or `--data` in the CLI); named
 * body fields are laid over it. Names the route does not know go into the body of a route that has
 * one (the API refuses them there, as it would from any client), and are dropped otherwise.
 */
export function buildRequest(route: ClientRoute, values: Record<string, unknown>, wholeBody?: unknown): PlannedRequest {
  const inputs = route.inputs;
  let path = route.path;
  for (const p of inputs.path) {
    const value = values[p.name];
    if (value === undefined || value === null || value === '') throw new MissingPathParameterError(p.name);
    path = path.replace(`{${p.name}}`, encodeURIComponent(String(value)));
  }
  const query: Record<string, unknown> = {};
  for (const q of inputs.query) if (values[q.name] !== undefined) query[q.name] = values[q.name];
  let body: unknown = undefined;
  if (route.hasBody) {
    const known = new Set([...inputs.path, ...inputs.query].map((i) => i.name));
    const fields: Record<string, unknown> = {};
    for (const [name, value] of Object.entries(values)) if (!known.has(name) && value !== undefined) fields[name] = value;
    if (wholeBody !== undefined && (wholeBody === null || typeof wholeBody !== 'object' || Array.isArray(wholeBody))) {
      body = wholeBody;
    } else {
      body = { ...((wholeBody as Record<string, unknown> | undefined) ?? {}), ...fields };
    }
  }
  return { method: route.method.toUpperCase() as PlannedRequest['method'], url: path + queryString(query), body };
}

/** `listServices` -> `list_services`, `getOpenApiDocument` -> `get_open_api_document`. */
export function snakeCase(name: string): string {
  return name
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1_$2')
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/[-\s]+/g, '_')
    .toLowerCase();
}

export function kebabCase(name: string): string {
  return snakeCase(name).replace(/_/g, '-');
}

/** A route whose template matches a concrete path (for `cloud api` and the reachability test). */
export function matchRoute<R extends { method: string; path: string }>(routes: R[], method: string, pathname: string): R | undefined {
  return routes.find((r) => r.method === method.toLowerCase() && templateRegExp(r.path).test(pathname));
}

function templateRegExp(template: string): RegExp {
  const pattern = template
    .split(/\{[a-zA-Z_][a-zA-Z0-9_]*\}/)
    .map((part) => part.replace(/[.*+?^$()|[\]\\]/g, '\\$&'))
    .join('[^/]+');
  return new RegExp(`^${pattern}/?$`);
}

/**
 * A path parameter's description for a client that encodes the value itself: the route's advice to
 * URL-encode it (meant for people writing URLs by hand) would lead to encoding it twice.
 */
export function pathParamDescription(description: string | undefined): string | undefined {
  const text = description?.replace(/\s*URL-encoded\s*(\([^)]*\))?\.?\s*/i, ' ').trim();
  return text ? text : undefined;
}

const MARK_NAMES: Record<string, string> = { R: 'reversible', D: 'destructive', A: 'asynchronous', I: 'idempotent' };

/** `R (reversible), A (asynchronous)`: a route's marks spelled out, for the CLI's help and the MCP tools. */
export function marksLong(route: ClientRoute): string {
  return route.marks.length ? route.marks.map((m) => `${m} (${MARK_NAMES[m]})`).join(', ') : 'none';
}
