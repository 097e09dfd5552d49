import { fork } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isKvRequestHead, KvHelperPool } from '../dataplane/serverless/processes';
import type { ServerlessDataPlane } from '../dataplane/serverless/server';
import { PostgresKvStore } from '../providers/simulator/kv.simulator';
import { SqliteEngine } from '../providers/sqlite/sqlite.engine';
import { startStack, type Stack } from './helpers/stack';
import { eventually, newTenant, type TestTenant, testPlane } from './serverless.support';

/**
 * The kv primitive on two processes (SERVERLESS_KV_PROCESSES=2, dataplane/serverless/processes.ts):
 * the data plane of this test process and a real kv helper (dataplane/serverless/main.ts
 * --kv-helper, on the kv fallback store in this stack's database). Connections whose first request
 * is for kv go to the helper and to the main process in turn (the helper first); the helper passes
 * requests for db and functions (whose backends are the main process's) back to the main process.
 */
let stack: Stack;
let plane: ServerlessDataPlane;
let pool: KvHelperPool;
let base: string;
let dbRoot: string;
let kv: TestTenant;
let sql: TestTenant;

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  dbRoot = await mkdtemp(path.join(tmpdir(), 'serverless-processes-'));
  plane = testPlane(stack, {
    kv: new PostgresKvStore(stack.db),
    sql: new SqliteEngine({ rootDir: dbRoot, workers: 1, queryTimeoutMs: 2_000 }),
    flushMs: 200,
  });
  const helperEnv = {
    ...process.env,
    DATABASE_URL: stack.config.DATABASE_URL,
    ...(stack.config.CLOUD_MASTER_KEY ? { CLOUD_MASTER_KEY: stack.config.CLOUD_MASTER_KEY } : {}),
    KV_BACKEND: 'simulator',
    LOG_LEVEL: 'silent',
    NODE_ENV: 'test',
  };
  base = await plane.listen(0, '127.0.0.1', {
    kvHelpers: (forwardTo) =>
      (pool = new KvHelperPool({
        count: 1,
        restartMs: 200,
        spawn: () =>
          fork(path.resolve(__dirname, '../dataplane/serverless/main.ts'), ['--kv-helper'], {
            env: { ...helperEnv, SERVERLESS_FORWARD_TO: forwardTo },
            execArgv: ['--import', 'tsx'],
            stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
          }),
      })),
  });
  await plane.helpersReady();
  kv = await newTenant(stack, base, 'kv');
  sql = await newTenant(stack, base, 'db');
}, 90_000);

afterAll(async () => {
  await plane?.close();
  await stack?.close();
  if (dbRoot) await rm(dbRoot, { recursive: true, force: true });
});

/** One keep-alive connection: every request of a `Connection` goes over the same socket. */
class Connection {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  /** The socket of the last request. */
  socket: net.Socket | null = null;

