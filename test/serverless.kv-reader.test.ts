import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { ServerlessDataPlane } from '../dataplane/serverless/server';
import { PostgresKvStore } from '../providers/simulator/kv.simulator';
import { SqliteEngine } from '../providers/sqlite/sqlite.engine';
import { RawClient } from './helpers/raw-http';
import { startStack, type Stack } from './helpers/stack';
import { call, newTenant, type TestTenant, testPlane } from './serverless.support';

/**
 * The kv plane's own HTTP/1.1 reader (dataplane/serverless/plain-http.ts) in the real data plane
 * (server.ts): the plain kv requests it answers itself, on raw keep-alive sockets and with fetch, and
 * the others, which it hands with the rest of their connection to the plane's HTTP server. Which of
 * the two answered is told by spies on the plane's `kvRequest` (the reader's) and `route` (the
 * HTTP server's).
 */
let stack: Stack;
let plane: ServerlessDataPlane;
let base: string;
let port: number;
let dbRoot: string;
let kv: TestTenant;
let free: TestTenant;
let sql: TestTenant;
let reader: { mock: { calls: unknown[][] } };
let router: { mock: { calls: unknown[][] } };

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  dbRoot = await mkdtemp(path.join(tmpdir(), 'serverless-kv-reader-'));
  plane = testPlane(stack, {
    kv: new PostgresKvStore(stack.db),
    sql: new SqliteEngine({ rootDir: dbRoot, workers: 1, queryTimeoutMs: 2_000 }),
    flushMs: 200,
  });
  reader = vi.spyOn(plane as any, 'kvRequest');
  router = vi.spyOn(plane as any, 'route');
  base = await plane.listen(0);
  port = Number(new URL(base).port);
  kv = await newTenant(stack, base, 'kv');
  free = await newTenant(stack, base, 'kv', { plan: 'serverless-kv-free' });
  sql = await newTenant(stack, base, 'db');
}, 60_000);

afterAll(async () => {
  await plane?.close();
  await stack?.close();
  if (dbRoot) await rm(dbRoot, { recursive: true, force: true });
});

/** How many requests each side has answered so far; `since` gives those after a mark. */
const answered = () => ({ reader: reader.mock.calls.length, node: router.mock.calls.length });
const since = (mark: { reader: number; node: number }) => {
  const now = answered();
  return { reader: now.reader - mark.reader, node: now.node - mark.node };
};

const REQUEST_ID = /^req_[0-9A-Z]{26}$/;
const keyPath = (ns: string, key: string) => `/kv/v1/ns/${ns}/keys/${key}`;

