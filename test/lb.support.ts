import http from 'node:http';
import type net from 'node:net';

/** Loopback backends and plain HTTP requests through a balancer, for the load-balancer tests. */

/** A loopback HTTP server that answers with its own name; `stop` makes it stop answering at all. */
export interface Backend {
  name: string;
  port: number;
  hits: number;
  stop(): Promise<void>;
}

export async function startBackend(name: string, port = 0, host = '127.0.0.1'): Promise<Backend> {
  const server = http.createServer((req, res) => {
    backend.hits++;
    res.setHeader('content-type', 'text/plain');
    res.end(name);
  });
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  const backend: Backend = {
    name,
    port: (server.address() as net.AddressInfo).port,
    hits: 0,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return backend;
}

/** One request on a new connection (no keep-alive, so each one is balanced and a reload cannot race an idle socket). */
export function get(address: string, port: number, timeoutMs = 3_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: address, port, path: '/', agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`status ${res.statusCode}: ${body}`))));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
  });
}

export async function eventually<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let value = await read();
  while (!ok(value) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
    value = await read();
  }
  return value;
}
