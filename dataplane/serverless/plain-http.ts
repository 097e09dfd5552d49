import { STATUS_CODES } from 'node:http';
import type net from 'node:net';

/**
 * The kv data plane's own reader for plain HTTP/1.1 requests (docs/benchmarks.md "Serverless
 * primitives": Node's HTTP server was about a third of the plane's CPU per kv request).
 *
 * It serves only the plainest requests: `GET`, `PUT` or `DELETE` of an accepted target, HTTP/1.1,
 * a `Host`, a body framed by one `Content-Length` (at most `maxBodyBytes`), a head of printable
 * ASCII within `maxHeadBytes`. Anything else (another method, HTTP/1.0, `Transfer-Encoding`,
 * `Expect`, `Upgrade`, a duplicate `Content-Length`, `Authorization` or `Host`, folded lines, bare
 * CR or LF, bytes past ASCII, a larger body or head) is never half-read here: at the start of that
 * request the connection is handed to Node's HTTP server (`handOff`) with every byte not yet
 * answered, and Node serves it and the rest of the connection (and refuses what is malformed). So
 * the one framing decision made here, a body's length, is made only where Node's would be the same.
 */

/** A request read whole: its head's few fields the plane uses, and its body. */
export interface PlainRequest {
  method: 'GET' | 'PUT' | 'DELETE';
  /** The request target as sent (an origin-form path, maybe with a query). */
  target: string;
  authorization: string | undefined;
  body: Buffer;
}

/** An answer. `headers` are whole lines (`Name: value\r\n`); Date, Connection, Keep-Alive and Content-Length are added. */
export interface PlainResponse {
  status: number;
  headers: string;
  body?: Buffer | string;
}

/** A head read from a buffer: what `PlainRequest` carries, the body's length and where the body starts. */
export interface PlainHead {
  method: PlainRequest['method'];
  target: string;
  authorization: string | undefined;
  contentLength: number;
  /** `Connection: close` was asked for. */
  close: boolean;
  /** Index of the body's first byte (just past the head's empty line). */
  bodyStart: number;
}

/** What `readPlainHead` says of the bytes from `from` on. */
export type HeadReading = PlainHead | 'incomplete' | 'unusual';

const CRLFCRLF = Buffer.from('\r\n\r\n');
/** Header fields a plain head has at most. */
const MAX_FIELDS = 100;
const HTTP11 = 'HTTP/1.1';
/** RFC 9110 5.6.2 tchar, by byte. */
const TCHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") TCHAR[c.charCodeAt(0)] = 1;

/** Whether the token at `buf[at..]` is `lower` in any case (a token's bytes: `| 0x20` lowers letters and turns no other tchar into one). */
function nameIs(buf: Buffer, at: number, lower: string): boolean {
  for (let i = 0; i < lower.length; i++) if ((buf[at + i] | 0x20) !== lower.charCodeAt(i)) return false;
  return true;
}

/**
 * Reads a request head starting at `from`: 'incomplete' while its empty line has not arrived (and
 * it is within `maxHeadBytes`); 'unusual' for anything this reader leaves to Node's HTTP server.
 */
