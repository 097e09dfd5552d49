import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  readPlainHead,
  render,
  servePlainHttp,
  type PlainHead,
  type PlainHttpConnection,
  type PlainHttpOptions,
  type PlainRequest,
  type PlainResponse,
} from '../dataplane/serverless/plain-http';
import { RawClient } from './helpers/raw-http';

/**
 * The serverless kv plane's own HTTP/1.1 reader (dataplane/serverless/plain-http.ts), without a
 * database: `readPlainHead` case by case and against Node's own parser (a real `http.Server`), and
 * `servePlainHttp` on real sockets, handing off to a real `http.Server` as server.ts does.
 */

const bytes = (text: string) => Buffer.from(text, 'latin1');
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const MiB = 1024 * 1024;
const MAX_HEAD = 16 * 1024;
const read = (head: string | Buffer, max = MAX_HEAD) => readPlainHead(typeof head === 'string' ? bytes(head) : head, 0, max);

/** A plain PUT every 'unusual' case below is a variant of. */
const BASE = 'PUT /kv/v1/ns/app/keys/k HTTP/1.1\r\nHost: plane\r\nAuthorization: Bearer kvt_abc\r\nContent-Length: 3\r\n\r\n';
/** BASE with `line` (no CRLF) added as a header line after Host. */
const withLine = (line: string) => BASE.replace('Host: plane\r\n', `Host: plane\r\n${line}\r\n`);

// Every case is BASE (plain: checked below) changed in one way.
const UNUSUAL: [string, string][] = [
  ['HTTP/1.0', BASE.replace('HTTP/1.1', 'HTTP/1.0')],
  ['HTTP/2.0', BASE.replace('HTTP/1.1', 'HTTP/2.0')],
  ['POST', BASE.replace(/^PUT/, 'POST')],
  ['HEAD', BASE.replace(/^PUT/, 'HEAD')],
  ['OPTIONS', BASE.replace(/^PUT/, 'OPTIONS')],
  ['PATCH', BASE.replace(/^PUT/, 'PATCH')],
  ['lowercase get', BASE.replace(/^PUT/, 'get')],
  ['lowercase put', BASE.replace(/^PUT/, 'put')],
  ['Transfer-Encoding: chunked', withLine('Transfer-Encoding: chunked')],
  ['transfer-encoding in lowercase', withLine('transfer-encoding: chunked')],
  ['TRANSFER-ENCODING: identity', withLine('TRANSFER-ENCODING: identity')],
  ['Transfer-Encoding without Content-Length', withLine('Transfer-Encoding: chunked').replace('Content-Length: 3\r\n', '')],
  ['Expect: 100-continue', withLine('Expect: 100-continue')],
  ['expect in lowercase', withLine('expect: 100-continue')],
  ['Upgrade', withLine('Upgrade: websocket')],
  ['Connection: upgrade', withLine('Connection: Upgrade')],
  ['Connection: keep-alive, upgrade', withLine('Connection: keep-alive, upgrade')],
  ['two Content-Length, same value', withLine('Content-Length: 3')],
  ['two Content-Length, different values', withLine('content-length: 4')],
  ['Content-Length +3', BASE.replace('Content-Length: 3', 'Content-Length: +3')],
  ['Content-Length -3', BASE.replace('Content-Length: 3', 'Content-Length: -3')],
  ['Content-Length with a space inside', BASE.replace('Content-Length: 3', 'Content-Length: 1 3')],
  ['Content-Length with a tab inside', BASE.replace('Content-Length: 3', 'Content-Length: 1\t3')],
  ['Content-Length not a number', BASE.replace('Content-Length: 3', 'Content-Length: 3a')],
  ['Content-Length in hex', BASE.replace('Content-Length: 3', 'Content-Length: 0x3')],
  ['Content-Length as a list', BASE.replace('Content-Length: 3', 'Content-Length: 3, 3')],
  ['Content-Length with a decimal point', BASE.replace('Content-Length: 3', 'Content-Length: 3.0')],
  ['Content-Length of 16 digits', BASE.replace('Content-Length: 3', `Content-Length: ${'0'.repeat(15)}3`)],
  ['Content-Length empty', BASE.replace('Content-Length: 3', 'Content-Length: ')],
  ['Content-Length of whitespace only', BASE.replace('Content-Length: 3', 'Content-Length: \t ')],
  ['two Authorization', withLine('Authorization: Bearer kvt_other')],
  ['two Authorization, one in lowercase', withLine('authorization: Bearer kvt_abc')],
  ['no Host', BASE.replace('Host: plane\r\n', '')],
  ['two Host', withLine('Host: other')],
  ['two Host, one in uppercase', withLine('HOST: plane')],
  ['obs-fold (a line starting with SP)', BASE.replace('Authorization: Bearer kvt_abc\r\n', 'Authorization: Bearer\r\n kvt_abc\r\n')],
  ['obs-fold (a line starting with HTAB)', BASE.replace('Authorization: Bearer kvt_abc\r\n', 'Authorization: Bearer\r\n\tkvt_abc\r\n')],
  ['a space before the colon', BASE.replace('Host: plane', 'Host : plane')],
  ['a tab before the colon', BASE.replace('Content-Length: 3', 'Content-Length\t: 3')],
  ['an empty header name', withLine(': value')],
  ['a line without a colon', withLine('NoColonHere')],
  ['a name with a character that is no tchar', withLine('X(y): 1')],
  ['a bare LF ending a header line', BASE.replace('Host: plane\r\n', 'Host: plane\n')],
  ['a bare LF ending the request line', BASE.replace('HTTP/1.1\r\n', 'HTTP/1.1\n')],
  ['a bare LF in a value', withLine('X-A: a\nb')],
  ['a bare CR in a value', withLine('X-A: a\rb')],
  ['a bare CR ending a header line', BASE.replace('Host: plane\r\n', 'Host: plane\r\r\n')],
  ['a NUL in a value', withLine('X-A: a\0b')],
  ['a NUL in the target', BASE.replace('/keys/k', '/keys/k\0')],
  ['a DEL in a value', withLine('X-A: a\x7fb')],
  ['a control character in a value', withLine('X-A: a\x01b')],
  ['a byte >= 0x80 in a value', withLine('X-A: caf\xe9')],
  ['a byte 0xff in the Authorization', BASE.replace('kvt_abc', 'kvt_ab\xff')],
  ['a byte >= 0x80 in the target', BASE.replace('/keys/k', '/keys/\x80')],
  ['a tab in the target', BASE.replace('/keys/k', '/keys/k\tx')],
  ['a leading empty line', `\r\n${BASE}`],
  ['two spaces after the method', BASE.replace('PUT /', 'PUT  /')],
  ['two spaces before the version', BASE.replace(' HTTP/1.1', '  HTTP/1.1')],
  ['a tab instead of a space', BASE.replace('PUT /', 'PUT\t/')],
  ['a space after the version', BASE.replace('HTTP/1.1\r\n', 'HTTP/1.1 \r\n')],
  ['a space inside the target', BASE.replace('/keys/k', '/keys/k x')],
  ['a target not starting with /', BASE.replace('PUT /kv/', 'PUT kv/')],
  ['an absolute-form target', BASE.replace('PUT /kv/', 'PUT http://plane/kv/')],
  ['an asterisk target', BASE.replace('/kv/v1/ns/app/keys/k', '*')],
  ['no target', BASE.replace('/kv/v1/ns/app/keys/k ', '')],
  ['no header at all', 'GET / HTTP/1.1\r\n\r\n'],
];

