/**
 * One invocation, proxied from the data plane's Node server to a tenant's workerd process over the
 * process's keep-alive agent: the body streamed both ways, hop-by-hop headers and `authorization`
 * (the caller's credential for the data plane, never the function's business) left out, the router's
 * marker taken off the answer. The wall-time limit answers 504 and counts as an error.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import { pipeline } from 'node:stream';
import type { InvocationResult } from '../functions.provider';
import { NAME_HEADER, STATUS_HEADER } from './config';
import type { Sandbox } from './sandbox';

/** RFC 9110 section 7.6.1's hop-by-hop fields, and `expect` (Node's server has answered it already). */
const HOP_BY_HOP = [
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'expect',
];
const NOT_FORWARDED = new Set([...HOP_BY_HOP, 'authorization', NAME_HEADER, STATUS_HEADER]);
const NOT_RETURNED = new Set([...HOP_BY_HOP, STATUS_HEADER]);

/** `raw` (rawHeaders: name, value, name, value...) without `drop` and the fields its `Connection` names. */
export function filterHeaders(raw: string[], drop: ReadonlySet<string>): string[] {
  const named = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].toLowerCase() === 'connection') for (const token of raw[i + 1].split(',')) named.add(token.trim().toLowerCase());
  }
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i].toLowerCase();
    if (!drop.has(name) && !named.has(name)) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

/** `path` as a request target: starting with `/`, nothing Node would refuse to put on the request line. */
export function requestTarget(path: string): string {
  const target = path.startsWith('/') ? path : `/${path}`;
  return target.replace(/[^\x21-\x7e]/g, (c) => encodeURIComponent(c));
}

const hasBody = (req: IncomingMessage) => req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] ?? '0') !== '0';

/** What became of an invocation: answered (`timedOut` asks the runtime to check the process), or the process has no such function. */
export type ProxyOutcome = { result: InvocationResult; timedOut: boolean } | 'missing';

export function proxyInvocation(
  sandbox: Sandbox,
  name: string,
  path: string,
  req: IncomingMessage,
  res: ServerResponse,
  timeoutMs: number,
): Promise<ProxyOutcome> {
  const started = performance.now();
  const headers = [...filterHeaders(req.rawHeaders, NOT_FORWARDED), NAME_HEADER, name];
  const withBody = hasBody(req);
  const { marker } = sandbox.deployment;
  sandbox.inflight += 1;
  return new Promise((resolve) => {
    let settled = false;
    let status = 502;
    let upstream: http.ClientRequest | null = null;
    const settle = (outcome: ProxyOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sandbox.requestDone();
      resolve(outcome);
    };
    const answered = (errored: boolean, timedOut = false) => settle({ result: { status, errored, ms: performance.now() - started }, timedOut });
    /** The runtime's own answer when the function's did not come (or not whole). */
    const fail = (code: number, text: string, timedOut = false) => {
      if (!res.headersSent) {
        status = code;
        res.writeHead(code, { 'content-type': 'text/plain;charset=UTF-8', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      } else {
        res.destroy();
      }
      answered(true, timedOut);
    };
    const timer = setTimeout(() => {
      upstream?.destroy();
      fail(504, 'the function did not answer in time\n', true);
    }, timeoutMs);
    let response: IncomingMessage | null = null;
    // Closed before the end: the function's answer broke off (an error), or the caller went away (not
    // the function's error). Registered before the pipeline's own listener, so it runs first.
    res.once('close', () => {
      if (settled || res.writableFinished) return;
      const broke = response !== null && response.destroyed && !response.complete;
      upstream?.destroy();
      if (!broke && !res.headersSent) status = 499;
      answered(broke);
    });

    const onResponse = (up: IncomingMessage) => {
      const mark = up.headers[STATUS_HEADER];
      if (mark === `${marker} missing`) {
        up.resume();
        return settle('missing');
      }
      if (res.destroyed || res.writableEnded) {
        // The caller hung up before the answer came: nothing to pass on (piping into a closed
        // answer throws, outside any handler).
        up.destroy();
        return answered(false);
      }
      try {
        res.writeHead(up.statusCode ?? 502, filterHeaders(up.rawHeaders, NOT_RETURNED));
      } catch {
        // A header Node refuses to send (workerd checks them too, so this is unexpected).
        up.destroy();
        return fail(502, 'the function’s answer could not be passed on\n');
      }
      response = up;
      status = up.statusCode ?? 502;
      pipeline(up, res, (err) => {
        if (err) return fail(status, '');
        answered(mark === `${marker} threw`);
      });
    };

    const send = (mayRetry: boolean) => {
      const request = http.request({ host: '127.0.0.1', port: sandbox.port, method: req.method, path: requestTarget(path), headers, agent: sandbox.agent });
      upstream = request;
      request.once('response', onResponse);
      request.once('error', (err: NodeJS.ErrnoException) => {
        if (settled) return;
        // A keep-alive connection the process closed as we reused it: safe to send again when no body was read.
        if (mayRetry && !withBody && request.reusedSocket && err.code === 'ECONNRESET') return send(false);
        fail(502, 'the function’s process failed\n');
      });
      if (withBody) req.pipe(request);
      else request.end();
    };
    send(true);
  });
}