  request(
    method: string,
    url: string,
    opts: { token?: string; body?: string } = {},
  ): Promise<{ status: number; headers: http.IncomingHttpHeaders; text: string }> {
    return new Promise((resolve, reject) => {
      const req = http.request(url, { method, agent: this.agent, headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {} }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, text: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('socket', (socket) => (this.socket = socket));
      req.on('error', reject);
      req.end(opts.body);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

describe('the kv primitive on several processes', () => {
  it('knows a kv connection by its first request line', () => {
    expect(isKvRequestHead(Buffer.from('GET /kv/v1/ns/a/keys/b HTTP/1.1\r\n'))).toBe(true);
    expect(isKvRequestHead(Buffer.from('PUT /kv/'))).toBe(true);
    expect(isKvRequestHead(Buffer.from('GET /kvx/v1 HTTP/1.1\r\n'))).toBe(false);
    expect(isKvRequestHead(Buffer.from('GET /functions/run/x/kv/ HTTP/1.1\r\n'))).toBe(false);
    expect(isKvRequestHead(Buffer.from('GET http://h/kv/ HTTP/1.1\r\n'))).toBe(false);
    expect(isKvRequestHead(Buffer.from('GET /k'))).toBe(false);
    expect(isKvRequestHead(Buffer.from(''))).toBe(false);
  });

  it('answers a malformed request as the HTTP server does (400), through the front listener', async () => {
    const { port } = new URL(base);
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => socket.write('NOT HTTP AT ALL\r\n\r\n'));
      let text = '';
      socket.on('data', (c: Buffer) => (text += c.toString('latin1')));
      socket.on('close', () => resolve(text));
      socket.on('error', reject);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
  });

  it('closes at once with idle keep-alive connections and connections that sent nothing', async () => {
    const other = testPlane(stack, {
      reap: false,
    });
    const url = await other.listen(0, '127.0.0.1', { kvHelpers: () => new KvHelperPool({ count: 0, spawn: () => fork(__filename) }) });
    const idle = new Connection();
    try {
      expect((await idle.request('GET', `${url}/healthz`)).status).toBe(200);
      const silent = net.connect(Number(new URL(url).port), '127.0.0.1');
      await new Promise((resolve) => silent.once('connect', resolve));
      const started = Date.now();
      await other.close();
      expect(Date.now() - started).toBeLessThan(3_000);
      await new Promise<void>((resolve) => (silent.destroyed ? resolve() : silent.once('close', () => resolve())));
      expect(idle.socket!.destroyed || idle.socket!.readableEnded).toBe(true);
    } finally {
      idle.close();
    }
  });

  it('serves kv in the helper and the main process alike, passes other primitives on, and keeps serving when the helper dies', async () => {
    const key = `${kv.endpoint}/v1/ns/app/keys/shared`;
    // The helper's turn comes first: this connection is the helper's.
    const inHelper = new Connection();
    const inMain = new Connection();
    try {
      const put = await inHelper.request('PUT', key, { token: kv.token, body: 'from the helper' });
      expect(put.status, put.text).toBe(204);
      expect(put.headers['x-request-id']).toMatch(/^req_/);
      // The main process reads what the helper wrote (one store), with the same token.
      expect(await inMain.request('GET', key, { token: kv.token })).toMatchObject({ status: 200, text: 'from the helper' });
      expect((await inMain.request('GET', `${kv.endpoint}/v1/ns/app/keys/none`, { token: kv.token })).status).toBe(404);
      // The helper's refusals are the plane's: the envelope, the request id.
      const refused = await inHelper.request('GET', key, { token: 'kvt_nothing' });
      expect(refused.status).toBe(401);
      expect(JSON.parse(refused.text).error).toMatchObject({ code: 'invalid_token', request_id: refused.headers['x-request-id'] });
      // Other primitives on the helper's connection: passed on to the main process, body and answer.
      const made = await inHelper.request('PUT', `${sql.endpoint}/v1/ns/main`, { token: sql.token });
      expect(made.status, made.text).toBe(201);
      const queried = await inHelper.request('POST', `${sql.endpoint}/v1/ns/main/query`, {
        token: sql.token,
        body: JSON.stringify({ sql: 'select 40 + 2 as n' }),
      });
      expect(queried.status, queried.text).toBe(200);
      expect(JSON.parse(queried.text).results[0].rows).toEqual([{ n: 42 }]);
      expect(queried.headers['x-request-id']).toMatch(/^req_/);
      expect(queried.headers.connection).toBe('keep-alive');
      // (This test's main process has no functions runtime: its answer, passed back.)
      const fn = await inHelper.request('GET', `${base}/functions/run/nobody/hello`);
      expect(fn.status).toBe(503);
      expect(JSON.parse(fn.text).error).toMatchObject({ code: 'backend_unavailable', request_id: fn.headers['x-request-id'] });
      // Usage counts from both processes add up (2 writes, 3 reads: the refused one counts nothing).
      await plane.flush();
      const usage = await eventually(
        async () => (await stack.http.get('/v1/serverless/kv/usage', { token: kv.key })).body,
        (u) => u.writes === 1 && u.reads === 2,
        5_000,
      );
      expect(usage).toMatchObject({ writes: 1, reads: 2 });

      const [helperPid] = plane.helperPids();
      process.kill(helperPid, 'SIGKILL');
      // The helper's connection goes with it; the main process's stays, and takes new kv connections.
      const helperSocket = inHelper.socket!;
      const mainSocket = inMain.socket!;
      await new Promise<void>((resolve) => (helperSocket.destroyed ? resolve() : helperSocket.once('close', () => resolve())));
      expect(mainSocket.destroyed).toBe(false);
      expect((await inMain.request('GET', key, { token: kv.token })).status).toBe(200);
      expect(inMain.socket).toBe(mainSocket);
      for (let i = 0; i < 3; i++) {
        const fresh = new Connection();
        try {
          expect((await fresh.request('GET', key, { token: kv.token })).status).toBe(200);
        } finally {
          fresh.close();
        }
      }
      // Another helper is started.
      const restarted = await eventually(
        async () => plane.helperPids(),
        (pids) => pids.length === 1 && pids[0] !== helperPid,
        20_000,
      );
      expect(restarted[0]).not.toBe(helperPid);
      await pool.ready();
      for (let i = 0; i < 2; i++) {
        const fresh = new Connection();
        try {
          expect(await fresh.request('GET', key, { token: kv.token })).toMatchObject({ status: 200, text: 'from the helper' });
        } finally {
          fresh.close();
        }
      }
    } finally {
      inHelper.close();
      inMain.close();
    }
  }, 60_000);
});
