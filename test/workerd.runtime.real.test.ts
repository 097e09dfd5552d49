import { spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FunctionMissingError, ScriptInvalidError } from '../providers/functions.provider';
import { WorkerdRuntime } from '../providers/workerd/runtime';

/**
 * The functions runtime for real: workerd 1.20261117.1 (npm) under bubblewrap, one sandboxed process
 * per tenant, driven through a small Node front server that calls `invoke` the way the data plane
 * does (`/t/<tenant>/<name>/<rest>`). Also measures invocation latency through the runtime against
 * the workerd socket directly, and deploy time (printed; docs/benchmarks.md takes them).
 */
const root = mkdtempSync(path.join(tmpdir(), 'workerd-runtime-'));
chmodSync(root, 0o711); // the sandboxes (uid 65534) pass through it to their deploy directories
const dataDir = path.join(root, 'functions');
const TIMEOUT_MS = 2_000;

const hello = (v: number) => `export default {
  async fetch(request) {
    const url = new URL(request.url);
    const body = request.method === 'POST' ? await request.text() : '';
    return Response.json({ v: ${v}, path: url.pathname, query: url.search, method: request.method, body });
  },
};`;
const ECHO_HEADERS = 'export default { fetch(request) { return Response.json(Object.fromEntries(request.headers)); } };';
const THROWS = "export default { fetch() { throw new Error('boom'); } };";
// A deliberate 500, with the router's marker header forged: neither counts as an error.
const DELIBERATE_500 = "export default { fetch() { return new Response('nope', { status: 500, headers: { 'cf-fn-status': 'x threw' } }); } };";
const HOG = 'const held = []; export default { fetch() { for (;;) held.push(new Array(1 << 20).fill(held.length)); } };';
const SLEEPS = 'export default { async fetch() { await new Promise((r) => setTimeout(r, 60000)); return new Response("late"); } };';
const LOOPS = 'export default { fetch() { for (;;) {} } };';
const PING = "export default { fetch() { return new Response('pong'); } };";
const egress = (port: number) => `export default {
  async fetch() {
    try {
      const r = await fetch('http://127.0.0.1:${port}/steal');
      return new Response('reached ' + r.status);
    } catch (err) {
      return new Response('blocked: ' + err.message);
    }
  },
};`;

let runtime: WorkerdRuntime;
let front: http.Server;
let frontPort: number;
const results = new Map<string, { status: number; errored: boolean; ms: number }>();
const seenPids = new Set<number>();
const deployMs: number[] = [];
const events: string[] = [];
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
let nextId = 0;

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  id: string;
}

function send(port: number, target: string, opts: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Answer> {
  const id = String(++nextId);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: '127.0.0.1', port, path: target, method: opts.method ?? 'GET', agent, headers: { 'x-test-id': id, ...opts.headers } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, id }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.end(opts.body);
  });
}

const call = (tenant: string, name: string, rest = '/', opts?: Parameters<typeof send>[2]) => send(frontPort, `/t/${tenant}/${name}${rest}`, opts);

async function deploy(tenant: string, name: string, code: string): Promise<void> {
  const started = performance.now();
  await runtime.deploy(tenant, name, code);
  deployMs.push(performance.now() - started);
  rememberPids(tenant);
}

function rememberPids(tenant: string) {
  const p = runtime.inspect(tenant);
  if (p?.workerdPid) seenPids.add(p.workerdPid);
  if (p) seenPids.add(p.bwrapPid);
}