describe('readPlainHead', () => {
  it('reads a plain GET, PUT and DELETE: method, target, authorization, body length, close, where the body starts', () => {
    const get = 'GET /kv/v1/ns/app/keys/k?x=1 HTTP/1.1\r\nHost: plane\r\nAuthorization: Bearer kvt_abc\r\nAccept: */*\r\n\r\n';
    expect(read(get)).toEqual({
      method: 'GET',
      target: '/kv/v1/ns/app/keys/k?x=1',
      authorization: 'Bearer kvt_abc',
      contentLength: 0,
      close: false,
      bodyStart: get.length,
    });
    // Names in any case; values without the whitespace around them; Connection as a list.
    const put = 'PUT /a HTTP/1.1\r\nhost: plane\r\ncontent-LENGTH: 5\r\nCONNECTION: keep-alive, Close\r\nauthorization:\t Bearer t \t\r\n\r\nhello';
    expect(read(put)).toEqual({ method: 'PUT', target: '/a', authorization: 'Bearer t', contentLength: 5, close: true, bodyStart: put.length - 5 });
    const del = 'DELETE /kv/x HTTP/1.1\r\nHost: h\r\nContent-Length:007 \r\nConnection: keep-alive\r\n\r\n';
    expect(read(del)).toEqual({ method: 'DELETE', target: '/kv/x', authorization: undefined, contentLength: 7, close: false, bodyStart: del.length });
    expect(read(BASE)).toEqual({
      method: 'PUT',
      target: '/kv/v1/ns/app/keys/k',
      authorization: 'Bearer kvt_abc',
      contentLength: 3,
      close: false,
      bodyStart: BASE.length,
    });
  });

  it('reads a head from an offset (the next pipelined request): bodyStart is in the whole buffer', () => {
    const first = `${BASE}abc`;
    const second = 'GET /kv/two HTTP/1.1\r\nHost: plane\r\nConnection: close\r\n\r\n';
    const buf = bytes(first + second);
    expect(readPlainHead(buf, first.length, MAX_HEAD)).toEqual({
      method: 'GET',
      target: '/kv/two',
      authorization: undefined,
      contentLength: 0,
      close: true,
      bodyStart: buf.length,
    });
    // The first head's own end is found, not the second's.
    expect(readPlainHead(buf, 0, MAX_HEAD)).toMatchObject({ method: 'PUT', bodyStart: BASE.length, contentLength: 3 });
    // The offset counts: the second head alone within the limit is read even when the whole buffer is not.
    expect(readPlainHead(buf, first.length, second.length)).toMatchObject({ target: '/kv/two' });
  });

  it("is 'incomplete' for every proper prefix of a plain head", () => {
    const whole = bytes(BASE);
    for (let n = 0; n < whole.length; n++) expect(readPlainHead(whole.subarray(0, n), 0, MAX_HEAD), `first ${n} bytes`).toBe('incomplete');
    expect(readPlainHead(whole, 0, MAX_HEAD)).not.toBe('incomplete');
  });

  it('the base of the unusual cases is plain', () => {
    expect(read(BASE)).toMatchObject({ method: 'PUT', contentLength: 3 });
    // And the cases are all different heads (none is BASE by a replace that did not match).
    for (const [name, head] of UNUSUAL) expect(head, name).not.toBe(BASE);
  });

  it.each(UNUSUAL)("is 'unusual' for %s", (_name, head) => {
    expect(read(head)).toBe('unusual');
  });

  it("is 'unusual' for a head over maxHeadBytes, whether its end has arrived or not", () => {
    const whole = bytes(BASE);
    expect(readPlainHead(whole, 0, whole.length)).toMatchObject({ bodyStart: whole.length });
    expect(readPlainHead(whole, 0, whole.length - 1)).toBe('unusual');
    // Its end not here yet: 'incomplete' while what came is within the limit, 'unusual' past it.
    const partial = whole.subarray(0, whole.length - 1);
    expect(readPlainHead(partial, 0, partial.length)).toBe('incomplete');
    expect(readPlainHead(partial, 0, partial.length - 1)).toBe('unusual');
    const long = bytes(`GET /kv/x HTTP/1.1\r\nHost: plane\r\nX-Pad: ${'p'.repeat(MAX_HEAD)}\r\n`);
    expect(readPlainHead(long, 0, MAX_HEAD)).toBe('unusual');
    expect(readPlainHead(Buffer.concat([long, bytes('\r\n')]), 0, MAX_HEAD)).toBe('unusual');
    // The limit counts from `from`: what came before does not count.
    expect(readPlainHead(Buffer.concat([bytes('x'.repeat(100)), whole]), 100, whole.length)).toMatchObject({ bodyStart: 100 + whole.length });
  });

  // Node 24's HTTP server answers 431 to a head of more than 1000 header fields (with its default
  // maxHeadersCount), even within its 16 KiB maxHeaderSize: such a head is not plain (Node refuses it).
  it("is 'unusual' for a head of more than 1000 header fields within maxHeadBytes (Node answers 431)", () => {
    const many = `GET /kv/x HTTP/1.1\r\nHost: plane\r\n${'X:a\r\n'.repeat(1000)}\r\n`;
    expect(many.length).toBeLessThan(MAX_HEAD);
    expect(read(many)).toBe('unusual');
  });
});