/** A request's bytes: Host, Authorization (a Bearer token unless null), Content-Length for a body or a PUT, and `extra` header lines. */
function request(method: string, target: string, opts: { token?: string | null; body?: Buffer | string; extra?: string; version?: string } = {}): Buffer {
  const token = opts.token === undefined ? kv.token : opts.token;
  const body = opts.body === undefined ? Buffer.alloc(0) : Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body, 'latin1');
  const lines = [`${method} ${target} ${opts.version ?? 'HTTP/1.1'}`, 'Host: 127.0.0.1'];
  if (token !== null) lines.push(`Authorization: Bearer ${token}`);
  if (body.length > 0 || method === 'PUT') lines.push(`Content-Length: ${body.length}`);
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n${opts.extra ?? ''}\r\n`, 'latin1'), body]);
}

/** The `/v1` error envelope, its request_id the answer's X-Request-Id. */
function expectEnvelope(answer: { status: number; headers: Record<string, string>; body: any }, status: number, code: string, param: string | null = null) {
  expect(answer.status).toBe(status);
  expect(answer.headers['content-type']).toBe('application/json');
  expect(answer.headers['cache-control']).toBe('no-store');
  expect(answer.headers['x-request-id']).toMatch(REQUEST_ID);
  expect(Object.keys(answer.body.error).sort()).toEqual(['code', 'message', 'param', 'request_id', 'type']);
  expect(answer.body.error).toMatchObject({ code, param, request_id: answer.headers['x-request-id'] });
  expect(typeof answer.body.error.message).toBe('string');
  expect(typeof answer.body.error.type).toBe('string');
}

describe('kv requests the reader answers itself', () => {
  it('PUT, GET, DELETE, GET of non-UTF-8 bytes on one keep-alive connection', async () => {
    const value = Buffer.from([0x00, 0x01, 0x80, 0xc3, 0x28, 0xfe, 0xff, 0x0d, 0x0a, 0x0d, 0x0a]);
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('PUT', keyPath('reader', 'k1'), { body: value }));
    const put = await c.answer();
    expect(put.status).toBe(204);
    expect(put.headers['x-request-id']).toMatch(REQUEST_ID);
    expect(put.headers['cache-control']).toBe('no-store');
    expect(put.headers).not.toHaveProperty('content-length');
    expect(put.headers).toMatchObject({ connection: 'keep-alive', 'keep-alive': 'timeout=65' });

    await c.write(request('GET', keyPath('reader', 'k1')));
    const got = await c.answer();
    expect(got.status).toBe(200);
    expect(got.body.equals(value)).toBe(true);
    expect(got.headers).toMatchObject({ 'content-type': 'application/octet-stream', 'cache-control': 'no-store', 'content-length': String(value.length) });
    expect(got.headers['x-request-id']).toMatch(REQUEST_ID);
    expect(got.headers['x-request-id']).not.toBe(put.headers['x-request-id']);

    await c.write(request('DELETE', keyPath('reader', 'k1')));
    expect((await c.answer()).status).toBe(204);
    await c.write(request('GET', keyPath('reader', 'k1')));
    const gone = await c.answer();
    expectEnvelope({ ...gone, body: gone.json() }, 404, 'not_found');
    expect(c.closed).toBe(false);
    expect(since(mark)).toEqual({ reader: 4, node: 0 });
    // What the reader stored is what the HTTP server's path reads (fetch: a PUT there first, then a GET).
    const again = await call(`${kv.endpoint}/v1/ns/reader/keys/k2`, { method: 'PUT', token: kv.token, body: value });
    expect(again.status).toBe(204);
    expect((await call(`${kv.endpoint}/v1/ns/reader/keys/k2`, { token: kv.token })).raw.equals(value)).toBe(true);
    c.destroy();
  });

  it('refuses a missing or invalid token with 401 in the /v1 envelope, and the connection goes on', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    const url = keyPath('auth', 'k');
    for (const [token, code] of [
      [null, 'authentication_required'],
      ['kvt_nothing', 'invalid_token'],
      [sql.token, 'invalid_token'],
      [kv.key, 'invalid_token'],
    ] as const) {
      await c.write(request('GET', url, { token }));
      const refused = await c.answer();
      expectEnvelope({ ...refused, body: refused.json() }, 401, code);
      expect(refused.json().error.type).toBe('authentication_error');
      expect(refused.headers.connection).toBe('keep-alive');
    }
    await c.write(request('GET', url, { token: null, extra: 'Authorization: Basic a2V5OnNlY3JldA==\r\n' }));
    const basic = await c.answer();
    expectEnvelope({ ...basic, body: basic.json() }, 401, 'authentication_required');
    // Then a good request on the same connection.
    await c.write(request('PUT', url, { body: 'ok' }));
    expect((await c.answer()).status).toBe(204);
    expect(since(mark)).toEqual({ reader: 6, node: 0 });
    c.destroy();
    // With fetch too (its first request is kv: the reader's).
    const viaFetch = await call(`${kv.endpoint}/v1/ns/auth/keys/k`, { token: null });
    expectEnvelope({ status: viaFetch.status, headers: Object.fromEntries(viaFetch.headers), body: viaFetch.body }, 401, 'authentication_required');
    const wrong = await call(`${kv.endpoint}/v1/ns/auth/keys/k`, { token: 'kvt_nothing' });
    expectEnvelope({ status: wrong.status, headers: Object.fromEntries(wrong.headers), body: wrong.body }, 401, 'invalid_token');
    expect(since(mark).node).toBe(0);
  });

  it('answers an unknown key 404 and a bad namespace 400 validation_failed (param ns)', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('GET', keyPath('errors', 'nothing-here')));
    const missing = await c.answer();
    expectEnvelope({ ...missing, body: missing.json() }, 404, 'not_found');
    await c.write(request('PUT', keyPath('Bad_NS', 'k'), { body: 'v' }));
    const badNs = await c.answer();
    expectEnvelope({ ...badNs, body: badNs.json() }, 400, 'validation_failed', 'ns');
    // A bad key, and a path of the wrong shape, pipelined in one write.
    await c.write(Buffer.concat([request('GET', keyPath('errors', '%zz')), request('GET', '/kv/v1/ns/errors/keys/a/b')]));
    const badKey = await c.answer();
    expectEnvelope({ ...badKey, body: badKey.json() }, 400, 'validation_failed', 'key');
    const shape = await c.answer();
    expectEnvelope({ ...shape, body: shape.json() }, 404, 'not_found');
    expect(since(mark)).toEqual({ reader: 4, node: 0 });
    c.destroy();
  });

  it('takes a value of exactly max_value_bytes (1 MiB on the free plan) and refuses one byte more with 413 payload_too_large', async () => {
    const limit = (await stack.http.get('/v1/serverless/kv', { token: free.key })).body.limits.max_value_bytes;
    expect(limit).toBe(1024 * 1024);
    const mark = answered();
    const c = await RawClient.connect(port);
    const value = Buffer.alloc(limit, 0xab);
    await c.write(request('PUT', keyPath('big', 'max'), { token: free.token, body: value }));
    expect((await c.answer()).status).toBe(204);
    expect(since(mark)).toEqual({ reader: 1, node: 0 });
    await c.write(request('GET', keyPath('big', 'max'), { token: free.token }));
    expect((await c.answer()).body.equals(value)).toBe(true);
    // One byte more: past the reader's body limit too, so the HTTP server reads it and refuses it.
    await c.write(request('PUT', keyPath('big', 'over'), { token: free.token, body: Buffer.alloc(limit + 1, 0xcd) }));
    const over = await c.answer();
    expectEnvelope({ ...over, body: over.json() }, 413, 'payload_too_large');
    expect(since(mark)).toEqual({ reader: 2, node: 1 });
    c.destroy();
    const viaFetch = await call(`${free.endpoint}/v1/ns/big/keys/over`, { method: 'PUT', token: free.token, body: Buffer.alloc(limit + 1) });
    expectEnvelope({ status: viaFetch.status, headers: Object.fromEntries(viaFetch.headers), body: viaFetch.body }, 413, 'payload_too_large');
    expect((await call(`${free.endpoint}/v1/ns/big/keys/over`, { token: free.token })).status).toBe(404);
  });
});

describe('kv requests the reader hands to the HTTP server, with the rest of their connection', () => {
  it('a chunked PUT after a plain request: stored whole, and a later plain request on the connection is answered', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('GET', keyPath('handoff', 'chunked')));
    expect((await c.answer()).status).toBe(404);
    await c.write(
      request('PUT', keyPath('handoff', 'chunked'), { extra: 'Transfer-Encoding: chunked\r\n' }).toString('latin1').replace('Content-Length: 0\r\n', '') +
        '3\r\nabc\r\n2\r\n\x00\xff\r\n0\r\n\r\n',
    );
    const put = await c.answer();
    expect(put.status).toBe(204);
    expect(put.headers['x-request-id']).toMatch(REQUEST_ID);
    await c.write(request('GET', keyPath('handoff', 'chunked')));
    const got = await c.answer();
    expect(got.status).toBe(200);
    expect(got.body.equals(Buffer.from('abc\x00\xff', 'latin1'))).toBe(true);
    expect(since(mark)).toEqual({ reader: 1, node: 2 });
    expect(c.closed).toBe(false);
    c.destroy();
  });

  it('an Expect: 100-continue PUT: 100 Continue, stored, and a later plain request on the connection is answered', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('GET', keyPath('handoff', 'expect')));
    expect((await c.answer()).status).toBe(404);
    const head = request('PUT', keyPath('handoff', 'expect'), { extra: 'Expect: 100-continue\r\n' })
      .toString('latin1')
      .replace('Content-Length: 0', 'Content-Length: 5');
    await c.write(head);
    expect((await c.answer()).status).toBe(100);
    await c.write('later');
    expect((await c.answer()).status).toBe(204);
    await c.write(request('GET', keyPath('handoff', 'expect')));
    const got = await c.answer();
    expect(got.status).toBe(200);
    expect(got.body.toString()).toBe('later');
    expect(since(mark)).toEqual({ reader: 1, node: 2 });
    c.destroy();
  });

  it('HTTP/1.0 requests (no Host): answered, and the connection closed after', async () => {
    const put = await RawClient.connect(port);
    const mark = answered();
    await put.write(Buffer.from(`PUT ${keyPath('old', 'k')} HTTP/1.0\r\nAuthorization: Bearer ${kv.token}\r\nContent-Length: 6\r\n\r\nold\x00\xff!`, 'latin1'));
    expect((await put.answer()).status).toBe(204);
    expect(await put.closedWithin(2_000)).toBe('closed');
    const get = await RawClient.connect(port);
    await get.write(`GET ${keyPath('old', 'k')} HTTP/1.0\r\nAuthorization: Bearer ${kv.token}\r\n\r\n`);
    const got = await get.answer();
    expect(got.status).toBe(200);
    expect(got.headers['x-request-id']).toMatch(REQUEST_ID);
    expect(got.body.equals(Buffer.from('old\x00\xff!', 'latin1'))).toBe(true);
    expect(await get.closedWithin(2_000)).toBe('closed');
    expect(since(mark)).toEqual({ reader: 0, node: 2 });
  });

  it('a kv connection whose next requests are for db and /healthz gets their answers, and kv after them', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('PUT', keyPath('mixed', 'k'), { body: 'kv value' }));
    expect((await c.answer()).status).toBe(204);
    await c.write(request('PUT', '/db/v1/ns/mixed', { token: sql.token }));
    const made = await c.answer();
    expect(made.status, made.body.toString()).toBe(201);
    expect(made.json()).toMatchObject({ object: 'db_namespace', name: 'mixed' });
    await c.write(request('GET', '/healthz', { token: null }));
    const health = await c.answer();
    expect(health.status).toBe(200);
    expect(health.body.toString()).toBe('ok');
    // The kv token is no db token (the plane's own check, on the HTTP server's path).
    await c.write(request('PUT', '/db/v1/ns/mixed', { token: kv.token }));
    const wrong = await c.answer();
    expectEnvelope({ ...wrong, body: wrong.json() }, 401, 'invalid_token');
    await c.write(request('GET', keyPath('mixed', 'k')));
    expect((await c.answer()).body.toString()).toBe('kv value');
    expect(since(mark)).toEqual({ reader: 1, node: 4 });
    c.destroy();
  });
});

describe('targets', () => {
  it('a query string on a kv target: still the reader’s, and the key is the path’s', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('PUT', `${keyPath('query', 'k')}?x=1`, { body: 'with query' }));
    expect((await c.answer()).status).toBe(204);
    await c.write(request('GET', `${keyPath('query', 'k')}?x=1&y=%20`));
    expect((await c.answer()).body.toString()).toBe('with query');
    expect(since(mark)).toEqual({ reader: 2, node: 0 });
    // A query `new URL` would change (a quote): the HTTP server's, same key, same value.
    await c.write(request('GET', `${keyPath('query', 'k')}?q="x"`));
    const quoted = await c.answer();
    expect(quoted.status).toBe(200);
    expect(quoted.body.toString()).toBe('with query');
    expect(since(mark)).toEqual({ reader: 2, node: 1 });
    c.destroy();
    expect((await call(`${kv.endpoint}/v1/ns/query/keys/k?x=1`, { token: kv.token })).text).toBe('with query');
  });

  it('percent-encoded keys of any bytes round-trip (%00%ff is %00%FF), between the reader and fetch', async () => {
    const mark = answered();
    const c = await RawClient.connect(port);
    await c.write(request('PUT', keyPath('pct', '%00%ff'), { body: 'zero-ff' }));
    expect((await c.answer()).status).toBe(204);
    await c.write(request('GET', keyPath('pct', '%00%FF')));
    expect((await c.answer()).body.toString()).toBe('zero-ff');
    await c.write(request('PUT', keyPath('pct', '%2Fslash%20key%E2%82%AC'), { body: 'slash' }));
    expect((await c.answer()).status).toBe(204);
    expect(since(mark)).toEqual({ reader: 3, node: 0 });
    c.destroy();
    expect((await call(`${kv.endpoint}/v1/ns/pct/keys/%00%ff`, { token: kv.token })).text).toBe('zero-ff');
    // A target `new URL` would change (a dot segment): not plain, so the HTTP server's, which resolves it to the same key.
    const d = await RawClient.connect(port);
    await d.write(request('GET', keyPath('pct', 'x/../%2Fslash%20key%E2%82%AC')));
    expect((await d.answer()).body.toString()).toBe('slash');
    expect(since(mark)).toEqual({ reader: 4, node: 1 });
    d.destroy();
    const rows = await stack.db('sim_kv_entries').where({ tenant: kv.handle, ns: 'pct' }).select('key');
    expect(rows.map((r: { key: Buffer }) => r.key.toString('hex')).sort()).toEqual([Buffer.from('/slash key€').toString('hex'), '00ff'].sort());
  });
});

describe('closing the plane', () => {
  it('closes promptly with an idle kv keep-alive connection (and one handed to the HTTP server) open', async () => {
    const other = testPlane(stack, {
      kv: new PostgresKvStore(stack.db),
      reap: false,
    });
    const url = await other.listen(0);
    const connect = () =>
      new Promise<net.Socket>((resolve, reject) => {
        const socket = net.connect(Number(new URL(url).port), '127.0.0.1', () => resolve(socket));
        socket.once('error', reject);
      });
    const answerOf = (socket: net.Socket) =>
      new Promise<string>((resolve) => {
        let text = '';
        const onData = (chunk: Buffer) => {
          text += chunk.toString('latin1');
          if (/\r\n\r\n/.test(text)) {
            socket.off('data', onData);
            resolve(text.split('\r\n')[0]);
          }
        };
        socket.on('data', onData);
      });
    const idle = await connect();
    const closedIdle = new Promise<void>((resolve) => idle.once('close', () => resolve()));
    idle.write(request('GET', keyPath('close', 'none')));
    expect(await answerOf(idle)).toBe('HTTP/1.1 404 Not Found');
    const handed = await connect();
    const closedHanded = new Promise<void>((resolve) => handed.once('close', () => resolve()));
    handed.write(request('GET', keyPath('close', 'none'), { extra: 'Transfer-Encoding: chunked\r\n' }).toString('latin1') + '0\r\n\r\n');
    expect(await answerOf(handed)).toBe('HTTP/1.1 404 Not Found');
    await new Promise((r) => setTimeout(r, 50));
    expect(idle.destroyed || handed.destroyed).toBe(false);
    const started = Date.now();
    await other.close();
    expect(Date.now() - started).toBeLessThan(2_000);
    await Promise.race([Promise.all([closedIdle, closedHanded]), new Promise((r) => setTimeout(r, 2_000))]);
    expect(idle.destroyed || idle.readableEnded).toBe(true);
    expect(handed.destroyed || handed.readableEnded).toBe(true);
    idle.destroy();
    handed.destroy();
  });

  it('closes promptly when a kv answer is still going out to a slow client at close, once that answer is out', async () => {
    const other = testPlane(stack, {
      kv: new PostgresKvStore(stack.db),
      reap: false,
    });
    const otherReader = vi.spyOn(other as any, 'kvRequest');
    const url = await other.listen(0);
    // 16 MiB: more than the sockets' buffers hold, so the answer waits for the client to read.
    const big = Buffer.alloc(16 * 1024 * 1024, 0x5a);
    expect((await call(`${url}/kv/v1/ns/close/keys/big`, { method: 'PUT', token: kv.token, body: big })).status).toBe(204);
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect(Number(new URL(url).port), '127.0.0.1', () => resolve(s));
      s.once('error', reject);
    });
    socket.on('error', () => undefined);
    let closing: Promise<void> | null = null;
    try {
      socket.pause();
      socket.write(request('GET', keyPath('close', 'big')));
      // The answer has begun to come (the paused socket buffers a little): the rest waits for the client to read.
      for (let waited = 0; socket.readableLength === 0 && waited < 10_000; waited += 10) await new Promise((r) => setTimeout(r, 10));
      expect(socket.readableLength).toBeGreaterThan(0);
      expect(otherReader).toHaveBeenCalledTimes(1);
      closing = other.close();
      let received = 0;
      socket.on('data', (chunk: Buffer) => (received += chunk.length));
      socket.resume();
      const outcome = await Promise.race([closing.then(() => 'closed'), new Promise((r) => setTimeout(() => r('still closing after 3 s'), 3_000))]);
      expect(received).toBeGreaterThan(big.length);
      expect(outcome).toBe('closed');
    } finally {
      socket.destroy();
      await (closing ?? other.close());
    }
  });
});