const alive = (pid: number) => existsSync(`/proc/${pid}`) && !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The processes whose command line names `dir` (bwrap's binds do). */
function processesUsing(dir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(dir)) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

beforeAll(async () => {
  runtime = new WorkerdRuntime({ dataDir, timeoutMs: TIMEOUT_MS, onEvent: (tenant, message) => events.push(`${tenant}: ${message}`) });
  front = http.createServer((req, res) => {
    const [pathname, query] = (req.url ?? '/').split(/\?(.*)/s, 2);
    const [, t, tenant, name, ...rest] = pathname.split('/');
    if (t !== 't' || !tenant || !name) return void res.writeHead(400).end();
    const target = `/${rest.join('/')}${query !== undefined ? `?${query}` : ''}`;
    runtime.invoke(tenant, name, target, req, res).then(
      (result) => results.set(String(req.headers['x-test-id']), result),
      (err) => {
        res.writeHead(err instanceof FunctionMissingError ? 404 : 500).end(err instanceof FunctionMissingError ? 'missing' : String(err));
      },
    );
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
  frontPort = (front.address() as import('node:net').AddressInfo).port;
});

afterAll(async () => {
  agent.destroy();
  await runtime?.close();
  await new Promise((resolve) => front?.close(resolve));
  rmSync(root, { recursive: true, force: true });
});

describe('workerd functions runtime (bwrap sandbox)', () => {
  it('deploys a function and invokes it: body, status, path and query reach it', async () => {
    await deploy('t1', 'hello', hello(1));
    expect(runtime.has('t1', 'hello')).toBe(true);
    expect(runtime.has('t1', 'other')).toBe(false);
    const get = await call('t1', 'hello', '/a/b?x=1&y=two');
    expect(get.status).toBe(200);
    expect(JSON.parse(get.body)).toEqual({ v: 1, path: '/a/b', query: '?x=1&y=two', method: 'GET', body: '' });
    expect(results.get(get.id)).toMatchObject({ status: 200, errored: false });
    expect(results.get(get.id)!.ms).toBeGreaterThan(0);
    const post = await call('t1', 'hello', '/', { method: 'POST', body: 'x'.repeat(100_000), headers: { 'content-type': 'text/plain' } });
    expect(JSON.parse(post.body)).toMatchObject({ method: 'POST', body: 'x'.repeat(100_000) });
  });

  it('serves a second function of the same tenant from the same process', async () => {
    await deploy('t1', 'headers', ECHO_HEADERS);
    expect((await call('t1', 'hello')).status).toBe(200);
    expect((await call('t1', 'headers')).status).toBe(200);
  });

  it('never passes the authorization header (nor the routing header) to the function', async () => {
    const answer = await call('t1', 'headers', '/', { headers: { authorization: 'Bearer tenant-secret', 'x-custom': 'kept', 'cf-fn-name': 'hello' } });
    const seen = JSON.parse(answer.body);
    expect(seen['x-custom']).toBe('kept');
    expect(seen.authorization).toBeUndefined();
    expect(seen['cf-fn-name']).toBeUndefined();
    expect(JSON.stringify(seen)).not.toContain('tenant-secret');
  });

  it('replaces the code under load without failing a request (blue/green)', async () => {
    const versions: number[] = [];
    const afterDeploy: number[] = [];
    let failures = 0;
    let deployed = false;
    const worker = async () => {
      while (!deployed || versions.length < 600) {
        const startedAfter = deployed;
        try {
          const answer = await call('t1', 'hello');
          if (answer.status !== 200) failures++;
          else {
            const { v } = JSON.parse(answer.body);
            versions.push(v);
            if (startedAfter) afterDeploy.push(v);
          }
        } catch {
          failures++;
        }
      }
    };
    const workers = Array.from({ length: 12 }, worker);
    await sleep(150);
    await deploy('t1', 'hello', hello(2));
    deployed = true;
    await Promise.all(workers);
    expect(failures).toBe(0);
    expect(versions.length).toBeGreaterThanOrEqual(600);
    expect(versions).toContain(1);
    expect(afterDeploy.length).toBeGreaterThan(0);
    expect(new Set(afterDeploy)).toEqual(new Set([2]));
    console.log(
      `blue/green: ${versions.length} requests, 0 failed, ${versions.filter((v) => v === 1).length} answered by v1, ${versions.filter((v) => v === 2).length} by v2`,
    );
  });

  it('refuses a module with a syntax error with the loader’s message; the old code serves on', async () => {
    const before = runtime.inspect('t1');
    const err = await runtime.deploy('t1', 'hello', 'export default { fetch( {').catch((e) => e);
    expect(err).toBeInstanceOf(ScriptInvalidError);
    expect(err.message).toMatch(/^hello: Uncaught SyntaxError/);
    expect(err.message).not.toContain(root);
    expect(err.message).not.toContain('/app/');
    const topLevel = await runtime.deploy('t1', 'broken', 'throw new Error("at load");').catch((e) => e);
    expect(topLevel).toBeInstanceOf(ScriptInvalidError);
    expect(topLevel.message).toContain('at load');
    expect(runtime.has('t1', 'broken')).toBe(false);
    expect(runtime.inspect('t1')).toEqual(before);
    expect(JSON.parse((await call('t1', 'hello')).body).v).toBe(2);
  });

  it('answers 500 for an uncaught exception (errored) and passes a deliberate 500 through (not errored)', async () => {
    await deploy('t1', 'throws', THROWS);
    await deploy('t1', 'deliberate', DELIBERATE_500);
    const thrown = await call('t1', 'throws');
    expect(thrown.status).toBe(500);
    expect(thrown.body).not.toContain('boom');
    expect(thrown.headers['cf-fn-status']).toBeUndefined();
    expect(results.get(thrown.id)).toMatchObject({ status: 500, errored: true });
    const deliberate = await call('t1', 'deliberate');
    expect(deliberate.status).toBe(500);
    expect(deliberate.body).toBe('nope');
    expect(deliberate.headers['cf-fn-status']).toBeUndefined();
    expect(results.get(deliberate.id)).toMatchObject({ status: 500, errored: false });
  });

  it('removes a function: invoke throws FunctionMissingError, the others serve on', async () => {
    expect(await runtime.remove('t1', 'throws')).toBe(true);
    expect(await runtime.remove('t1', 'throws')).toBe(false);
    expect(runtime.has('t1', 'throws')).toBe(false);
    await expect(runtime.invoke('t1', 'throws', '/', {} as any, {} as any)).rejects.toBeInstanceOf(FunctionMissingError);
    await expect(runtime.invoke('nobody', 'hello', '/', {} as any, {} as any)).rejects.toBeInstanceOf(FunctionMissingError);
    expect((await call('t1', 'throws')).body).toBe('missing');
    expect((await call('t1', 'hello')).status).toBe(200);
  });

  it('runs the process as uid 65534 without capabilities or network', async () => {
    const { workerdPid } = runtime.inspect('t1')!;
    const status = readFileSync(`/proc/${workerdPid}/status`, 'utf8');
    expect(status).toMatch(/^Uid:\s+65534\s+65534\s+65534\s+65534$/m);
    expect(status).toMatch(/^Gid:\s+65534\s+65534\s+65534\s+65534$/m);
    for (const cap of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) expect(status).toMatch(new RegExp(`^${cap}:\\s+0000000000000000$`, 'm'));
    expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
    expect(readFileSync(`/proc/${workerdPid}/cmdline`, 'utf8')).toContain('--socket-fd\0http=3');
    expect(readlinkSync(`/proc/${workerdPid}/ns/net`)).not.toBe(readlinkSync('/proc/self/ns/net'));
  });

  it('cannot reach a server on the host’s loopback', async () => {
    let hits = 0;
    const target = http.createServer((_req, res) => {
      hits++;
      res.end('secret');
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    try {
      await deploy('t1', 'egress', egress((target.address() as import('node:net').AddressInfo).port));
      const answer = await call('t1', 'egress');
      expect(answer.body).toMatch(/^blocked: /);
      expect(hits).toBe(0);
    } finally {
      target.close();
    }
  });

  it('a tenant past its memory limit loses only its own process, which comes back', async () => {
    await deploy('t2', 'hog', HOG);
    await deploy('t2', 'ping', PING);
    await deploy('t3', 'ping', PING);
    const before = runtime.inspect('t2')!;
    let stop = false;
    let other = 0;
    let otherFailed = 0;
    const neighbour = (async () => {
      while (!stop) {
        const answer = await call('t3', 'ping').catch(() => null);
        if (answer?.status === 200 && answer.body === 'pong') other++;
        else otherFailed++;
      }
    })();
    const hog = await call('t2', 'hog');
    expect(hog.status).toBe(502);
    expect(results.get(hog.id)).toMatchObject({ errored: true });
    // It comes back: once the runtime has seen the process exit, invocations wait for the new one.
    // (One that arrives between the abort and that exit still reaches the dying process: 502.)
    let after = await call('t2', 'ping');
    for (let tries = 0; after.status === 502 && tries < 50; tries++) {
      await sleep(100);
      after = await call('t2', 'ping');
    }
    expect(after).toMatchObject({ status: 200, body: 'pong' });
    const restarted = runtime.inspect('t2')!;
    rememberPids('t2');
    expect(restarted.workerdPid).not.toBe(before.workerdPid);
    expect(alive(before.workerdPid!)).toBe(false);
    await sleep(100);
    stop = true;
    await neighbour;
    expect(otherFailed).toBe(0);
    expect(other).toBeGreaterThan(0);
    expect(events.some((e) => e.startsWith('t2: ') && e.includes('heap out of memory'))).toBe(true);
  });

  it('answers 504 past the time limit; a process stuck in a loop is killed and started again', async () => {
    await deploy('t4', 'sleeps', SLEEPS);
    await deploy('t4', 'loops', LOOPS);
    await deploy('t4', 'ping', PING);
    const slow = await call('t4', 'sleeps');
    expect(slow.status).toBe(504);
    expect(results.get(slow.id)).toMatchObject({ status: 504, errored: true });
    expect(results.get(slow.id)!.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 5);
    expect((await call('t4', 'ping')).body).toBe('pong');
    const stuck = runtime.inspect('t4')!;
    expect((await call('t4', 'loops')).status).toBe(504);
    // The runtime probes the process, finds it stuck, kills it and starts it again.
    for (let i = 0; i < 100 && runtime.inspect('t4')?.workerdPid === stuck.workerdPid; i++) await sleep(50);
    expect((await call('t4', 'ping')).body).toBe('pong');
    expect(runtime.inspect('t4')!.workerdPid).not.toBe(stuck.workerdPid);
    expect(events.some((e) => e.startsWith('t4: ') && e.includes('does not answer'))).toBe(true);
    rememberPids('t4');
  });

  it('measures invocation latency through the runtime and against the workerd socket', async () => {
    await deploy('t5', 'ping', PING);
    const { port } = runtime.inspect('t5')!;
    const measure = async (run: () => Promise<Answer>, n: number, concurrency: number) => {
      const ms: number[] = [];
      let left = n;
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (left-- > 0) {
            const started = performance.now();
            const answer = await run();
            ms.push(performance.now() - started);
            expect(answer.body).toBe('pong');
          }
        }),
      );
      return { p50: percentile(ms, 50).toFixed(2), p99: percentile(ms, 99).toFixed(2) };
    };
    const direct = () => send(port, '/', { headers: { 'cf-fn-name': 'ping' } });
    const viaRuntime = () => call('t5', 'ping');
    await measure(direct, 100, 1);
    await measure(viaRuntime, 100, 1);
    const table = {
      'direct c1': await measure(direct, 500, 1),
      'runtime c1': await measure(viaRuntime, 500, 1),
      'direct c10': await measure(direct, 1000, 10),
      'runtime c10': await measure(viaRuntime, 1000, 10),
    };
    console.log('invocation latency in ms (p50/p99):', JSON.stringify(table));
    console.log(`deploy time in ms over ${deployMs.length} deploys: p50 ${percentile(deployMs, 50).toFixed(0)}, max ${Math.max(...deployMs).toFixed(0)}`);
  });

  it('restores a tenant’s stored functions in one process', async () => {
    await runtime.restore('t6', [
      { name: 'ping', code: PING },
      { name: 'hello', code: hello(7) },
    ]);
    rememberPids('t6');
    expect((await call('t6', 'ping')).body).toBe('pong');
    expect(JSON.parse((await call('t6', 'hello')).body).v).toBe(7);
  });

  it('refuses to start without bubblewrap, naming the package', () => {
    expect(() => new WorkerdRuntime({ dataDir, bwrapPath: path.join(root, 'no-bwrap') })).toThrow(/bubblewrap/);
  });

  it('drops a tenant: its process stops and its functions are gone', async () => {
    const { workerdPid, bwrapPid } = runtime.inspect('t5')!;
    await runtime.dropTenant('t5');
    expect(runtime.has('t5', 'ping')).toBe(false);
    expect(alive(workerdPid!)).toBe(false);
    expect(alive(bwrapPid)).toBe(false);
    expect((await call('t5', 'ping')).status).toBe(404);
  });

  it('the sandboxes die with the process that started them', async () => {
    const script = path.join(root, 'parent.ts');
    writeFileSync(
      script,
      `import { WorkerdRuntime } from ${JSON.stringify(path.resolve('providers/workerd/runtime'))};
const runtime = new WorkerdRuntime({ dataDir: ${JSON.stringify(path.join(root, 'orphans'))} });
runtime.deploy('t9', 'ping', ${JSON.stringify(PING)}).then(() => console.log(JSON.stringify(runtime.inspect('t9'))));
setInterval(() => undefined, 1000);
`,
    );
    const parent = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      parent.stdout.once('data', (d: Buffer) => resolve(d.toString()));
      parent.once('exit', (code) => reject(new Error(`the parent exited (${code}) before it deployed`)));
    });
    const { workerdPid, bwrapPid } = JSON.parse(line);
    expect(alive(workerdPid)).toBe(true);
    parent.kill('SIGKILL');
    for (let i = 0; i < 50 && (alive(workerdPid) || alive(bwrapPid)); i++) await sleep(50);
    expect(alive(workerdPid)).toBe(false);
    expect(alive(bwrapPid)).toBe(false);
  });

  it('close() leaves no workerd or bwrap process behind', async () => {
    rememberPids('t1');
    rememberPids('t2');
    await runtime.close();
    expect(processesUsing(dataDir)).toEqual([]);
    expect([...seenPids].filter(alive)).toEqual([]);
    expect(readdirSync(dataDir)).toEqual([]);
    await expect(runtime.deploy('t1', 'hello', hello(3))).rejects.toThrow(/closed/);
  });
});