export function readPlainHead(buf: Buffer, from: number, maxHeadBytes: number): HeadReading {
  const end = buf.indexOf(CRLFCRLF, from);
  if (end === -1) return buf.length - from > maxHeadBytes ? 'unusual' : 'incomplete';
  if (end + 4 - from > maxHeadBytes) return 'unusual';
  // Printable ASCII, SP and HTAB only, CR only before LF, LF only after CR (no bare CR or LF, no
  // NUL, nothing past 0x7E): lines below end at their CR.
  for (let i = from; i < end; i++) {
    const c = buf[i];
    if ((c >= 0x20 && c <= 0x7e) || c === 0x09) continue;
    if (c === 0x0d && buf[i + 1] === 0x0a) {
      i++;
      continue;
    }
    return 'unusual';
  }
  // The request line: METHOD SP target SP HTTP/1.1, single spaces (an empty line first, or a tab, is not plain).
  const methodEnd = buf.indexOf(0x20, from);
  if (methodEnd <= from || methodEnd >= end) return 'unusual';
  const targetEnd = buf.indexOf(0x20, methodEnd + 1);
  if (targetEnd <= methodEnd + 1 || targetEnd >= end) return 'unusual';
  const method = buf.toString('latin1', from, methodEnd);
  if (method !== 'GET' && method !== 'PUT' && method !== 'DELETE') return 'unusual';
  if (buf[methodEnd + 1] !== 0x2f || buf.toString('latin1', targetEnd + 1, targetEnd + 9) !== HTTP11 || buf[targetEnd + 9] !== 0x0d) return 'unusual';
  const target = buf.toString('latin1', methodEnd + 1, targetEnd);
  if (target.includes('\t')) return 'unusual';

  let contentLength = -1;
  let authorization: string | undefined;
  let hosts = 0;
  let close = false;
  let fields = 0;
  for (let line = targetEnd + 11; line < end + 2;) {
    // Many fields are not plain (Node's server refuses past its own limit with 431).
    if (++fields > MAX_FIELDS) return 'unusual';
    const lineEnd = buf.indexOf(0x0d, line);
    const colon = buf.indexOf(0x3a, line);
    // No colon, or an empty name: an empty line before the end, a folded line (SP or HTAB first).
    if (colon <= line || colon > lineEnd) return 'unusual';
    for (let i = line; i < colon; i++) if (TCHAR[buf[i]] === 0) return 'unusual'; // whitespace before the colon too
    let valueStart = colon + 1;
    let valueEnd = lineEnd;
    while (valueStart < valueEnd && (buf[valueStart] === 0x20 || buf[valueStart] === 0x09)) valueStart++;
    while (valueEnd > valueStart && (buf[valueEnd - 1] === 0x20 || buf[valueEnd - 1] === 0x09)) valueEnd--;
    switch (colon - line) {
      case 4:
        if (nameIs(buf, line, 'host')) hosts++;
        break;
      case 6:
        if (nameIs(buf, line, 'expect')) return 'unusual';
        break;
      case 7:
        if (nameIs(buf, line, 'upgrade')) return 'unusual';
        break;
      case 10:
        if (nameIs(buf, line, 'connection')) {
          for (const option of buf.toString('latin1', valueStart, valueEnd).toLowerCase().split(',')) {
            const o = option.trim();
            if (o === 'close') close = true;
            else if (o === 'upgrade') return 'unusual';
          }
        }
        break;
      case 13:
        if (nameIs(buf, line, 'authorization')) {
          if (authorization !== undefined) return 'unusual';
          authorization = buf.toString('latin1', valueStart, valueEnd);
        }
        break;
      case 14:
        if (nameIs(buf, line, 'content-length')) {
          // Digits only (no sign, no list), at most 15 of them, once.
          if (contentLength !== -1 || valueEnd === valueStart || valueEnd - valueStart > 15) return 'unusual';
          contentLength = 0;
          for (let i = valueStart; i < valueEnd; i++) {
            const digit = buf[i] - 0x30;
            if (digit < 0 || digit > 9) return 'unusual';
            contentLength = contentLength * 10 + digit;
          }
        }
        break;
      case 17:
        if (nameIs(buf, line, 'transfer-encoding')) return 'unusual';
        break;
    }
    line = lineEnd + 2;
  }
  if (hosts !== 1) return 'unusual';
  return { method, target, authorization, contentLength: contentLength === -1 ? 0 : contentLength, close, bodyStart: end + 4 };
}

export interface PlainHttpOptions {
  /** Whether this reader serves a request for `target` (the others, and the rest of their connection, go to `handOff`). */
  accepts(target: string): boolean;
  /** Answers a request; a rejection is answered 500 (give errors their answer before). */
  handle(request: PlainRequest): Promise<PlainResponse>;
  /** Gives the connection to Node's HTTP server with the bytes not yet answered (`server.emit('connection')`, then those bytes). */
  handOff(socket: net.Socket, rest: Buffer): void;
  /** An idle keep-alive connection closes after this (default 65 s, as the plane's HTTP server). */
  keepAliveMs?: number;
  /** A request's head must arrive whole within this (default 60 s, Node's `headersTimeout`). */
  headersTimeoutMs?: number;
  /** Bodies larger than this go to Node's server (default 1 MiB). */
  maxBodyBytes?: number;
  /** Heads larger than this go to Node's server (default 16 KiB, Node's `maxHeaderSize`, which answers 431). */
  maxHeadBytes?: number;
  onError?: (err: Error) => void;
}

