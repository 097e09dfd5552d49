import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { buildRouteTable } from '../api/routes';
import { forwardedClientHeader } from '../api/client-address';
import { Keyring } from '../common/crypto';
import { snakeCase } from '../client/client-routes';
import { auditRowOf, startStack, type Stack } from './helpers/stack';
import { createApiKey } from './helpers/fixtures';
import { CLOUD_BIN, cliHome } from './helpers/cli';
import { createVps, type TestVps } from './vps.support';

/**
 * The MCP server with the SDK's own client, over both transports: Streamable HTTP at POST /mcp on
 * the API server, and stdio (`cloud mcp`, the real bin as a child process). Against the running
 * stack, so every tool call goes through the /v1 pipeline.
 */
let stack: Stack;
let vps: TestVps;
let narrowKey: string;
let ownerKey: string;
const clients: Client[] = [];
/** One client per transport, credential and mode for the whole file: over stdio each is a `cloud mcp` process. */
const connected = new Map<string, Promise<Client>>();

const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal);
type Transport = 'http' | 'stdio';

function connect(kind: Transport, token: string, opts: { readOnly?: boolean } = {}): Promise<Client> {
  const key = `${kind} ${token} ${opts.readOnly === true}`;
  let client = connected.get(key);
  if (!client) {
    client = connectNew(kind, token, opts);
    connected.set(key, client);
  }
  return client;
}

