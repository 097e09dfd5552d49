import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DeliveryClient, type WebhookPost } from '../infra/webhook-delivery-client';

/**
 * The worker's HTTP client for deliveries (issue 10): one deadline for the whole response, headers
 * and body, so a receiver that trickles bytes cannot hold a worker socket; a bounded number of
 * sockets per worker and per endpoint; keep-alive connections per endpoint and checked address.
 * Real servers on loopback, no mocks.
 */
interface TestServer {
  url: string;
  connections: number;
  open: number;
  maxOpen: number;
  closedAt: number[];
  requests: number;
  close(): Promise<void>;
}

const servers: TestServer[] = [];
const clients: DeliveryClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});

async function server(handler: (req: http.IncomingMessage, res: http.ServerResponse, n: number) => void): Promise<TestServer> {
  const state = { connections: 0, open: 0, maxOpen: 0, closedAt: [] as number[], requests: 0 } as TestServer;
  const s = http.createServer((req, res) => {
    state.requests++;
    req.resume();
    req.on('end', () => handler(req, res, state.requests));
  });
  s.on('connection', (socket: Socket) => {
    state.connections++;
    state.open++;
    state.maxOpen = Math.max(state.maxOpen, state.open);
    socket.on('close', () => {
      state.open--;
      state.closedAt.push(Date.now());
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  state.url = `http://127.0.0.1:${(s.address() as AddressInfo).port}/hook`;
  state.close = () =>
    new Promise<void>((r) => {
      s.close(() => r());
      s.closeAllConnections();
    });
  servers.push(state);
  return state;
}

function client(options: ConstructorParameters<typeof DeliveryClient>[0]): DeliveryClient {
  const c = new DeliveryClient(options);
  clients.push(c);
  return c;
}

const post = (url: string, extra: Partial<WebhookPost> = {}): WebhookPost => ({
  url,
  body: '{"id":"evt_1"}',
  headers: { 'Content-Type': 'application/json' },
  timeoutMs: 600,
  policy: { allowInsecure: true },
  endpoint: 'whk_1',
  ...extra,
});

describe('whole-response deadline', () => {
  it('a receiver that answers 200 and then trickles its body loses the socket at the deadline', async () => {
    const trickle = await server((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      const drip = setInterval(() => res.write('.'), 50);
      res.on('close', () => clearInterval(drip));
    });
    const started = Date.now();
    const result = await client({ maxSockets: 8, perEndpoint: 4 }).post(post(trickle.url));
    const took = Date.now() - started;
    expect(result).toMatchObject({ delivered: false, status: null, sent: true });
    expect(result.error).toBe('timed out after 600 ms before the response ended');
    expect(took).toBeGreaterThanOrEqual(590);
    expect(took).toBeLessThan(1_500);
    // The worker closed its end: the receiver saw the connection go at the deadline, not later.
    await new Promise((r) => setTimeout(r, 100));
    expect(trickle.open).toBe(0);
    expect(trickle.closedAt[0] - started).toBeLessThan(1_500);
  });

  it('a receiver that never sends its headers loses the socket at the deadline', async () => {
    const silent = await server(() => undefined);
    const started = Date.now();
    const result = await client({ maxSockets: 8, perEndpoint: 4 }).post(post(silent.url));
    expect(result.error).toBe('timed out after 600 ms without a response');
    await new Promise((r) => setTimeout(r, 100));
    expect(silent.open).toBe(0);
    expect(silent.closedAt[0] - started).toBeLessThan(1_500);
  });

  it('a complete 2xx answer within the deadline is delivered, and its body is read to the end', async () => {
    const ok = await server((_req, res) => res.writeHead(204).end());
    expect(await client({ maxSockets: 8, perEndpoint: 4 }).post(post(ok.url))).toMatchObject({
      delivered: true,
      status: 204,
      error: null,
      address: '127.0.0.1',
    });
  });
});

describe('bounded sockets', () => {
  it('never opens more than maxSockets sockets in all, nor more than perEndpoint to one endpoint', async () => {
    const hold = (_req: http.IncomingMessage, res: http.ServerResponse) => setTimeout(() => res.writeHead(200).end('ok'), 100);
    const a = await server(hold);
    const b = await server(hold);
    const c = client({ maxSockets: 4, perEndpoint: 3 });
    let peak = 0;
    const sample = setInterval(() => (peak = Math.max(peak, c.openSockets, a.open + b.open)), 5);
    const results = await Promise.all([
      ...Array.from({ length: 12 }, () => c.post(post(a.url, { endpoint: 'whk_a', timeoutMs: 5_000 }))),
      ...Array.from({ length: 12 }, () => c.post(post(b.url, { endpoint: 'whk_b', timeoutMs: 5_000 }))),
    ]);
    clearInterval(sample);
    expect(results.every((r) => r.delivered)).toBe(true);
    expect(a.requests + b.requests).toBe(24);
    expect(a.maxOpen).toBeLessThanOrEqual(3);
    expect(b.maxOpen).toBeLessThanOrEqual(3);
    expect(a.maxOpen + b.maxOpen).toBeGreaterThanOrEqual(4);
    expect(peak).toBeLessThanOrEqual(4);
  });

  it('closes an idle socket of another endpoint when the budget is spent', async () => {
    const a = await server((_req, res) => res.writeHead(200).end());
    const b = await server((_req, res) => setTimeout(() => res.writeHead(200).end(), 50));
    const c = client({ maxSockets: 2, perEndpoint: 2, idleMs: 60_000 });
    await Promise.all([c.post(post(a.url, { endpoint: 'whk_a' })), c.post(post(a.url, { endpoint: 'whk_a' }))]);
    expect(c.openSockets).toBe(2); // both idle, kept alive for endpoint a
    const started = Date.now();
    const results = await Promise.all([c.post(post(b.url, { endpoint: 'whk_b' })), c.post(post(b.url, { endpoint: 'whk_b' }))]);
    expect(results.every((r) => r.delivered)).toBe(true);
    expect(Date.now() - started).toBeLessThan(500);
    expect(c.openSockets).toBeLessThanOrEqual(2);
    await new Promise((r) => setTimeout(r, 50));
    expect(a.open).toBe(0);
  });

  it('an attempt that finds no free socket within its deadline is not sent, and says so', async () => {
    const stuck = await server(() => undefined);
    const c = client({ maxSockets: 1, perEndpoint: 1 });
    const [first, second] = await Promise.all([c.post(post(stuck.url)), c.post(post(stuck.url))]);
    expect(first.error).toBe('timed out after 600 ms without a response');
    expect(second).toMatchObject({ delivered: false, sent: false });
    expect(second.error).toMatch(/^not sent: no connection to this endpoint became free within 600 ms/);
    expect(stuck.requests).toBe(1);
  });
});

describe('keep-alive', () => {
  it('reuses one connection per endpoint for attempts one after another; endpoints never share one', async () => {
    const ok = await server((_req, res) => res.writeHead(200).end('ok'));
    const c = client({ maxSockets: 8, perEndpoint: 4 });
    for (let i = 0; i < 10; i++) expect((await c.post(post(ok.url, { endpoint: 'whk_1' }))).delivered).toBe(true);
    expect(ok.connections).toBe(1);
    await c.post(post(ok.url, { endpoint: 'whk_2' }));
    expect(ok.connections).toBe(2);
  });

  it('retries once on a fresh connection when a kept-alive one was closed by the receiver', async () => {
    const flaky = await server((req, res, n) => {
      if (n === 2)
        req.socket.destroy(); // the second request on the kept-alive socket: hang up
      else res.writeHead(200).end();
    });
    const c = client({ maxSockets: 8, perEndpoint: 4 });
    expect((await c.post(post(flaky.url))).delivered).toBe(true);
    const again = await c.post(post(flaky.url));
    expect(again).toMatchObject({ delivered: true, status: 200 });
    expect(flaky.requests).toBe(3);
    expect(flaky.connections).toBe(2);
  });

  it('closes idle connections after idleMs', async () => {
    const ok = await server((_req, res) => res.writeHead(200).end());
    const c = client({ maxSockets: 8, perEndpoint: 4, idleMs: 200 });
    await c.post(post(ok.url));
    expect(ok.open).toBe(1);
    await new Promise((r) => setTimeout(r, 500));
    expect(ok.open).toBe(0);
    expect(c.openSockets).toBe(0);
  });
});
