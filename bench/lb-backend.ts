/**
 * A backend of bench/lb.bench.ts in a process of its own (so it does not share a core's event loop
 * with autocannon): plain node:http answering every request with the same small body.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const BODY = Buffer.from(`${JSON.stringify({ backend: process.argv[2] ?? 'backend', padding: 'x'.repeat(200) })}\n`);

const server = http.createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': BODY.length });
  res.end(BODY);
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => {
  if (!process.send) throw new Error('bench/lb-backend.ts is started by bench/lb.bench.ts (it needs an IPC channel)');
  process.send({ type: 'ready', port: (server.address() as AddressInfo).port });
});
process.on('disconnect', () => process.exit(0));
