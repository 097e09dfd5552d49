import { marksLong, pathParamDescription, snakeCase, type ClientRoute, type JsonSchema } from '../client/client-routes';

/**
 * The MCP tools, one per /v1 route of the route table (DECISIONS "MCP"): name = operationId in
 * snake_case, description = summary + scope + marks, input schema = path parameters, query and body
 * fields merged (JSON Schema from the route's zod schemas), annotations from the method and marks.
 * Plus `wait_for_operation`.
 */
export interface ToolAnnotations {
  title: string;
  readOnlyHint: boolean;
  destructiveHint: boolean;
  idempotentHint: boolean;
  openWorldHint: false;
}

export interface ToolDef {
  name: string;
  title: string;
  description: string;
  inputSchema: JsonSchema & { type: 'object' };
  annotations: ToolAnnotations;
  /** The route the tool calls; absent for wait_for_operation. */
  route?: ClientRoute;
}

/** Who is asking: what the API says about the credential (`GET /v1/account/credential`, or the principal on /mcp). */
export interface CredentialView {
  type: 'api_key' | 'session';
  scopes: Iterable<string>;
}

export const WAIT_TOOL_NAME = 'wait_for_operation';
export const WAIT_MAX_SECONDS = 60;

export function toolName(route: ClientRoute): string {
  return snakeCase(route.operationId);
}

export function annotationsFor(route: ClientRoute): ToolAnnotations {
  const get = route.method === 'get';
  return {
    title: route.summary,
    readOnlyHint: get,
    destructiveHint: route.marks.includes('D'),
    idempotentHint: get || route.marks.includes('I'),
    openWorldHint: false,
  };
}

function describe(route: ClientRoute): string {
  const scope = route.scope
    ? `Scope: ${route.scope}${route.credential === 'session' ? ' (session credentials only; API keys cannot call it)' : ''}.`
    : route.credential === 'none'
      ? 'Scope: none (public).'
      : `Scope: none (any valid credential${route.credential === 'session' ? ' of type session' : ''}).`;
  const lines = [
    `${route.summary}.`,
    ...(route.description ? [route.description] : []),
    scope,
    `Marks: ${marksLong(route)}.`,
    `HTTP: ${route.method.toUpperCase()} ${route.path}.`,
  ];
  if (route.marks.includes('A')) {
    lines.push(`Answers with an operation (202); pass its id to ${WAIT_TOOL_NAME} to wait for the outcome.`);
  }
  if (route.returnsSecret) {
    lines.push(
      'Returns a secret (a credential, password or credential-bearing URL) that is shown only in this answer: handle it as sensitive and do not repeat it needlessly.',
    );
  }
  if (route.paginated) {
    lines.push('Paginated: pass `next_cursor` of the answer as `cursor` while `has_more` is true.');
  }
  return lines.join('\n');
}

const cache = new WeakMap<ClientRoute, ToolDef>();

/** The tool of one route. Throws when the route's inputs cannot be merged into one object (a name used twice). */
export function routeTool(route: ClientRoute): ToolDef {
  const cached = cache.get(route);
  if (cached) return cached;
  const inputs = route.inputs;
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const input of [...inputs.path, ...inputs.query, ...inputs.body]) {
    if (properties[input.name]) throw new Error(`mcp: ${route.operationId} has two inputs named "${input.name}"`);
    const schema = { ...input.schema };
    if (input.in === 'path') {
      schema.description = [pathParamDescription(schema.description), 'Path parameter; give it as is (the tool percent-encodes it).'].filter(Boolean).join(' ');
    }
    properties[input.name] = schema;
    if (input.required) required.push(input.name);
  }
  if (inputs.wholeBody) {
    if (properties.body) throw new Error(`mcp: ${route.operationId} has an input named "body" beside a non-object body`);
    properties.body = { ...inputs.wholeBody, description: 'The request body.' };
    required.push('body');
  }
  const tool: ToolDef = {
    name: toolName(route),
    title: route.summary,
    description: describe(route),
    inputSchema: { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false },
    annotations: annotationsFor(route),
    route,
  };
  cache.set(route, tool);
  return tool;
}

export const WAIT_TOOL: ToolDef = {
  name: WAIT_TOOL_NAME,
  title: 'Wait for an operation to end',
  description: [
    'Waits until an asynchronous operation (the answer of a tool marked A) has succeeded or failed, or until timeout_seconds have passed, and returns the operation as GET /v1/operations/{id} shows it.',
    'When the time is up first, the operation is returned as it is then (status pending or running): call this tool again to keep waiting.',
    'Scope: operations:read.',
  ].join('\n'),
  inputSchema: {
    type: 'object',
    properties: {
      id: { type: 'string', minLength: 1, maxLength: 200, description: 'The operation id, `op_<ulid>`.' },
      timeout_seconds: {
        type: 'integer',
        minimum: 1,
        maximum: WAIT_MAX_SECONDS,
        default: 30,
        description: `How long to wait at most, 1 to ${WAIT_MAX_SECONDS} seconds (default 30).`,
      },
    },
    required: ['id'],
    additionalProperties: false,
  },
  annotations: { title: 'Wait for an operation to end', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
};

/** Whether a credential may call a route at all (the API decides per resource on top of this). */
export function mayCall(route: ClientRoute, credential: CredentialView | null): boolean {
  if (route.credential === 'none') return true;
  if (!credential) return false;
  if (route.credential === 'session' && credential.type !== 'session') return false;
  return route.scope === null || new Set(credential.scopes).has(route.scope);
}

/** `tools/list` for one credential: the routes it can call (GETs only in read-only mode), then wait_for_operation. */
export function toolsFor(routes: ClientRoute[], credential: CredentialView | null, readOnly: boolean): ToolDef[] {
  const tools = routes.filter((route) => mayCall(route, credential) && (!readOnly || route.method === 'get')).map(routeTool);
  if (credential && new Set(credential.scopes).has('operations:read')) tools.push(WAIT_TOOL);
  return tools;
}

/** Every tool that exists, whoever asks (for the reachability test and documentation). */
export function allTools(routes: ClientRoute[]): ToolDef[] {
  return [...routes.map(routeTool), WAIT_TOOL];
}