/** Node's HTTP server as the reference: what it read of each request (by the client's port). */
interface NodeRead {
  method: string;
  url: string;
  authorization: string | undefined;
  contentLength: string | undefined;
  body: Buffer | null;
}

describe('readPlainHead against Node’s HTTP parser', () => {
  let server: http.Server;
  let port: number;
  const seen = new Map<number, NodeRead[]>();

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      const record: NodeRead = {
        method: req.method!,
        url: req.url!,
        authorization: req.headers.authorization,
        contentLength: req.headers['content-length'],
        body: null,
      };
      const remote = req.socket.remotePort!;
      seen.set(remote, [...(seen.get(remote) ?? []), record]);
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        record.body = Buffer.concat(chunks);
        res.end('ok');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const NEXT = 'GET /__next HTTP/1.1\r\nHost: plane\r\n\r\n';

  /** Sends `head` (and, for a plain one, a body of its length and one more request) to Node; what differs from `plain`, or null. */
  async function differs(head: Buffer, plain: PlainHead): Promise<string | null> {
    const client = await RawClient.connect(port);
    const local = client.socket.localPort!;
    try {
      const framed = plain.contentLength <= MiB;
      const body = Buffer.alloc(framed ? plain.contentLength : 0);
      for (let i = 0; i < body.length; i++) body[i] = 0x61 + (i % 26);
      // The head, the body we would take, and a request right after: Node must frame the body exactly
      // as we do. (Not after `Connection: close`: Node refuses what follows it with a 400.)
      const next = framed && !plain.close;
      await client.write(framed ? Buffer.concat([head, body, ...(next ? [bytes(NEXT)] : [])]) : head);
      const wanted = next ? 2 : 1;
      const deadline = Date.now() + 2_000;
      while ((seen.get(local)?.length ?? 0) < wanted || (framed && seen.get(local)![wanted - 1].body === null)) {
        if (client.closed || Date.now() > deadline) break;
        await sleep(1);
      }
      const got = seen.get(local) ?? [];
      const problems: string[] = [];
      if (got.length < wanted) {
        const answer = await client.answer(200).catch(() => null);
        return `Node read ${got.length} request(s), answered ${answer ? answer.status : 'nothing'}`;
      }
      const [first] = got;
      if (first.method !== plain.method) problems.push(`method ${first.method}`);
      if (first.url !== plain.target) problems.push(`url ${JSON.stringify(first.url)}`);
      if (first.authorization !== plain.authorization) problems.push(`authorization ${JSON.stringify(first.authorization)}`);
      if (Number(first.contentLength ?? 0) !== plain.contentLength) problems.push(`content-length ${first.contentLength}`);
      if (framed) {
        if (first.body === null || !first.body.equals(body)) problems.push(`body of ${first.body?.length ?? 'not all'} bytes`);
        if (next && got[1].url !== '/__next') problems.push(`next request ${JSON.stringify(got[1].url)}`);
      }
      if (got.length > wanted) problems.push(`${got.length} requests`);
      return problems.length ? problems.join(', ') : null;
    } finally {
      client.destroy();
      seen.delete(local);
    }
  }

  /** mulberry32: the fuzz is the same on every run. */
  function prng(seed: number): () => number {
    let a = seed;
    return () => {
      a = (a + 0x6d2b79f5) | 0;
      let t = Math.imul(a ^ (a >>> 15), 1 | a);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }

  const SEEDS = [
    BASE,
    'GET /kv/v1/ns/app/keys/k?x=1 HTTP/1.1\r\nHost: plane\r\nAuthorization: Bearer kvt_abc\r\nAccept: */*\r\nUser-Agent: t/1\r\n\r\n',
    'PUT /a HTTP/1.1\r\nhost: plane\r\ncontent-LENGTH: 5\r\nCONNECTION: keep-alive, Close\r\nauthorization:\t Bearer t \t\r\n\r\n',
    'DELETE /kv/x HTTP/1.1\r\nHost:\r\nContent-Length:007 \r\nX-Empty:\r\n\r\n',
    'GET /c"<>{}|\\^`#frag?q=1&r=%00 HTTP/1.1\r\nHost: h\r\nAuthorization: Basic  a b  \r\n\r\n',
    'PUT /b HTTP/1.1\r\nHost: h\r\nContent-Length: 999999999999999\r\n\r\n',
    withLine('Transfer-Encoding: chunked'),
    withLine('Expect: 100-continue'),
    withLine('Connection: upgrade'),
    withLine('Content-Length: 4'),
    withLine('Authorization: Bearer two'),
  ];

  /** One to three changes: a byte replaced or flipped, a special byte inserted, a byte removed, a line doubled. */
  function mutate(head: string, random: () => number): Buffer {
    const b = [...bytes(head)];
    const specials = [0x0d, 0x0a, 0x20, 0x09, 0x3a, 0x00, 0x80, 0x2c];
    const changes = 1 + Math.floor(random() * 3);
    for (let k = 0; k < changes; k++) {
      // Before the head's final CRLF: a change there only makes it 'incomplete'.
      const at = Math.floor(random() * (b.length - 2));
      switch (Math.floor(random() * 9)) {
        case 0:
          b[at] = Math.floor(random() * 256);
          break;
        case 1:
          b[at] ^= 1 << Math.floor(random() * 8);
          break;
        case 2:
          b.splice(at, 0, specials[Math.floor(random() * specials.length)]);
          break;
        case 3:
          b.splice(at, 1);
          break;
        case 4: {
          const lines = Buffer.from(b).toString('latin1').split('\r\n');
          const i = Math.floor(random() * (lines.length - 2));
          lines.splice(i, 0, lines[i]);
          b.splice(0, b.length, ...bytes(lines.join('\r\n')));
          break;
        }
        case 5:
        case 6:
          // A printable byte: keeps many heads plain, with names and values Node must read as we do.
          b[at] = 0x20 + Math.floor(random() * 95);
          break;
        default:
          b.splice(at, 0, 0x20 + Math.floor(random() * 95));
      }
    }
    return Buffer.from(b);
  }

  it('whatever it reads as plain, Node reads alike: method, url, Content-Length framing, Authorization', async () => {
    const started = Date.now();
    const cases: [string, Buffer][] = [];
    for (const head of SEEDS) cases.push([JSON.stringify(head), bytes(head)]);
    for (const [name, head] of UNUSUAL) cases.push([name, bytes(head)]);
    const random = prng(0x5eed);
    // Mutants of the plain heads, and of the unusual ones (a change may make one plain: a name broken, a line doubled away).
    const unusual = UNUSUAL.map(([, head]) => head);
    for (let i = 0; i < 1_600; i++) {
      const seed = i < 1_200 ? SEEDS[Math.floor(random() * SEEDS.length)] : unusual[Math.floor(random() * unusual.length)];
      const head = mutate(seed, random);
      cases.push([JSON.stringify(head.toString('latin1')), head]);
    }
    const problems: string[] = [];
    let plain = 0;
    let fuzzPlain = 0;
    for (const [index, [name, head]] of cases.entries()) {
      const reading = readPlainHead(head, 0, MAX_HEAD);
      if (typeof reading === 'string') continue;
      plain++;
      if (index >= SEEDS.length + UNUSUAL.length) fuzzPlain++;
      const problem = await differs(head, reading);
      if (problem) problems.push(`${name}: ${problem}`);
    }
    expect(problems).toEqual([]);
    expect(Date.now() - started).toBeLessThan(5_000);
    // The corpus has teeth: the seeds but the 5 unusual ones are plain, and so are many mutants.
    expect(plain - fuzzPlain).toBe(SEEDS.length - 5);
    expect(fuzzPlain).toBeGreaterThan(150);
  }, 30_000);
});

/** A reader on a real listener as server.ts runs it, handing off to a real HTTP server. */
interface PlainServer {
  port: number;
  /** The requests `handle` was given, in order. */
  requests: PlainRequest[];
  connections: PlainHttpConnection[];
  /** The server's side of each connection. */
  sockets: net.Socket[];
  /** What the HTTP server answered (after a hand-off). */
  nodeSeen: { method: string; url: string; body: string }[];
  errors: Error[];
  close(): Promise<void>;
}

type ServeOptions = Partial<Omit<PlainHttpOptions, 'handOff'>>;

/** An answer echoing the request (JSON), `X-Served-By: plain`. */
const echo = (request: PlainRequest): PlainResponse => ({
  status: 200,
  headers: 'X-Served-By: plain\r\nContent-Type: application/json\r\n',
  body: JSON.stringify({ method: request.method, target: request.target, authorization: request.authorization, body: request.body.toString('latin1') }),
});

const servers: PlainServer[] = [];

async function plainServer(options: ServeOptions = {}): Promise<PlainServer> {
  const { handle = async (r: PlainRequest) => echo(r), ...rest } = options;
  const nodeServer = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('latin1');
      state.nodeSeen.push({ method: req.method!, url: req.url!, body });
      res.setHeader('X-Served-By', 'node');
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ method: req.method, url: req.url, body }));
    });
  });
  // As the plane's: it listens (on loopback) for its own timeouts' sake; connections come by 'connection'.
  await new Promise<void>((resolve) => nodeServer.listen(0, '127.0.0.1', () => resolve()));
  const front = net.createServer((socket) => {
    state.sockets.push(socket);
    socket.once('data', (head: Buffer) => {
      const connection = servePlainHttp(socket, head, {
        accepts: () => true,
        handle: (request) => {
          state.requests.push(request);
          return handle(request);
        },
        handOff: (s, restBytes) => {
          // server.ts toHttpServer
          nodeServer.emit('connection', s);
          if (restBytes.length) s.emit('data', restBytes);
        },
        onError: (err) => state.errors.push(err),
        ...rest,
      });
      state.connections.push(connection);
    });
  });
  await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', () => resolve()));
  const state: PlainServer = {
    port: (front.address() as AddressInfo).port,
    requests: [],
    connections: [],
    sockets: [],
    nodeSeen: [],
    errors: [],
    close: async () => {
      for (const socket of state.sockets) socket.destroy();
      nodeServer.closeAllConnections();
      await Promise.all([new Promise((resolve) => front.close(resolve)), new Promise((resolve) => nodeServer.close(resolve))]);
    },
  };
  servers.push(state);
  return state;
}

afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

/** A plainServer with `options` and a raw client connected to it. */
async function served(options: ServeOptions = {}): Promise<{ p: PlainServer; c: RawClient }> {
  const p = await plainServer(options);
  return { p, c: await RawClient.connect(p.port) };
}

/** Once the server's side of a connection has read 4 MiB (or 5 s have passed), until it reads no more (150 ms without a byte). */
async function untilReadingStops(server: net.Socket): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (server.bytesRead < 4 * MiB && Date.now() < deadline) await sleep(10);
  let last = -1;
  while (server.bytesRead !== last) {
    last = server.bytesRead;
    await sleep(150);
  }
}

const IMF_FIXDATE = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d{2}:\d{2}:\d{2} GMT$/;
const req = (method: string, target: string, body = '', extra = '') =>
  `${method} ${target} HTTP/1.1\r\nHost: plane\r\nAuthorization: Bearer kvt_abc\r\n${extra}${body || method === 'PUT' ? `Content-Length: ${Buffer.byteLength(body, 'latin1')}\r\n` : ''}\r\n${body}`;

describe('servePlainHttp', () => {
  it('keeps a connection alive: several requests answered in turn, with Date, Connection, Keep-Alive and the right Content-Length', async () => {
    const text = 'héllo wörld €'; // multi-byte UTF-8: its length in bytes, not characters
    const { p, c } = await served({
      keepAliveMs: 5_000,
      handle: async (r) =>
        r.method === 'GET' ? { status: 200, headers: 'X-Served-By: plain\r\n', body: text } : { status: 204, headers: 'X-Served-By: plain\r\n' },
    });
    await c.write(req('PUT', '/kv/a', 'v\x00\xff'));
    const put = await c.answer();
    expect(put.head).toMatch(/^HTTP\/1\.1 204 No Content\r\n/);
    expect(put.headers).not.toHaveProperty('content-length');
    expect(put.headers).toMatchObject({ 'x-served-by': 'plain', connection: 'keep-alive', 'keep-alive': 'timeout=5' });
    expect(put.headers.date).toMatch(IMF_FIXDATE);
    expect(Math.abs(Date.parse(put.headers.date) - Date.now())).toBeLessThan(5_000);
    expect(put.body.length).toBe(0);

    await c.write(req('GET', '/kv/a'));
    const get = await c.answer();
    expect(get.head).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(get.headers['content-length']).toBe(String(Buffer.byteLength(text)));
    expect(Buffer.byteLength(text)).toBeGreaterThan(text.length);
    expect(get.body.toString('utf8')).toBe(text);
    expect(get.headers).toMatchObject({ connection: 'keep-alive', 'keep-alive': 'timeout=5' });

    await c.write(req('DELETE', '/kv/a'));
    expect((await c.answer()).status).toBe(204);
    expect(c.pending).toBe(0);
    expect(p.sockets).toHaveLength(1);
    expect(p.requests.map((r) => [r.method, r.target, r.authorization, r.body.toString('latin1')])).toEqual([
      ['PUT', '/kv/a', 'Bearer kvt_abc', 'v\x00\xff'],
      ['GET', '/kv/a', 'Bearer kvt_abc', ''],
      ['DELETE', '/kv/a', 'Bearer kvt_abc', ''],
    ]);
    expect(c.closed).toBe(false);
    c.destroy();
  });

  it('answers pipelined requests in order, one at a time, whatever time each takes', async () => {
    let running = 0;
    let most = 0;
    const delays: Record<string, number> = { '/kv/1': 80, '/kv/2': 0, '/kv/3': 30, '/kv/4': 5 };
    const { c } = await served({
      handle: async (r) => {
        most = Math.max(most, ++running);
        await sleep(delays[r.target]);
        running--;
        return echo(r);
      },
    });
    await c.write(req('GET', '/kv/1') + req('PUT', '/kv/2', 'two') + req('DELETE', '/kv/3') + req('PUT', '/kv/4', 'four'));
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(JSON.parse((await c.answer()).body.toString()));
    expect(answers.map((a) => [a.target, a.body])).toEqual([
      ['/kv/1', ''],
      ['/kv/2', 'two'],
      ['/kv/3', ''],
      ['/kv/4', 'four'],
    ]);
    expect(most).toBe(1);
    c.destroy();
  });

  it('reads a head and a body that come in pieces: the head alone, then the body byte by byte', async () => {
    const { p, c } = await served();
    const body = 'ab\x00\xff\r\n\r\ncd';
    const head = `PUT /kv/split HTTP/1.1\r\nHost: plane\r\nContent-Length: ${body.length}\r\n\r\n`;
    await c.write(head.slice(0, 10));
    await sleep(20);
    await c.write(head.slice(10));
    await sleep(20);
    for (const ch of body) {
      expect(p.requests).toHaveLength(0);
      await c.write(ch);
      await sleep(5);
    }
    const answer = await c.answer();
    expect(JSON.parse(answer.body.toString())).toMatchObject({ target: '/kv/split', body });
    // A body split across writes with the next head in the same write as its end.
    await c.write(`PUT /kv/two HTTP/1.1\r\nHost: plane\r\nContent-Length: 6\r\n\r\nabc`);
    await sleep(20);
    await c.write(`def${req('GET', '/kv/three')}`);
    expect(JSON.parse((await c.answer()).body.toString())).toMatchObject({ target: '/kv/two', body: 'abcdef' });
    expect(JSON.parse((await c.answer()).body.toString())).toMatchObject({ target: '/kv/three', body: '' });
    expect(p.requests).toHaveLength(3);
    expect(p.nodeSeen).toHaveLength(0);
    c.destroy();
  });

  it('Connection: close: the answer says so, then the connection ends (what was pipelined after is not served)', async () => {
    const { p, c } = await served();
    await c.write(req('GET', '/kv/last', '', 'Connection: close\r\n') + req('GET', '/kv/never'));
    const answer = await c.answer();
    expect(answer.status).toBe(200);
    expect(answer.headers.connection).toBe('close');
    expect(answer.headers).not.toHaveProperty('keep-alive');
    expect(await c.closedWithin(1_000)).toBe('closed');
    expect(p.requests.map((r) => r.target)).toEqual(['/kv/last']);
    await p.connections[0].ended;
  });

  it('hands the connection off mid-way (a chunked POST): Node’s server answers it and everything after it, bodies whole', async () => {
    const { p, c } = await served();
    await c.write(req('GET', '/kv/first'));
    expect((await c.answer()).headers['x-served-by']).toBe('plain');
    await c.write('POST /kv/chunked HTTP/1.1\r\nHost: plane\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n');
    const chunked = await c.answer();
    expect(chunked.headers['x-served-by']).toBe('node');
    expect(JSON.parse(chunked.body.toString())).toEqual({ method: 'POST', url: '/kv/chunked', body: 'hello world' });
    await p.connections[0].ended;
    // The rest of the connection is Node's, plain or not.
    await c.write(req('PUT', '/kv/after', 'after\x00'));
    const after = await c.answer();
    expect(after.headers['x-served-by']).toBe('node');
    expect(JSON.parse(after.body.toString())).toEqual({ method: 'PUT', url: '/kv/after', body: 'after\x00' });
    expect(p.requests.map((r) => r.target)).toEqual(['/kv/first']);
    expect(p.sockets).toHaveLength(1);
    c.destroy();
  });

  it('hands off with every byte not answered yet: all pipelined in one write, answered in order', async () => {
    const { c } = await served({ handle: async (r) => (await sleep(30), echo(r)) });
    await c.write(
      req('PUT', '/kv/1', 'one') +
        'POST /kv/2 HTTP/1.1\r\nHost: plane\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n' +
        req('PUT', '/kv/3', 'three') +
        req('GET', '/kv/4'),
    );
    const answers = [];
    for (let i = 0; i < 4; i++) answers.push(await c.answer());
    expect(answers.map((a) => a.headers['x-served-by'])).toEqual(['plain', 'node', 'node', 'node']);
    expect(answers.map((a) => JSON.parse(a.body.toString()).body)).toEqual(['one', 'two', 'three', '']);
    expect(answers.map((a) => JSON.parse(a.body.toString()).url ?? JSON.parse(a.body.toString()).target)).toEqual(['/kv/1', '/kv/2', '/kv/3', '/kv/4']);
    c.destroy();
  });

  it('hands off an Expect: 100-continue PUT: Node says 100 Continue, reads the body, and serves what follows', async () => {
    const { c } = await served();
    await c.write(req('GET', '/kv/first'));
    expect((await c.answer()).headers['x-served-by']).toBe('plain');
    await c.write('PUT /kv/expect HTTP/1.1\r\nHost: plane\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n');
    expect((await c.answer()).status).toBe(100);
    await c.write('body');
    const put = await c.answer();
    expect(put.headers['x-served-by']).toBe('node');
    expect(JSON.parse(put.body.toString())).toEqual({ method: 'PUT', url: '/kv/expect', body: 'body' });
    await c.write(req('GET', '/kv/later'));
    expect(JSON.parse((await c.answer()).body.toString())).toEqual({ method: 'GET', url: '/kv/later', body: '' });
    c.destroy();
  });

  it('hands off a body larger than maxBodyBytes (even before it has all come), and keeps one of exactly maxBodyBytes', async () => {
    const { p, c } = await served({ maxBodyBytes: 10 });
    await c.write(req('PUT', '/kv/ten', '0123456789'));
    expect((await c.answer()).headers['x-served-by']).toBe('plain');
    await c.write('PUT /kv/eleven HTTP/1.1\r\nHost: plane\r\nContent-Length: 11\r\n\r\n01234');
    await sleep(30);
    await c.write('56789X');
    const big = await c.answer();
    expect(big.headers['x-served-by']).toBe('node');
    expect(JSON.parse(big.body.toString())).toEqual({ method: 'PUT', url: '/kv/eleven', body: '0123456789X' });
    expect(p.requests.map((r) => r.target)).toEqual(['/kv/ten']);
    c.destroy();
  });

  it('hands off a target `accepts` refuses, the first request of the connection or a later one', async () => {
    const { p, c: first } = await served({ accepts: (target) => target.startsWith('/kv/') });
    await first.write(req('GET', '/healthz'));
    expect((await first.answer()).headers['x-served-by']).toBe('node');
    const later = await RawClient.connect(p.port);
    await later.write(req('GET', '/kv/a') + req('GET', '/other?x=1'));
    expect((await later.answer()).headers['x-served-by']).toBe('plain');
    const other = await later.answer();
    expect(other.headers['x-served-by']).toBe('node');
    expect(JSON.parse(other.body.toString()).url).toBe('/other?x=1');
    expect(p.requests.map((r) => r.target)).toEqual(['/kv/a']);
    first.destroy();
    later.destroy();
  });

  it('answers 500 and closes when `handle` rejects (onError is told)', async () => {
    const { p, c } = await served({
      handle: async (r) => {
        if (r.target === '/kv/boom') throw new Error('boom');
        return echo(r);
      },
    });
    await c.write(req('GET', '/kv/ok') + req('GET', '/kv/boom') + req('GET', '/kv/never'));
    expect((await c.answer()).status).toBe(200);
    const failed = await c.answer();
    expect(failed.status).toBe(500);
    expect(failed.head).toMatch(/^HTTP\/1\.1 500 Internal Server Error\r\n/);
    expect(failed.headers.connection).toBe('close');
    expect(failed.headers['content-length']).toBe('0');
    expect(await c.closedWithin(1_000)).toBe('closed');
    expect(p.errors.map((e) => e.message)).toEqual(['boom']);
    expect(p.requests.map((r) => r.target)).toEqual(['/kv/ok', '/kv/boom']);
  });

  it('shutdown() closes an idle connection at once and resolves `ended`', async () => {
    const { p, c } = await served();
    await c.write(req('GET', '/kv/a'));
    expect((await c.answer()).status).toBe(200);
    let ended = false;
    void p.connections[0].ended.then(() => (ended = true));
    await sleep(20);
    expect(ended).toBe(false);
    p.connections[0].shutdown();
    expect(await c.closedWithin(1_000)).toBe('closed');
    await p.connections[0].ended;
  });

  it('shutdown() while a request is being answered: that answer says Connection: close, then the connection ends', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const handling = new Promise<void>((resolve) => (started = resolve));
    const { p, c } = await served({
      handle: async (r) => {
        started();
        await gate;
        return echo(r);
      },
    });
    await c.write(req('PUT', '/kv/slow', 'x'));
    await handling;
    p.connections[0].shutdown();
    await sleep(50);
    expect(c.closed).toBe(false);
    release();
    const answer = await c.answer();
    expect(answer.status).toBe(200);
    expect(JSON.parse(answer.body.toString())).toMatchObject({ target: '/kv/slow', body: 'x' });
    expect(answer.headers.connection).toBe('close');
    expect(await c.closedWithin(1_000)).toBe('closed');
    await p.connections[0].ended;
  });

  it('shutdown() while an answer waits for the socket to drain: once it is out, the connection ends', async () => {
    const big = Buffer.alloc(16 * MiB, 0x61);
    const { p, c } = await served({ keepAliveMs: 20_000, handle: async () => ({ status: 200, headers: '', body: big }) });
    c.socket.pause(); // not read yet: the answer cannot all go out
    await c.write(req('GET', '/kv/big'));
    const server = p.sockets[0];
    const deadline = Date.now() + 2_000;
    while (server.writableLength === 0 && Date.now() < deadline) await sleep(5);
    expect(server.writableLength).toBeGreaterThan(0);
    p.connections[0].shutdown();
    c.socket.resume();
    const answer = await c.answer(5_000);
    expect(answer.body.length).toBe(big.length);
    // The plane's close() awaits `ended`: it must not wait for the keep-alive timeout.
    expect(await c.closedWithin(1_500)).toBe('closed');
  });

  it('closes a connection whose head does not all come within headersTimeoutMs, and not much before', async () => {
    const { p, c } = await served({ headersTimeoutMs: 300 });
    const sent = Date.now();
    await c.write('GET /kv/a HTTP/1.1\r\nHo');
    expect(await c.closedWithin(2_000)).toBe('closed');
    const after = c.closedAt - sent;
    expect(after).toBeGreaterThanOrEqual(250);
    expect(after).toBeLessThan(1_000);
    expect(p.requests).toHaveLength(0);
  });

  it('closes a head that trickles in past headersTimeoutMs, though bytes keep coming', async () => {
    const { c } = await served({ headersTimeoutMs: 300 });
    const sent = Date.now();
    await c.write('GET /kv/a HTTP/1.1\r\n');
    for (let i = 0; i < 20 && !c.closed; i++) {
      await sleep(100);
      await c.write('X: y\r\n').catch(() => undefined);
    }
    expect(c.closed).toBe(true);
    expect(c.closedAt - sent).toBeGreaterThanOrEqual(250);
    expect(c.closedAt - sent).toBeLessThan(1_000);
  });

  it('closes an idle keep-alive connection after keepAliveMs, and not much before', async () => {
    const { p, c } = await served({ keepAliveMs: 300 });
    await c.write(req('GET', '/kv/a'));
    await c.answer();
    const answered = Date.now();
    expect(await c.closedWithin(2_000)).toBe('closed');
    expect(c.closedAt - answered).toBeGreaterThanOrEqual(250);
    expect(c.closedAt - answered).toBeLessThan(1_000);
    await p.connections[0].ended;
  });

  // The plane runs it with keepAliveMs 65 s and headersTimeoutMs 60 s (Node's defaults, server.ts):
  // the answers say `Keep-Alive: timeout=65`, so an idle connection must live that long.
  it('keeps an idle connection for the Keep-Alive timeout it announces, also when headersTimeoutMs is shorter', async () => {
    const { c } = await served({ keepAliveMs: 2_000, headersTimeoutMs: 400 });
    await c.write(req('GET', '/kv/a'));
    const answer = await c.answer();
    expect(answer.headers['keep-alive']).toBe('timeout=2');
    expect(await c.closedWithin(1_200)).toBe('open');
    expect(await c.closedWithin(2_000)).toBe('closed');
  });

  it('does not read without bound from a client pipelining far ahead while a request waits; then answers all in order, and a hand-off after', async () => {
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const { p, c } = await served({
      handle: async (r) => {
        if (r.target === '/kv/0') await gate;
        return { status: 200, headers: '', body: r.target };
      },
    });
    const body = Buffer.alloc(60 * 1024, 0x78);
    const n = 200; // about 12 MiB
    const parts: Buffer[] = [];
    for (let i = 0; i < n; i++) parts.push(bytes(`PUT /kv/${i} HTTP/1.1\r\nHost: plane\r\nContent-Length: ${body.length}\r\n\r\n`), body);
    parts.push(bytes('POST /kv/tail HTTP/1.1\r\nHost: plane\r\nTransfer-Encoding: chunked\r\n\r\n4\r\ntail\r\n0\r\n\r\n'));
    const all = Buffer.concat(parts);
    c.socket.write(all);
    const server = p.sockets[0];
    await untilReadingStops(server);
    expect(server.isPaused()).toBe(true);
    expect(server.bytesRead).toBeGreaterThan(4 * MiB);
    expect(server.bytesRead).toBeLessThan(6 * MiB);
    expect(p.requests).toHaveLength(1);
    release();
    for (let i = 0; i < n; i++) expect((await c.answer()).body.toString()).toBe(`/kv/${i}`);
    const tail = await c.answer();
    expect(tail.headers['x-served-by']).toBe('node');
    expect(JSON.parse(tail.body.toString())).toEqual({ method: 'POST', url: '/kv/tail', body: 'tail' });
    expect(server.bytesRead).toBe(all.length);
    c.destroy();
  }, 20_000);

  it('does not read without bound from a client that sends requests and never reads the answers', async () => {
    const answer = Buffer.alloc(256 * 1024, 0x61);
    const { p, c } = await served({ handle: async () => ({ status: 200, headers: '', body: answer }) });
    c.socket.pause();
    const one = bytes(`GET /kv/x HTTP/1.1\r\nHost: plane\r\nX-Pad: ${'p'.repeat(4000)}\r\n\r\n`);
    const n = 3_000; // about 12 MiB of requests, 750 MiB of answers
    c.socket.write(Buffer.concat(Array.from({ length: n }, () => one)));
    const server = p.sockets[0];
    await untilReadingStops(server);
    expect(server.isPaused()).toBe(true);
    expect(server.bytesRead).toBeLessThan(6 * MiB);
    // One answer at most waits in the socket's own buffer (the kernel's hold the others).
    expect(server.writableLength).toBeLessThanOrEqual(answer.length + 1024);
    expect(p.requests.length).toBeLessThan(500);
    c.destroy();
    await p.connections[0].ended;
  }, 20_000);
});

describe('render', () => {
  it('one buffer: status line, the given headers, Date, Connection, Content-Length (none for 204 and 304), the body', () => {
    const ok = render({ status: 200, headers: 'X-A: 1\r\n', body: 'é' }, false, 65_000).toString('latin1');
    expect(ok).toMatch(
      /^HTTP\/1\.1 200 OK\r\nX-A: 1\r\nDate: [^\r]+ GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=65\r\nContent-Length: 2\r\n\r\n\xc3\xa9$/,
    );
    expect(render({ status: 304, headers: '' }, true, 65_000).toString('latin1')).toMatch(
      /^HTTP\/1\.1 304 Not Modified\r\nDate: [^\r]+\r\nConnection: close\r\n\r\n$/,
    );
    expect(render({ status: 204, headers: '' }, false, 5_500).toString('latin1')).not.toContain('Content-Length');
    const raw = render({ status: 599, headers: '', body: Buffer.from([0, 255]) }, true, 1_000);
    expect(raw.toString('latin1')).toMatch(/^HTTP\/1\.1 599 Unknown\r\n/);
    expect(raw.toString('latin1')).toContain('Content-Length: 2\r\n');
    expect(raw.subarray(-2).equals(Buffer.from([0, 255]))).toBe(true);
  });
});
