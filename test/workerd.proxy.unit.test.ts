import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { proxyInvocation } from '../providers/workerd/proxy';

/**
 * A caller who hangs up while the data plane still looks its function up (the tenant's lookup comes
 * before the proxy) must not crash the process: piping the function's answer into a closed answer
 * threw outside any handler and took every data plane down (found by bench/serverless.bench.ts).
 * Here: a stand-in for the workerd socket, a front that waits 2 ms before proxying, and callers that
 * hang up after 0-4 ms, a few thousand times.
 */
let backend: http.Server;
let front: http.Server;
let settled = 0;
const sandbox = { deployment: { dir: '/x', marker: 'm' }, inflight: 0, requestDone() {}, port: 0, agent: new http.Agent({ keepAlive: true, maxSockets: 256 }) };

beforeAll(async () => {
  backend = http.createServer((_req, res) => {
    setTimeout(() => res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 5 }).end('hello'), Math.random() * 4);
  });
  await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
  sandbox.port = (backend.address() as AddressInfo).port;
  front = http.createServer((req, res) => {
    setTimeout(() => void proxyInvocation(sandbox as never, 'hello', '/', req, res, 30_000).then(() => settled++), 2);
  });
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
});

afterAll(async () => {
  sandbox.agent.destroy();
  await new Promise((r) => front.close(r));
  await new Promise((r) => backend.close(r));
});

it('callers that hang up before the answer do not crash the process', async () => {
  const port = (front.address() as AddressInfo).port;
  for (let i = 0; i < 150; i++) {
    await Promise.all(
      Array.from(
        { length: 20 },
        () =>
          new Promise<void>((resolve) => {
            const s = net.connect(port, '127.0.0.1', () => {
              s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
              setTimeout(() => {
                s.destroy();
                resolve();
              }, Math.random() * 4);
            });
            s.on('error', () => resolve());
          }),
      ),
    );
  }
  await new Promise((r) => setTimeout(r, 100));
  expect(settled).toBeGreaterThan(2_500);
});