/** A connection served here: its server closes it with `shutdown`; `ended` resolves once it is not served here any more (closed, or handed off). */
export interface PlainHttpConnection {
  /** Closes it once the request being answered (if any) has its answer, which then says `Connection: close`. */
  shutdown(): void;
  readonly ended: Promise<void>;
}

/** Bytes kept unanswered (pipelined requests) past which the connection is not read until they are. */
const MAX_BUFFERED = 4 * 1024 * 1024;
const EMPTY = Buffer.alloc(0);

/**
 * Serves a connection whose first bytes (`head`, already read) are a request: plain requests here,
 * one at a time and answered in order (pipelining), until one is not plain or not accepted, which
 * hands the connection off.
 */
export function servePlainHttp(socket: net.Socket, head: Buffer, options: PlainHttpOptions): PlainHttpConnection {
  const connection = new PlainConnection(socket, options);
  connection.start(head);
  return connection;
}

class PlainConnection implements PlainHttpConnection {
  private buffer: Buffer = EMPTY;
  /**
   * Chunks of a body still arriving, kept apart until it is whole (`need` bytes from the buffer's
   * start): joined once, not at every chunk (a body sent in many small packets would cost the
   * square of its size).
   */
  private parts: Buffer[] = [];
  private partsBytes = 0;
  private need = 0;
  /** A request is being answered, or its answer waits for the socket to drain. */
  private busy = false;
  private paused = false;
  private done = false;
  /** Its server is closing: the answer being made is the last. */
  private closing = false;
  private endedNow!: () => void;
  readonly ended = new Promise<void>((resolve) => (this.endedNow = resolve));
  /** When the head now awaited began to arrive (0: nothing of it yet). */
  private headSince = 0;
  private timeoutMs = 0;
  private readonly keepAliveMs: number;
  private readonly headersTimeoutMs: number;
  private readonly maxBodyBytes: number;
  private readonly maxHeadBytes: number;

  constructor(
    private readonly socket: net.Socket,
    private readonly options: PlainHttpOptions,
  ) {
    this.keepAliveMs = options.keepAliveMs ?? 65_000;
    this.headersTimeoutMs = options.headersTimeoutMs ?? 60_000;
    this.maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;
    this.maxHeadBytes = options.maxHeadBytes ?? 16 * 1024;
  }

  start(head: Buffer): void {
    const socket = this.socket;
    socket.setNoDelay(true);
    socket.on('data', this.onData);
    socket.on('error', this.onSocketError);
    socket.on('close', this.onClose);
    socket.on('timeout', this.onTimeout);
    this.onData(head);
  }

  shutdown(): void {
    this.closing = true;
    // A request on its way (part of it read) is answered first, as Node's server lets it finish.
    if (!this.busy && this.buffer.length === 0 && this.parts.length === 0) this.destroy();
  }

  /**
   * The socket's inactivity timeout (any byte in or out restarts it): `headersTimeoutMs` while a
   * head is arriving, else `keepAliveMs` (idle between requests, a body on its way). Set only when it changes.
   */
  private inactivity(ms: number): void {
    if (ms === this.timeoutMs) return;
    this.timeoutMs = ms;
    this.socket.setTimeout(ms);
  }

  private readonly onData = (chunk: Buffer): void => {
    if (this.need > 0) {
      this.parts.push(chunk);
      this.partsBytes += chunk.length;
      if (this.buffer.length + this.partsBytes < this.need) return;
      this.buffer = Buffer.concat([this.buffer, ...this.parts]);
      this.parts = [];
      this.partsBytes = 0;
      this.need = 0;
    } else this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    if (this.headSince === 0) this.headSince = Date.now();
    if (this.busy) {
      if (this.buffer.length > MAX_BUFFERED && !this.paused) {
        this.paused = true;
        this.socket.pause();
      }
      return;
    }
    this.next();
  };

