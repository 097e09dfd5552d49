/**
 * The baseline of bench/api.bench.ts: bare Express 5 in a process of its own, with no middleware,
 * no database and no authentication, answering the same JSON bodies the API answers (the parent
 * sends them over IPC: a page of 20 services and one operation). `res.json` serialises on every
 * request, as the API does, so the difference is the API's own request path.
 */
import express from 'express';
import type { AddressInfo } from 'node:net';
import { servesHere } from './child-cluster';

type Message = { type: 'bodies'; list: unknown; operation: unknown } | { type: 'stop' };

function main() {
  if (!process.send) throw new Error('bench/bare-express.ts is started by bench/api.bench.ts (it needs an IPC channel)');
  // BENCH_PROCESSES > 1: this primary only relays; Express runs in its cluster workers.
  if (!servesHere()) return;
  let list: unknown = null;
  let operation: unknown = null;
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.get('/list', (_req, res) => {
    res.json(list);
  });
  app.get('/operation', (_req, res) => {
    res.json(operation);
  });
  const server = app.listen(0, '127.0.0.1', () => {
    process.send!({ type: 'ready', port: (server.address() as AddressInfo).port, pid: process.pid });
  });
  server.keepAliveTimeout = 65_000;
  process.on('message', (msg: Message) => {
    if (msg.type === 'bodies') {
      ({ list, operation } = msg);
      process.send!({ type: 'bodies-set' });
    } else if (msg.type === 'stop') {
      server.close();
      server.closeAllConnections();
      process.exit(0);
    }
  });
  process.on('disconnect', () => process.exit(0));
}

main();
