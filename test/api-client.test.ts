import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiClient, NetworkError } from '../client/api-client';
import { waitForOperation } from '../client/operations';

/**
 * The client the CLI and the MCP server share, against a real HTTP server that misbehaves on
 * purpose: a connection dropped mid-request, a 429 with Retry-After, an operation that asks to be
 * polled less often. What the stack cannot be made to do on demand.
 */
interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  at: number;
}

let server: Server;
let baseUrl: string;
let seen: Seen[] = [];
let script: Array<(req: IncomingMessage, res: import('node:http').ServerResponse) => void> = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, at: Date.now() });
    req.resume();
    const next = script.shift();
    if (next) return next(req, res);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise((resolve) => server.close(resolve)));

function reset(steps: typeof script) {
  seen = [];
  script = steps;
}

const json =
  (status: number, body: unknown, headers: Record<string, string> = {}) =>
  (_req: IncomingMessage, res: import('node:http').ServerResponse) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(body));
const dropConnection = (req: IncomingMessage) => req.socket.destroy();

describe('ApiClient', () => {
  it('names its channel and sends a generated Idempotency-Key on mutations only', async () => {
    reset([]);
    const api = new ApiClient({ baseUrl, token: 'cloud_live_x', channel: 'cli' });
    await api.request({ method: 'GET', url: '/v1/services' });
    await api.request({ method: 'POST', url: '/v1/orders', body: {} });
    await api.request({ method: 'POST', url: '/v1/orders', body: {} });
    expect(seen.map((s) => s.headers['cloud-channel'])).toEqual(['cli', 'cli', 'cli']);
    expect(seen[0].headers.authorization).toBe('Bearer cloud_live_x');
    expect(seen[0].headers['idempotency-key']).toBeUndefined();
    expect(seen[1].headers['idempotency-key']).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen[2].headers['idempotency-key']).not.toBe(seen[1].headers['idempotency-key']);
  });

  it('sends a mutation again after a dropped connection with the same Idempotency-Key', async () => {
    reset([dropConnection, json(202, { object: 'operation', id: 'op_1' })]);
    const api = new ApiClient({ baseUrl, token: 't', channel: 'mcp' });
    const res = await api.request({ method: 'POST', url: '/v1/vps/svc_1/power', body: { action: 'reboot' } });
    expect(res.status).toBe(202);
    expect(seen).toHaveLength(2);
    expect(seen[1].headers['idempotency-key']).toBe(seen[0].headers['idempotency-key']);
    expect(seen[1].headers['cloud-channel']).toBe('mcp');
  });

  it('does not send a secret-returning call again once it may have run (it is never replayed)', async () => {
    reset([dropConnection]);
    const api = new ApiClient({ baseUrl, token: 't', channel: 'cli' });
    await expect(api.request({ method: 'POST', url: '/v1/webhooks', body: {}, replaySafe: false })).rejects.toBeInstanceOf(NetworkError);
    expect(seen).toHaveLength(1);
  });

  it('waits out a short Retry-After on 429', async () => {
    reset([
      json(429, { error: { type: 'rate_limit_error', code: 'rate_limited', message: 'slow down', param: null, request_id: 'req_1' } }, { 'retry-after': '1' }),
    ]);
    const api = new ApiClient({ baseUrl, token: 't', channel: 'cli' });
    const res = await api.request({ method: 'GET', url: '/v1/services' });
    expect(res.status).toBe(200);
    expect(seen).toHaveLength(2);
    expect(seen[1].at - seen[0].at).toBeGreaterThanOrEqual(950);
  });

  it('reports an API that does not answer as a NetworkError after its retries', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const api = new ApiClient({ baseUrl: `http://127.0.0.1:${port}`, token: 't', channel: 'cli', retries: 1 });
    await expect(api.request({ method: 'GET', url: '/v1/services' })).rejects.toMatchObject({ causeCode: 'ECONNREFUSED' });
  });
});

describe('waitForOperation', () => {
  const op = (status: string, progress: number | null) => ({ object: 'operation', id: 'op_1', type: 'vps.power', status, progress });

  it('polls until the end, honouring Retry-After between polls', async () => {
    reset([json(200, op('running', 10), { 'retry-after': '1' }), json(200, op('running', 60)), json(200, op('succeeded', 100))]);
    const states: Array<number | null> = [];
    const api = new ApiClient({ baseUrl, token: 't', channel: 'cli' });
    const outcome = await waitForOperation(api, 'op_1', { timeoutMs: 10_000, intervalMs: 50, onState: (o) => states.push(o.progress) });
    expect(outcome.kind).toBe('done');
    expect(states).toEqual([10, 60, 100]);
    expect(seen.map((s) => s.url)).toEqual(['/v1/operations/op_1', '/v1/operations/op_1', '/v1/operations/op_1']);
    expect(seen[1].at - seen[0].at).toBeGreaterThanOrEqual(950);
    expect(seen[2].at - seen[1].at).toBeLessThan(900);
  });

  it('gives up at the timeout with the last state, and stops at an error answer', async () => {
    reset(Array.from({ length: 50 }, () => json(200, op('running', 5))));
    const api = new ApiClient({ baseUrl, token: 't', channel: 'cli' });
    const started = Date.now();
    const outcome = await waitForOperation(api, 'op_1', { timeoutMs: 400, intervalMs: 100 });
    expect(outcome).toMatchObject({ kind: 'timeout', operation: { status: 'running' } });
    expect(Date.now() - started).toBeLessThan(1500);

    reset([json(404, { error: { type: 'invalid_request_error', code: 'not_found', message: 'No such operation.', param: null, request_id: 'req_2' } })]);
    const gone = await waitForOperation(api, 'op_1', { timeoutMs: 5_000 });
    expect(gone.kind).toBe('error');
  });
});
