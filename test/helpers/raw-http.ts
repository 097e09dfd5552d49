import net from 'node:net';

/** An HTTP/1.1 answer as a raw client reads it. */
export interface Answer {
  status: number;
  /** The status line and the header lines, without the blank line that ends them (latin1). */
  head: string;
  /** Header names in lower case; values without the white space around them. */
  headers: Record<string, string>;
  /** The body as it came (chunked ones decoded). */
  body: Buffer;
  /** The body parsed as UTF-8 JSON. */
  json(): any;
}

/** How much of what was received an error message shows. */
const SHOWN = 300;

/**
 * A raw HTTP/1.1 client on one TCP connection: writes bytes as they are given (a string as latin1,
 * one byte per character) and reads the answers one after the other, framed by Content-Length, by
 * chunked transfer coding, with no body (1xx, 204, 304), or by the close of the connection.
 */
export class RawClient {
  private buffer = Buffer.alloc(0);
  /** Chunks received since the buffer was last joined, and their size (a large answer is joined once, not at every chunk). */
  private parts: Buffer[] = [];
  private partsBytes = 0;
  /** Bytes the buffer must hold before the answer being read can be whole (0: unknown). */
  private need = 0;
  /** Whether the connection is closed, and when it closed (ms since the epoch; 0 while open). */
  closed = false;
  closedAt = 0;
  private wake: (() => void) | null = null;
  /** Resolves when the connection closes. */
  readonly closing: Promise<void>;

  private constructor(readonly socket: net.Socket) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      this.parts.push(chunk);
      this.partsBytes += chunk.length;
      this.wake?.();
    });
    socket.on('error', () => undefined);
    this.closing = new Promise((resolve) =>
      socket.once('close', () => {
        this.closed = true;
        this.closedAt = Date.now();
        this.wake?.();
        resolve();
      }),
    );
  }

  static connect(port: number, host = '127.0.0.1'): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, host, () => {
        socket.off('error', reject);
        resolve(new RawClient(socket));
      });
      socket.once('error', reject);
    });
  }

  /** A string is sent as latin1: one byte per character. */
  write(data: Buffer | string): Promise<void> {
    return new Promise((resolve, reject) =>
      this.socket.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data, (err) => (err ? reject(err) : resolve())),
    );
  }

  /** The next whole answer; rejects, showing what was received, if the connection closes first or none comes within `ms`. */
  async answer(ms = 5_000): Promise<Answer> {
    const deadline = Date.now() + ms;
    for (;;) {
      const parsed = this.parse();
      if (parsed) return parsed;
      if (this.closed) throw new Error(`closed before a whole answer; have ${this.received()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no whole answer within ${ms} ms; have ${this.received()}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.wake = () => {
          clearTimeout(timer);
          this.wake = null;
          resolve();
        };
      });
    }
  }

  /** 'closed' once the connection is closed, or 'open' if it is not within `ms`. */
  closedWithin(ms: number): Promise<'closed' | 'open'> {
    return Promise.race([this.closing.then(() => 'closed' as const), new Promise<'open'>((resolve) => setTimeout(() => resolve('open'), ms))]);
  }

  /** Bytes received and not taken as an answer. */
  get pending(): number {
    return this.buffer.length + this.partsBytes;
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** What was received and not taken yet, for an error message. */
  private received(): string {
    this.join();
    const shown = JSON.stringify(this.buffer.toString('latin1', 0, SHOWN));
    return this.buffer.length > SHOWN ? `${shown}… (${this.buffer.length} bytes)` : shown;
  }

  /** The first whole answer in the buffer (taken out of it), or null while it is not all here. */
  private join(): void {
    if (this.parts.length === 0) return;
    this.buffer = Buffer.concat([this.buffer, ...this.parts]);
    this.parts = [];
    this.partsBytes = 0;
  }

  private parse(): Answer | null {
    if (this.need > 0 && this.buffer.length + this.partsBytes < this.need && !this.closed) return null;
    this.join();
    this.need = 0;
    const end = this.buffer.indexOf('\r\n\r\n');
    if (end === -1) return null;
    const head = this.buffer.toString('latin1', 0, end);
    const [statusLine, ...lines] = head.split('\r\n');
    if (!/^HTTP\/\d\.\d \d{3}( |$)/.test(statusLine)) throw new Error(`not an HTTP/1.x status line: ${JSON.stringify(statusLine)}; have ${this.received()}`);
    const status = Number(statusLine.split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    let at = end + 4;
    let body: Buffer;
    if ((status >= 100 && status < 200) || status === 204 || status === 304) body = Buffer.alloc(0);
    else if (headers['transfer-encoding']?.toLowerCase() === 'chunked') {
      const chunks: Buffer[] = [];
      for (;;) {
        const lineEnd = this.buffer.indexOf('\r\n', at);
        if (lineEnd === -1) return null;
        const sizeLine = this.buffer.toString('latin1', at, lineEnd);
        const size = parseInt(sizeLine, 16); // a chunk extension (`;name=value`) after the size is passed over
        if (!/^[0-9a-fA-F]+/.test(sizeLine) || Number.isNaN(size)) throw new Error(`bad chunk size line ${JSON.stringify(sizeLine)}; have ${this.received()}`);
        if (size === 0) {
          // The last chunk: then trailer lines, if any, up to an empty line.
          const trailersEnd = this.buffer.indexOf('\r\n\r\n', lineEnd);
          if (trailersEnd === -1) return null;
          at = trailersEnd + 4;
          break;
        }
        if (this.buffer.length < lineEnd + 2 + size + 2) return null;
        chunks.push(this.buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
        at = lineEnd + 2 + size + 2;
      }
      body = Buffer.concat(chunks);
    } else if (headers['content-length'] !== undefined) {
      const length = Number(headers['content-length']);
      if (!Number.isSafeInteger(length) || length < 0)
        throw new Error(`bad Content-Length ${JSON.stringify(headers['content-length'])}; have ${this.received()}`);
      if (this.buffer.length < at + length) {
        this.need = at + length;
        return null;
      }
      body = Buffer.from(this.buffer.subarray(at, at + length));
      at += length;
    } else if (this.closed) {
      body = Buffer.from(this.buffer.subarray(at));
      at = this.buffer.length;
    } else return null;
    this.buffer = this.buffer.subarray(at);
    return { status, head, headers, body, json: () => JSON.parse(body.toString('utf8')) };
  }
}
