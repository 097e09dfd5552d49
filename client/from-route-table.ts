import { z } from 'zod';
import type { AnyRoute } from '../api/route';
import { pathParamNames, type ClientRoute, type InputLocation, type JsonSchema, type RouteInput, type RouteInputs } from './client-routes';

/**
 * The route table's entries as ClientRoutes: the JSON Schemas come from the same zod schemas that
 * validate the requests on the server (kept apart from client-routes.ts so that a client reading a
 * cached view does not load zod).
 */
export function toJsonSchema(schema: z.ZodType): JsonSchema {
  const out = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
  delete out.$schema;
  return out;
}

function fieldsOf(schema: z.ZodType | undefined, location: InputLocation): RouteInput[] {
  if (!schema) return [];
  const json = toJsonSchema(schema);
  const required = new Set<string>(json.required ?? []);
  return Object.entries<JsonSchema>(json.properties ?? {}).map(([name, s]) => ({ name, in: location, required: required.has(name), schema: s }));
}

function routeInputs(route: AnyRoute): RouteInputs {
  const params = new Map(fieldsOf(route.params, 'path').map((f) => [f.name, f]));
  const path = pathParamNames(route.path).map((name) => params.get(name) ?? { name, in: 'path' as const, required: true, schema: { type: 'string' } });
  for (const p of path) p.required = true;
  const query = fieldsOf(route.query, 'query');
  let body: RouteInput[] = [];
  let wholeBody: JsonSchema | null = null;
  if (route.body) {
    const json = toJsonSchema(route.body);
    if (json.type === 'object' && json.properties) body = fieldsOf(route.body, 'body');
    else wholeBody = json;
  }
  return { path, query, body, wholeBody };
}

export function toClientRoute(route: AnyRoute): ClientRoute {
  return {
    method: route.method,
    path: route.path,
    operationId: route.operationId,
    summary: route.summary,
    description: route.description ?? null,
    tag: route.tag,
    scope: route.scope,
    credential: route.credential,
    marks: route.marks,
    returnsSecret: Boolean(route.returnsSecret),
    hasBody: Boolean(route.body),
    paginated: Boolean(route.query && 'cursor' in route.query.shape),
    inputs: routeInputs(route),
  };
}

/** The routes a client exposes: every /v1 route (internal ones, health and dev stand-ins, are outside /v1). */
export function clientRoutes(routes: AnyRoute[]): ClientRoute[] {
  return routes.filter((r) => !r.internal && r.path.startsWith('/v1/')).map(toClientRoute);
}