  /** Answers what the buffer holds, request by request, until it holds no whole request or the connection moves on. */
  private next(): void {
    while (!this.done && !this.busy && this.buffer.length > 0) {
      const head = readPlainHead(this.buffer, 0, this.maxHeadBytes);
      if (head === 'incomplete') {
        // A head sent slowly ends as Node's headersTimeout ends it: checked as bytes come, and by the inactivity timeout.
        if (Date.now() - this.headSince > this.headersTimeoutMs) this.destroy();
        else this.inactivity(this.headersTimeoutMs);
        return;
      }
      if (head === 'unusual' || head.contentLength > this.maxBodyBytes || !this.options.accepts(head.target)) return this.handOff();
      const end = head.bodyStart + head.contentLength;
      if (this.buffer.length < end) {
        // The body is still coming: its chunks wait apart until it is whole.
        this.need = end;
        return this.inactivity(this.keepAliveMs);
      }
      const body = this.buffer.subarray(head.bodyStart, end);
      this.buffer = end === this.buffer.length ? EMPTY : this.buffer.subarray(end);
      this.headSince = this.buffer.length > 0 ? Date.now() : 0;
      this.busy = true;
      this.options.handle({ method: head.method, target: head.target, authorization: head.authorization, body }).then(
        (response) => this.answer(response, head.close),
        (err: Error) => {
          this.options.onError?.(err);
          this.answer({ status: 500, headers: '' }, true);
        },
      );
    }
    if (!this.done && !this.busy) this.inactivity(this.keepAliveMs);
  }

  private answer(response: PlainResponse, close: boolean): void {
    if (this.done) return;
    close ||= this.closing;
    const flushed = this.socket.write(render(response, close, this.keepAliveMs));
    if (close) {
      this.done = true;
      this.socket.end();
      return;
    }
    if (flushed) return this.idle();
    this.socket.once('drain', this.idle);
  }

  private readonly idle = (): void => {
    this.busy = false;
    // Shut down while this answer was going out: it was the last.
    if (this.closing && this.buffer.length === 0) {
      this.done = true;
      this.socket.end();
      return;
    }
    if (this.paused) {
      this.paused = false;
      this.socket.resume();
    }
    this.next();
  };

  /** The connection goes to Node's HTTP server, with the bytes not answered yet; nothing of it is read here any more. */
  private handOff(): void {
    const { socket } = this;
    this.done = true;
    socket.off('data', this.onData);
    socket.off('error', this.onSocketError);
    socket.off('close', this.onClose);
    socket.off('timeout', this.onTimeout);
    socket.setTimeout(0);
    const rest = this.buffer;
    this.buffer = EMPTY;
    this.endedNow();
    this.options.handOff(socket, rest);
    if (this.paused) socket.resume();
  }

  private readonly onTimeout = (): void => {
    // Nothing came or went for a while: an idle keep-alive connection or a stalled head. A request
    // being answered (its backend has its own timeout) is not cut off.
    if (!this.busy) this.destroy();
  };

  private readonly onSocketError = (): void => this.destroy();

  private readonly onClose = (): void => {
    this.done = true;
    this.buffer = EMPTY;
    this.parts = [];
    this.endedNow();
  };

  private destroy(): void {
    this.done = true;
    this.buffer = EMPTY;
    this.parts = [];
    this.socket.destroy();
  }
}

let dateSecond = -1;
let dateLine = '';

/** `Date: <IMF-fixdate>\r\n`, made once a second. */
function dateHeader(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateLine = `Date: ${new Date(now).toUTCString()}\r\n`;
  }
  return dateLine;
}

/** The whole answer in one buffer: one write. A 204 and a 304 have no Content-Length (RFC 9110 8.6). */
export function render(response: PlainResponse, close: boolean, keepAliveMs: number): Buffer {
  const { status, body } = response;
  const bodyBytes = body === undefined ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.length;
  const length = status === 204 || status === 304 ? '' : `Content-Length: ${bodyBytes}\r\n`;
  const connection = close ? 'Connection: close\r\n' : `Connection: keep-alive\r\nKeep-Alive: timeout=${Math.floor(keepAliveMs / 1000)}\r\n`;
  const head = `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\n${response.headers}${dateHeader()}${connection}${length}\r\n`;
  if (bodyBytes === 0) return Buffer.from(head, 'latin1');
  const out = Buffer.allocUnsafe(head.length + bodyBytes);
  out.write(head, 0, 'latin1');
  if (typeof body === 'string') out.write(body, head.length, 'utf8');
  else body!.copy(out, head.length);
  return out;
}