async function connectNew(kind: Transport, token: string, opts: { readOnly?: boolean }): Promise<Client> {
  const client = new Client({ name: 'cloud-test', version: '1.0.0' });
  if (kind === 'http') {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` };
    if (opts.readOnly) headers['cloud-mcp-read-only'] = 'true';
    await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), { requestInit: { headers } }));
  } else {
    const home = cliHome(stack.url);
    await client.connect(
      new StdioClientTransport({
        command: process.execPath,
        args: [CLOUD_BIN, 'mcp', ...(opts.readOnly ? ['--read-only'] : [])],
        env: { ...home.env, CLOUD_TOKEN: token },
        stderr: 'pipe',
      }),
    );
  }
  clients.push(client);
  return client;
}

/** A fetch whose connections leave from `localAddress`, so that the client's address differs from the server's own. */
function fetchFrom(localAddress: string) {
  return (url: string | URL, init?: RequestInit): Promise<Response> =>
    new Promise((resolve, reject) => {
      const headers = Object.fromEntries(new Headers(init?.headers).entries());
      const req = http.request(url, { method: init?.method ?? 'GET', headers, localAddress }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const status = res.statusCode ?? 500;
          const body = status === 202 || status === 204 ? null : Buffer.concat(chunks);
          resolve(new Response(body, { status, headers: res.headers as Record<string, string> }));
        });
      });
      req.on('error', reject);
      req.end(init?.body == null ? undefined : String(init.body));
    });
}

async function auditVia(via: string, since: string): Promise<any[]> {
  // The audit log is written in batches off the request path: write what is queued, then read.
  for (let i = 0; ; i++) {
    await stack.api.deps.audit.flush();
    const res = await stack.http.get(`/v1/audit-logs?limit=100&via=${via}&created_after=${encodeURIComponent(since)}`, { token: stack.owner.key });
    if (res.body.data.length > 0 || i > 40) return res.body.data;
    await new Promise((r) => setTimeout(r, 100));
  }
}

beforeAll(async () => {
  // Credentials are cached for 100 ms (500 ms by default): the revocation test waits that out.
  stack = await startStack({ env: { CREDENTIAL_CACHE_TTL: '100ms' } });
  vps = await createVps(stack, { type: 'lxc' });
  narrowKey = (await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['services:read', 'vps:read'] })).token;
  ownerKey = stack.owner.key;
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await stack?.close();
});

describe.each<Transport>(['http', 'stdio'])('MCP over %s', (kind) => {
  it("lists the tools each credential can call: a narrow key, an API key, the owner's session, read-only", async () => {
    const names = async (token: string, opts = {}) => (await (await connect(kind, token, opts)).listTools()).tools.map((t) => t.name).sort();
    const [narrow, key, session, readOnly] = await Promise.all([
      names(narrowKey),
      names(ownerKey),
      names(stack.owner.session),
      names(stack.owner.session, { readOnly: true }),
    ]);

    expect(narrow).toEqual(expect.arrayContaining(['list_services', 'get_service', 'list_vps', 'get_vps', 'get_current_credential']));
    expect(narrow).not.toContain('power_vps');
    expect(narrow).not.toContain('wait_for_operation'); // needs operations:read
    expect(key).toEqual(expect.arrayContaining(['power_vps', 'create_order', 'wait_for_operation']));
    // Session-only routes are hidden from API keys, whatever their scopes.
    expect(key).not.toContain('create_api_key');
    expect(key).not.toContain('list_api_keys');
    expect(session).toEqual(expect.arrayContaining(['create_api_key', 'list_api_keys', 'power_vps']));
    expect(narrow.length).toBeLessThan(key.length);
    expect(key.length).toBeLessThan(session.length);
    expect(readOnly).toContain('list_api_keys');
    expect(readOnly).toContain('wait_for_operation');
    expect(readOnly).not.toContain('power_vps');
    const byName = new Map(routes.map((r) => [snakeCase(r.operationId), r]));
    for (const name of readOnly.filter((n) => n !== 'wait_for_operation')) expect(byName.get(name)?.method).toBe('get');
  });

  it('returns the API body as structuredContent and the same JSON as text', async () => {
    const client = await connect(kind, ownerKey);
    const direct = await stack.http.get(`/v1/services/${vps.id}`, { token: ownerKey });
    const result: any = await client.callTool({ name: 'get_service', arguments: { id: vps.id } });
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual(direct.body);
    expect(result.content[0]).toEqual({ type: 'text', text: direct.text });

    const list: any = await client.callTool({ name: 'list_services', arguments: { family: 'vps', limit: 5 } });
    expect(list.structuredContent).toEqual((await stack.http.get('/v1/services?family=vps&limit=5', { token: ownerKey })).body);
  });

  it('answers API errors, including input the API refuses, as isError results with the error envelope', async () => {
    const owner = await connect(kind, ownerKey);
    const missing: any = await owner.callTool({ name: 'get_service', arguments: { id: 'svc_999999' } });
    expect(missing.isError).toBe(true);
    expect(missing.structuredContent.error).toMatchObject({ type: 'invalid_request_error', code: 'not_found' });
    expect(missing.structuredContent.error.request_id).toMatch(/^req_/);
    expect(JSON.parse(missing.content[0].text)).toEqual(missing.structuredContent);

    const invalid: any = await owner.callTool({ name: 'list_services', arguments: { limit: 0 } });
    expect(invalid.isError).toBe(true);
    expect(invalid.structuredContent.error).toMatchObject({ code: 'validation_failed', param: 'limit' });

    const badBody: any = await owner.callTool({ name: 'power_vps', arguments: { id: vps.id, action: 'explode' } });
    expect(badBody.isError).toBe(true);
    expect(badBody.structuredContent.error).toMatchObject({ code: 'validation_failed', param: 'action' });

    // A tool the credential cannot use is not listed; called anyway, the API says why.
    const narrow = await connect(kind, narrowKey);
    const denied: any = await narrow.callTool({ name: 'power_vps', arguments: { id: vps.id, action: 'reboot' } });
    expect(denied.isError).toBe(true);
    expect(denied.structuredContent.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'vps:power' });

    const readOnly = await connect(kind, ownerKey, { readOnly: true });
    const refused: any = await readOnly.callTool({ name: 'power_vps', arguments: { id: vps.id, action: 'reboot' } });
    expect(refused.isError).toBe(true);
    expect(refused.structuredContent.error.code).toBe('read_only');
  });

  it('starts an operation and waits for it with wait_for_operation', async () => {
    const client = await connect(kind, ownerKey);
    const started: any = await client.callTool({ name: 'power_vps', arguments: { id: vps.id, action: 'reboot' } });
    expect(started.isError, JSON.stringify(started)).toBeFalsy();
    expect(started.structuredContent).toMatchObject({ object: 'operation', type: 'vps.power' });
    const progress: number[] = [];
    const done: any = await client.callTool({ name: 'wait_for_operation', arguments: { id: started.structuredContent.id, timeout_seconds: 60 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    });
    expect(done.structuredContent).toMatchObject({ id: started.structuredContent.id, status: 'succeeded', progress: 100 });
    // Progress arrived while waiting (the SDK client handles notifications a tick after they arrive,
    // so one sent just before the result can be dropped on its side: the result carries the end state).
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.every((p, i) => p >= 0 && p <= 100 && (i === 0 || p >= progress[i - 1]))).toBe(true);

    const tooLong: any = await client.callTool({ name: 'wait_for_operation', arguments: { id: started.structuredContent.id, timeout_seconds: 61 } });
    expect(tooLong.isError).toBe(true);
    expect(tooLong.structuredContent.error).toMatchObject({ code: 'validation_failed', param: 'timeout_seconds' });
  });

  it('records every tool call in the audit log with via mcp', async () => {
    const since = new Date().toISOString();
    const client = await connect(kind, ownerKey);
    await client.callTool({ name: 'get_vps', arguments: { id: vps.id } });
    const entries = await auditVia('mcp', since);
    expect(entries.some((e) => e.path === `/v1/vps/${vps.id}` && e.status === 200 && e.via === 'mcp')).toBe(true);
    expect((await auditVia('api', since)).filter((e) => e.path === `/v1/vps/${vps.id}`)).toEqual([]);
  });
});

describe('tool definitions', () => {
  it.each(routes.map((r) => [snakeCase(r.operationId), r] as const))(
    '%s: annotations from the method and marks, description with scope and marks',
    async (name, route) => {
      const tools = await ownerTools();
      const tool = tools.get(name);
      expect(tool, `no tool ${name} for ${route.method.toUpperCase()} ${route.path}`).toBeDefined();
      expect(tool.annotations).toEqual({
        title: route.summary,
        readOnlyHint: route.method === 'get',
        destructiveHint: route.marks.includes('D'),
        idempotentHint: route.method === 'get' || route.marks.includes('I'),
        openWorldHint: false,
      });
      expect(tool.description).toContain(route.summary);
      expect(tool.description).toContain(route.scope ? `Scope: ${route.scope}` : 'Scope: none');
      for (const mark of route.marks) expect(tool.description).toMatch(new RegExp(`Marks: .*\\b${mark} \\(`));
      if (route.returnsSecret) expect(tool.description).toContain('Returns a secret');
      else expect(tool.description).not.toContain('Returns a secret');
      expect(tool.inputSchema.type).toBe('object');
    },
  );
});

let ownerToolsCache: Map<string, any> | null = null;
async function ownerTools(): Promise<Map<string, any>> {
  // The owner's session can call every route, so its list has every tool.
  if (!ownerToolsCache) ownerToolsCache = new Map((await (await connect('http', stack.owner.session)).listTools()).tools.map((t) => [t.name, t]));
  return ownerToolsCache;
}

describe('POST /mcp', () => {
  const initialize = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'curl', version: '1' } },
  };
  const headers = { accept: 'application/json, text/event-stream' };

  it('checks the Bearer credential on every request', async () => {
    const none = await stack.http.post('/mcp', { body: initialize, headers });
    expect(none.status).toBe(401);
    expect(none.body.error).toMatchObject({ type: 'authentication_error', code: 'authentication_required' });

    const key = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['services:read'] });
    const client = await connect('http', key.token);
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    await stack.db('api_keys').where({ id: key.numericId }).update({ revoked_at: new Date() });
    await new Promise((r) => setTimeout(r, Number(stack.config.CREDENTIAL_CACHE_TTL) + 100));
    await expect(client.listTools()).rejects.toThrow(/api_key_revoked/);
  });

  it("records the MCP client as the tool calls' ip, not this server; a forwarding header this server did not sign is ignored", async () => {
    const since = new Date().toISOString();
    const client = new Client({ name: 'cloud-test', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${ownerKey}` } },
      fetch: fetchFrom('127.0.0.2'),
    });
    await client.connect(transport);
    clients.push(client);
    await client.callTool({ name: 'get_vps', arguments: { id: vps.id } });
    const calls = (await auditVia('mcp', since)).filter((e) => e.path === `/v1/vps/${vps.id}`);
    expect(calls.map((e) => e.ip)).toEqual(['127.0.0.2']);

    // Straight to the API (peer 127.0.0.1) with the header: only one this server signed, and not aged, counts.
    const keyring = stack.api.deps.keyring;
    const ipOf = async (headers: Record<string, string>) =>
      (await auditRowOf(stack, await stack.http.get(`/v1/vps/${vps.id}`, { token: ownerKey, headers }))).ip;
    expect(await ipOf(forwardedClientHeader(keyring, '203.0.113.9'))).toBe('203.0.113.9');
    const [, at, signature] = forwardedClientHeader(keyring, '203.0.113.9')['cloud-forwarded-client'].split(';');
    expect(await ipOf({ 'cloud-forwarded-client': `198.51.100.7;${at};${signature}` })).toBe('127.0.0.1');
    expect(await ipOf(forwardedClientHeader(new Keyring(Buffer.alloc(32, 7)), '203.0.113.9'))).toBe('127.0.0.1');
    expect(await ipOf(forwardedClientHeader(keyring, '203.0.113.9', Date.now() - 11 * 60_000))).toBe('127.0.0.1');
    expect(await ipOf(forwardedClientHeader(keyring, '203.0.113.9', Date.now() + 5 * 60_000))).toBe('127.0.0.1');
    expect(await ipOf({ 'cloud-forwarded-client': 'garbage' })).toBe('127.0.0.1');
    expect(await ipOf(forwardedClientHeader(keyring, '2001:db8::7'))).toBe('2001:db8::7');
    // Even a good header counts only on a connection from this host's own address: not from 127.0.0.2.
    const fromElsewhere = await fetchFrom('127.0.0.2')(`${stack.url}/v1/vps/${vps.id}`, {
      headers: { authorization: `Bearer ${ownerKey}`, ...forwardedClientHeader(keyring, '203.0.113.9') },
    });
    expect((await auditRowOf(stack, fromElsewhere)).ip).toBe('127.0.0.2');
  });

  it('answers other methods with 405', async () => {
    const res = await stack.http.get('/mcp', { token: ownerKey });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    expect(res.body.error.code).toBe('method_not_allowed');
  });
});
