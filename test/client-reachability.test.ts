import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { buildRouteTable } from '../api/routes';
import { ApiClient } from '../client/api-client';
import { matchRoute, snakeCase, type ClientRoute, type JsonSchema } from '../client/client-routes';
import { clientRoutes } from '../client/from-route-table';
import { routeCommands } from '../cli/command-tree';
import { buildProgram } from '../cli/program';
import { createMcpServer } from '../mcp/server';
import { allTools } from '../mcp/tools';

/**
 * Every /v1 route of the route table (dev endpoints on, so every route that can exist) is reachable
 * from the CLI and from MCP with every one of its inputs: the command / tool is run for real and the
 * HTTP request it sends (to a recording server) must hit that route's template, carrying each path
 * parameter, query field and body field. A route added by any family is checked here without edits.
 */
const table = buildRouteTable({ devEndpoints: true });
const routes = clientRoutes(table);

interface Recorded {
  method: string;
  url: URL;
  body: unknown;
  headers: Record<string, string | string[] | undefined>;
}

let server: Server;
let baseUrl: string;
let recorded: Recorded[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = '';
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      recorded.push({ method: req.method!, url: new URL(req.url!, 'http://recorder'), body: raw ? JSON.parse(raw) : undefined, headers: req.headers });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

/** A value the schema accepts, distinctive enough to be found again in the request. */
function sample(schema: JsonSchema, name: string): unknown {
  const s = schema.anyOf?.find((v: JsonSchema) => v.type !== 'null') ?? schema;
  if (Array.isArray(s.enum)) return s.enum[0];
  const type = Array.isArray(s.type) ? s.type.find((t: string) => t !== 'null') : s.type;
  switch (type) {
    case 'integer':
      return s.minimum ?? 7;
    case 'number':
      return s.minimum ?? 7.5;
    case 'boolean':
      return false;
    case 'array':
      return [sample(s.items ?? { type: 'string' }, name)];
    case 'object':
      return { key: `${name}-value` };
    case 'string':
      return s.format === 'date-time' ? '2030-01-02T03:04:05.000Z' : `${name}-value`;
    default:
      return `${name}-value`;
  }
}

/** Path parameters with characters that must be percent-encoded (like a VPS backup id). */
const pathSample = (name: string) => `v:${name}/1`;

function expectRequestFor(route: ClientRoute, req: Recorded | undefined, values: Record<string, unknown>) {
  expect(req, 'no request was sent').toBeDefined();
  expect(req!.method).toBe(route.method.toUpperCase());
  const hit = matchRoute(table, req!.method, req!.url.pathname);
  expect(hit?.operationId, `${req!.method} ${req!.url.pathname} hits another route`).toBe(route.operationId);
  const segments = req!.url.pathname.split('/');
  route.path.split('/').forEach((segment, i) => {
    const param = /^\{(.+)\}$/.exec(segment)?.[1];
    if (param) expect(decodeURIComponent(segments[i])).toBe(values[param]);
  });
  for (const field of route.inputs.query) {
    const value = values[field.name];
    expect(req!.url.searchParams.getAll(field.name), `query ${field.name}`).toEqual((Array.isArray(value) ? value : [value]).map(String));
  }
  for (const field of route.inputs.body) expect((req!.body as Record<string, unknown>)[field.name], `body ${field.name}`).toEqual(values[field.name]);
  expect(req!.headers['cloud-channel']).toBeDefined();
  if (route.method !== 'get') expect(req!.headers['idempotency-key']).toBeDefined();
}

function valuesFor(route: ClientRoute): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const p of route.inputs.path) values[p.name] = pathSample(p.name);
  for (const f of [...route.inputs.query, ...route.inputs.body]) values[f.name] = sample(f.schema, f.name);
  return values;
}

const cases = routes.map((r) => [`${r.method.toUpperCase()} ${r.path}`, r] as const);

it('covers every /v1 route of the table', () => {
  expect(routes.length).toBe(table.filter((r) => !r.internal && r.path.startsWith('/v1/')).length);
  expect(routes.length).toBeGreaterThan(40);
  expect(table.filter((r) => !r.internal).every((r) => r.path.startsWith('/v1/'))).toBe(true);
});

describe('the cloud CLI reaches', () => {
  const commands = routeCommands(routes);

  it('every route with a command name of its own', () => {
    const names = commands.map((c) => c.words.join(' '));
    expect(new Set(names).size).toBe(names.length);
    expect(commands.map((c) => c.route.operationId).sort()).toEqual(routes.map((r) => r.operationId).sort());
    const builtins = ['login', 'logout', 'profile', 'api', 'completion', 'mcp', 'help'];
    for (const c of commands) expect(builtins, c.words.join(' ')).not.toContain(c.words[0]);
  });

  it.each(cases)('%s with all its inputs', async (_name, route) => {
    const command = commands.find((c) => c.route.operationId === route.operationId)!;
    const values = valuesFor(route);
    const argv = [...command.words, ...command.positionals.map((p) => String(values[p.name]))];
    for (const field of command.fields) {
      const value = values[field.name];
      argv.push(`--${field.flag}`, typeof value === 'string' ? value : JSON.stringify(value));
    }
    if (command.wholeBody) argv.push('--data', JSON.stringify(sample(command.wholeBody, 'body')));
    argv.push('--api-url', baseUrl, '--token', 'cloud_live_test', '-o', 'json');
    recorded = [];
    await buildProgram(routes).parseAsync(argv, { from: 'user' });
    expect(recorded).toHaveLength(1);
    expectRequestFor(route, recorded[0], values);
    expect(recorded[0].headers['cloud-channel']).toBe('cli');
  });
});

describe('the MCP server reaches', () => {
  let client: Client;

  beforeAll(async () => {
    const mcp = createMcpServer({
      routes,
      api: new ApiClient({ baseUrl, token: 'cloud_live_test', channel: 'mcp' }),
      credential: async () => ({ type: 'session', scopes: [] }),
      readOnly: false,
      version: 'test',
    });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await mcp.connect(serverSide);
    client = new Client({ name: 'reachability', version: '1' });
    await client.connect(clientSide);
  });
  afterAll(() => client?.close());

  it('every route with a tool named after its operationId', () => {
    const names = allTools(routes).map((t) => t.name);
    expect(new Set(names).size).toBe(names.length);
    for (const route of routes) expect(names).toContain(snakeCase(route.operationId));
  });

  it.each(cases)('%s with all its inputs', async (_name, route) => {
    const tool = allTools(routes).find((t) => t.route === route)!;
    const values = valuesFor(route);
    for (const name of Object.keys(values)) expect(Object.keys(tool.inputSchema.properties), name).toContain(name);
    const args = route.inputs.wholeBody ? { ...values, body: sample(route.inputs.wholeBody, 'body') } : values;
    recorded = [];
    const result = await client.callTool({ name: tool.name, arguments: args });
    expect(result.isError, JSON.stringify(result)).toBeFalsy();
    expect(recorded).toHaveLength(1);
    expectRequestFor(route, recorded[0], values);
    expect(recorded[0].headers['cloud-channel']).toBe('mcp');
  });
});
