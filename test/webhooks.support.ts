import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { verifyWebhook, type Verification } from '../docs/examples/verify-webhook';

/**
 * A real webhook receiver on loopback (port 0) for the webhook tests: records every request with its
 * raw body and headers, verifies each signature with the docs example (an implementation of the
 * receiver rules independent of the signing code), and answers what the test tells it to.
 */
export interface ReceivedDelivery {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  at: number;
  verification: Verification;
}

export interface Receiver {
  url: string;
  port: number;
  received: ReceivedDelivery[];
  /** The secret the signature is checked against (set after the webhook is created). */
  secret: string;
  /** Status for the n-th request (1-based); default 200. */
  respond: (n: number, req: ReceivedDelivery) => number | Promise<number>;
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedDelivery[]>;
  close(): Promise<void>;
}

/** A gate a receiver's `respond` can wait at (`await gate.passed`) until the test opens it. */
export function gate(): { passed: Promise<void>; open: () => void } {
  let open!: () => void;
  const passed = new Promise<void>((resolve) => (open = resolve));
  return { passed, open };
}

export async function startReceiver(options: { tls?: { key: string; cert: string }; path?: string } = {}): Promise<Receiver> {
  const receiver = {
    received: [] as ReceivedDelivery[],
    secret: '',
    respond: (() => 200) as Receiver['respond'],
  } as Receiver;
  const listener: http.RequestListener = (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const sig = req.headers['cloud-signature'];
      const entry: ReceivedDelivery = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        body: raw.toString('utf8'),
        at: Date.now(),
        verification: verifyWebhook(raw, Array.isArray(sig) ? sig[0] : sig, receiver.secret),
      };
      receiver.received.push(entry);
      Promise.resolve(receiver.respond(receiver.received.length, entry)).then(
        (status) => res.writeHead(status, { 'content-type': 'text/plain' }).end(String(status)),
        () => res.writeHead(500).end(),
      );
    });
  };
  const server = options.tls ? https.createServer({ key: options.tls.key, cert: options.tls.cert }, listener) : http.createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  receiver.port = port;
  receiver.url = `${options.tls ? 'https' : 'http'}://localhost:${port}${options.path ?? '/hook'}`;
  receiver.waitFor = async (count, timeoutMs = 20_000) => {
    const until = Date.now() + timeoutMs;
    while (receiver.received.length < count && Date.now() < until) await new Promise((r) => setTimeout(r, 25));
    return receiver.received;
  };
  receiver.close = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    });
  return receiver;
}

export async function waitFor<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value) || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}
