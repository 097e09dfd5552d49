import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile, chmod } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { c as createTar } from 'tar';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { checkSourceProblems, fetchSource, SourceError, sourceProblems } from '../domain/caas/source';

/**
 * CaaS sources (DECISIONS "CaaS", "Data planes and outbound fetches"): the create-time check of
 * `{type: "archive", url}`, and the fetch and unpacking of the archive against a loopback server,
 * malicious archives included (written here header by header, since node-tar refuses to make some).
 */
const secure = { allowInsecure: false };
const insecure = { allowInsecure: true };
const ok = (url: string) => ({ type: 'archive', url });

describe('sourceProblems', () => {
  it('accepts an https archive URL on a public host, without asking DNS', () => {
    expect(sourceProblems(ok('https://example.com/app.tar.gz'), secure)).toEqual([]);
    expect(sourceProblems(ok('https://93.184.215.14/releases/app-1.2.tgz?sig=abc'), secure)).toEqual([]);
    expect(sourceProblems(ok('https://no-such-host.invalid/app.tar.gz'), secure)).toEqual([]);
  });

  it('refuses http unless insecure targets are allowed', () => {
    expect(sourceProblems(ok('http://example.com/app.tar.gz'), secure)).toEqual([{ param: 'source.url', message: 'must use https' }]);
    expect(sourceProblems(ok('http://example.com/app.tar.gz'), insecure)).toEqual([]);
  });

  it('refuses loopback unless insecure targets are allowed; other private ranges always', () => {
    for (const url of ['https://127.0.0.1/a.tar.gz', 'https://[::1]:8443/a.tar.gz', 'https://localhost/a.tar.gz', 'https://app.localhost./a.tgz']) {
      expect(sourceProblems(ok(url), secure), url).toEqual([{ param: 'source.url', message: expect.stringMatching(/loopback address/) }]);
      expect(sourceProblems(ok(url), insecure), url).toEqual([]);
    }
    expect(sourceProblems(ok('http://127.0.0.1:8080/a.tar.gz'), insecure)).toEqual([]);
    for (const url of ['https://10.0.0.1/a.tar.gz', 'https://169.254.169.254/latest', 'https://[fd00::1]/a', 'http://192.168.1.1/a']) {
      expect(sourceProblems(ok(url), insecure), url).toEqual([{ param: 'source.url', message: expect.stringMatching(/publicly reachable/) }]);
    }
  });

  it('refuses userinfo, other schemes and what is not a URL', () => {
    expect(sourceProblems(ok('https://user:pw@example.com/a.tar.gz'), secure)[0]).toMatchObject({ param: 'source.url', message: /credentials/ });
    expect(sourceProblems(ok('https://token@example.com/a.tar.gz'), insecure)[0]).toMatchObject({ param: 'source.url', message: /credentials/ });
    for (const url of ['ftp://example.com/a.tar.gz', 'file:///etc/passwd', 'data:,x', 'example.com/a.tar.gz', '/a.tar.gz']) {
      expect(sourceProblems(ok(url), insecure), url).toEqual([{ param: 'source.url', message: expect.any(String) }]);
    }
    expect(sourceProblems(ok(`https://example.com/${'a'.repeat(2100)}`), secure)[0].message).toMatch(/at most 2048/);
  });

  it('refuses a source that is not {type: "archive", url}', () => {
    for (const source of [null, undefined, 'https://example.com/a.tar.gz', 42, [ok('https://example.com/a')]]) {
      expect(sourceProblems(source, secure), String(source)).toEqual([{ param: 'source', message: expect.any(String) }]);
    }
    expect(sourceProblems({ type: 'git', url: 'https://example.com/a.git' }, secure)).toEqual([{ param: 'source.type', message: expect.any(String) }]);
    expect(sourceProblems({ url: 'https://example.com/a.tar.gz' }, secure)).toEqual([{ param: 'source.type', message: expect.any(String) }]);
    expect(sourceProblems({ type: 'archive' }, secure)).toEqual([{ param: 'source.url', message: expect.any(String) }]);
    expect(sourceProblems({ type: 'archive', url: 7 }, secure)).toEqual([{ param: 'source.url', message: expect.any(String) }]);
    expect(sourceProblems({ type: 'archive', url: 'https://example.com/a.tar.gz', sha256: 'x' }, secure)).toEqual([
      { param: 'source.sha256', message: expect.any(String) },
    ]);
  });

  it('checkSourceProblems resolves the host as webhooks do and checks every address', async () => {
    const lookup = async (host: string) =>
      host === 'inside.example' ? [{ address: '10.1.2.3', family: 4 as const }] : [{ address: '93.184.215.14', family: 4 as const }];
    expect(await checkSourceProblems(ok('https://public.example/a.tar.gz'), secure, lookup)).toEqual([]);
    expect(await checkSourceProblems(ok('https://inside.example/a.tar.gz'), insecure, lookup)).toEqual([
      { param: 'source.url', message: 'host "inside.example" resolves to 10.1.2.3, which is a private address; source archives must be publicly reachable' },
    ]);
    const none = async () => {
      throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    };
    expect(await checkSourceProblems(ok('https://gone.example/a.tar.gz'), secure, none)).toEqual([
      { param: 'source.url', message: 'host "gone.example" does not resolve (ENOTFOUND)' },
    ]);
    // localhost is loopback without DNS; the form is checked before any lookup.
    expect(await checkSourceProblems(ok('http://localhost:9/a.tar.gz'), insecure, none)).toEqual([]);
    expect(await checkSourceProblems(ok('http://public.example/a.tar.gz'), secure, lookup)).toEqual([{ param: 'source.url', message: 'must use https' }]);
  });
});

// ---- archives, written block by block ----

interface RawEntry {
  path: string;
  /** Tar type flag: '0' file, '5' directory, '1' hard link, '2' symlink, '3' char device, '6' FIFO, ... */
  type?: string;
  body?: Buffer | string;
  mode?: number;
  linkpath?: string;
  /** Declared size, when it differs from the body's. */
  size?: number;
}

function octal(value: number, width: number): string {
  return value.toString(8).padStart(width - 1, '0') + '\0';
}

/** One ustar header (512 bytes) and the body padded to 512. */
function tarEntry(entry: RawEntry): Buffer {
  const body = Buffer.from(entry.body ?? '');
  const type = entry.type ?? (entry.path.endsWith('/') ? '5' : '0');
  const header = Buffer.alloc(512);
  header.write(entry.path, 0, 100, 'utf8');
  header.write(octal(entry.mode ?? (type === '5' ? 0o755 : 0o644), 8), 100, 'ascii');
  header.write(octal(1000, 8), 108, 'ascii');
  header.write(octal(1000, 8), 116, 'ascii');
  header.write(octal(entry.size ?? body.length, 12), 124, 'ascii');
  header.write(octal(1_700_000_000, 12), 136, 'ascii');
  header.write(type, 156, 'ascii');
  if (entry.linkpath) header.write(entry.linkpath, 157, 100, 'utf8');
  header.write('ustar\u000000', 257, 'ascii');
  header.fill(' ', 148, 156);
  let sum = 0;
  for (const byte of header) sum += byte;
  header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
  const padded = Buffer.alloc(Math.ceil(body.length / 512) * 512);
  body.copy(padded);
  return Buffer.concat([header, padded]);
}

/** A pax extended header ('x') carrying `records` for the next entry. */
function paxHeader(records: Record<string, string>): Buffer {
  const body = Object.entries(records)
    .map(([k, v]) => {
      const rest = ` ${k}=${v}\n`;
      let len = rest.length + 1;
      while (String(len).length + rest.length !== len) len = String(len).length + rest.length;
      return `${len}${rest}`;
    })
    .join('');
  return tarEntry({ path: 'PaxHeader', type: 'x', body });
}

const tarOf = (entries: RawEntry[]) => Buffer.concat([...entries.map(tarEntry), Buffer.alloc(1024)]);
const tgz = (entries: RawEntry[]) => gzipSync(tarOf(entries));

// ---- a loopback server ----

interface Route {
  status?: number;
  headers?: Record<string, string>;
  body?: Buffer;
  /** Sends the headers and the first byte, then nothing more. */
  stall?: boolean;
}

let server: http.Server;
let base: string;
const routes = new Map<string, Route>();
const hits: string[] = [];
let root: string;

beforeAll(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'caas-source-test-'));
  server = http.createServer((req, res) => {
    hits.push(req.url ?? '');
    const route = routes.get(req.url ?? '');
    if (!route) return void res.writeHead(404).end('no such archive');
    res.writeHead(route.status ?? 200, route.headers ?? {});
    if (route.stall) return void res.write(route.body?.subarray(0, 1) ?? 'x');
    res.end(route.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  await rm(root, { recursive: true, force: true });
});

afterEach(() => {
  routes.clear();
  hits.length = 0;
});

let serial = 0;
/** Serves `body` and fetches it into a fresh `out` directory inside a fresh parent. */
async function fetchServed(body: Buffer, opts: Partial<Parameters<typeof fetchSource>[2]> = {}, route: Route = {}) {
  const name = `/a${++serial}.tar.gz`;
  routes.set(name, { body, ...route });
  const parent = path.join(root, `case-${serial}`);
  await mkdir(parent);
  const dir = path.join(parent, 'out');
  const run = fetchSource(`${base}${name}`, dir, { policy: insecure, ...opts });
  return { run, dir, parent };
}

async function failure(promise: Promise<unknown>): Promise<SourceError> {
  const err = await promise.then(
    () => {
      throw new Error('expected a SourceError');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SourceError);
  return err as SourceError;
}

/** Every path below `dir`, directories with a trailing slash, sorted. */
async function tree(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    const rel = path.relative(dir, path.join(entry.parentPath, entry.name));
    out.push(entry.isDirectory() ? `${rel}/` : rel);
  }
  return out.sort();
}

const modeOf = async (p: string) => (await stat(p)).mode & 0o7777;

describe('fetchSource', () => {
  it('unpacks a tar.gz, strips a lone top directory, normalises modes and hashes the served bytes', async () => {
    const body = tgz([
      { path: 'app/', mode: 0o700 },
      { path: 'app/package.json', body: '{"name":"demo"}', mode: 0o600 },
      { path: 'app/bin/run', body: '#!/bin/sh\necho hi\n', mode: 0o4750 },
      { path: 'app/src/index.js', body: 'console.log(1)\n', mode: 0o666 },
    ]);
    const { run, dir } = await fetchServed(body);
    const result = await run;
    expect(result).toEqual({ sha256: createHash('sha256').update(body).digest('hex'), bytes: body.length, files: 3 });
    expect(result.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(await tree(dir)).toEqual(['bin/', 'bin/run', 'package.json', 'src/', 'src/index.js']);
    expect(await readFile(path.join(dir, 'package.json'), 'utf8')).toBe('{"name":"demo"}');
    expect(await modeOf(path.join(dir, 'bin/run'))).toBe(0o755);
    expect(await modeOf(path.join(dir, 'package.json'))).toBe(0o644);
    expect(await modeOf(path.join(dir, 'src/index.js'))).toBe(0o644);
    expect(await modeOf(path.join(dir, 'src'))).toBe(0o755);
  });

  it('keeps the layout of an archive without a lone top directory (./ prefixes, implied directories)', async () => {
    const { run, dir } = await fetchServed(
      tgz([
        { path: './', type: '5' },
        { path: './package.json', body: '{}' },
        { path: './src/lib/a.js', body: 'a' },
        { path: 'README', body: 'r' },
      ]),
    );
    expect((await run).files).toBe(3);
    expect(await tree(dir)).toEqual(['README', 'package.json', 'src/', 'src/lib/', 'src/lib/a.js']);
    expect(await modeOf(path.join(dir, 'src/lib'))).toBe(0o755);
  });

  it('does not strip a lone top-level file, and strips a lone directory given only by its files', async () => {
    const one = await fetchServed(tgz([{ path: 'server.js', body: 'x' }]));
    await one.run;
    expect(await tree(one.dir)).toEqual(['server.js']);
    const implied = await fetchServed(tgz([{ path: 'repo-abc123/index.js', body: 'x' }]));
    await implied.run;
    expect(await tree(implied.dir)).toEqual(['index.js']);
  });

  it('unpacks what node-tar makes of a directory (pax headers, long names)', async () => {
    const src = path.join(root, 'src-tree');
    const long = 'd'.repeat(120);
    await mkdir(path.join(src, 'myapp', long), { recursive: true });
    await writeFile(path.join(src, 'myapp', 'package.json'), '{"scripts":{"start":"node ."}}');
    await writeFile(path.join(src, 'myapp', long, 'f'.repeat(130)), 'deep');
    await writeFile(path.join(src, 'myapp', 'start.sh'), 'exit 0');
    await chmod(path.join(src, 'myapp', 'start.sh'), 0o700);
    const chunks: Buffer[] = [];
    for await (const chunk of createTar({ gzip: true, cwd: src, portable: true }, ['myapp'])) chunks.push(chunk as Buffer);
    const { run, dir } = await fetchServed(Buffer.concat(chunks));
    expect((await run).files).toBe(3);
    expect(await tree(dir)).toEqual([`${long}/`, `${long}/${'f'.repeat(130)}`, 'package.json', 'start.sh']);
    expect(await modeOf(path.join(dir, 'start.sh'))).toBe(0o755);
  });

  it('answers source_unavailable for a non-2xx answer or a refused URL', async () => {
    const missing = await fetchServed(tgz([{ path: 'a', body: 'a' }]), {}, { status: 404 });
    const err = await failure(missing.run);
    expect(err.code).toBe('source_unavailable');
    expect(err.message).toBe('the source URL answered HTTP 404');
    expect((await failure(fetchServed(Buffer.from('x'), {}, { status: 500 }).then((f) => f.run))).code).toBe('source_unavailable');
    const dir = path.join(root, 'refused');
    const refused = await failure(fetchSource(`${base}/x.tar.gz`, dir, { policy: secure }));
    expect(refused).toMatchObject({ code: 'source_unavailable', message: 'the source URL is refused: must use https' });
    const privateAddress = await failure(fetchSource('http://10.0.0.1/x.tar.gz', dir, { policy: insecure }));
    expect(privateAddress.message).toMatch(/private address; source archives must be publicly reachable/);
  });

  it('does not follow a redirect', async () => {
    routes.set('/real.tar.gz', { body: tgz([{ path: 'a', body: 'a' }]) });
    const { run, dir } = await fetchServed(Buffer.alloc(0), {}, { status: 302, headers: { location: `${base}/real.tar.gz` } });
    const err = await failure(run);
    expect(err.code).toBe('source_unavailable');
    expect(err.message).toMatch(/redirect \(302\); redirects are not followed/);
    expect(hits).not.toContain('/real.tar.gz');
    expect(await readdir(dir)).toEqual([]);
  });

  it('refuses an archive over the size cap, declared or streamed', async () => {
    const big = gzipSync(tarOf([{ path: 'noise', body: randomBytes(50_000) }]));
    const declared = await fetchServed(big, { maxBytes: 1000 });
    expect(await failure(declared.run)).toMatchObject({ code: 'source_unavailable', message: 'the source archive is larger than 1000 bytes' });
    // Without Content-Length (chunked), the count while streaming stops it.
    const streamed = await fetchServed(big, { maxBytes: 1000 }, { headers: { 'transfer-encoding': 'chunked' } });
    expect(await failure(streamed.run)).toMatchObject({ code: 'source_unavailable', message: 'the source archive is larger than 1000 bytes' });
  });

  it('gives up on a slow source at the deadline', async () => {
    const started = Date.now();
    const { run } = await fetchServed(tgz([{ path: 'a', body: 'a' }]), { timeoutMs: 300 }, { stall: true, headers: { 'content-length': '100000' } });
    const err = await failure(run);
    expect(err).toMatchObject({ code: 'source_unavailable', message: 'the source archive did not arrive within 0.3 s' });
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it('answers source_invalid for what is not a gzip tar', async () => {
    const cases: Array<[Buffer, RegExp]> = [
      [Buffer.from('hello, world\n'), /not a gzip file/],
      [Buffer.alloc(0), /not a gzip file/],
      [gzipSync('just some text that is not a tar archive at all'), /not a valid tar archive/],
      [gzipSync(Buffer.alloc(4096)), /not a valid tar archive|holds no files/],
      [tgz([{ path: 'a', body: 'a' }]).subarray(0, 40), /not valid gzip data/],
      [gzipSync(tgz([{ path: 'a', body: 'a' }])), /compressed twice/],
      [gzipSync(tarOf([{ path: 'a', body: 'a'.repeat(2000) }]).subarray(0, 1024)), /not a valid tar archive/],
      [tgz([{ path: 'empty/' }]), /holds no files/],
    ];
    for (const [body, message] of cases) {
      const { run, dir } = await fetchServed(body);
      const err = await failure(run);
      expect(err.code, String(message)).toBe('source_invalid');
      expect(err.message).toMatch(message);
      expect(await readdir(dir)).toEqual([]);
    }
  });

  /** Entries that must not land outside `dir`: each refuses the whole archive and writes nothing. */
  const hostile: Array<[string, RawEntry[], RegExp]> = [
    [
      'a ../ path',
      [
        { path: 'ok.txt', body: 'x' },
        { path: '../evil', body: 'evil' },
      ],
      /"\.\.\/evil" has "\.\." in its path/,
    ],
    ['a ../ inside a path', [{ path: 'app/../../evil', body: 'evil' }], /has "\.\." in its path/],
    ['an absolute path', [{ path: '/tmp/caas-evil-abs', body: 'evil' }], /"\/tmp\/caas-evil-abs" has an absolute path/],
    [
      'a symlink to /etc/passwd',
      [{ path: 'passwd', type: '2', linkpath: '/etc/passwd' }],
      /"passwd" is a symbolic link; an archive may hold only regular files and directories/,
    ],
    ['a symlink to ..', [{ path: 'up', type: '2', linkpath: '..' }], /"up" is a symbolic link/],
    [
      'a hard link',
      [
        { path: 'a', body: 'a' },
        { path: 'b', type: '1', linkpath: 'a' },
      ],
      /"b" is a hard link/,
    ],
    ['a hard link out', [{ path: 'shadow', type: '1', linkpath: '/etc/shadow' }], /"shadow" is a hard link/],
    [
      'a file written through a symlinked directory',
      [
        { path: 'app/', type: '5' },
        { path: 'app/link', type: '2', linkpath: '..' },
        { path: 'app/link/escaped.txt', body: 'evil' },
      ],
      /"app\/link" is a symbolic link/,
    ],
    ['a FIFO', [{ path: 'pipe', type: '6' }], /"pipe" is a FIFO/],
    ['a character device', [{ path: 'null', type: '3' }], /"null" is a character device/],
    ['an unknown type', [{ path: 'sparse', type: 'S', body: 'x' }], /"sparse" \(SparseFile\) cannot be unpacked/],
    ['a backslash path', [{ path: '..\\evil', body: 'x' }], /backslash/],
    [
      'a file given twice',
      [
        { path: 'a', body: '1' },
        { path: 'a', body: '2' },
      ],
      /"a" appears more than once/,
    ],
    [
      'a file that is also a directory',
      [
        { path: 'a', body: '1' },
        { path: 'a/b', body: '2' },
      ],
      /"a" is both a file and a directory/,
    ],
    [
      'a directory that is also a file',
      [
        { path: 'a/b', body: '1' },
        { path: 'a', body: '2' },
      ],
      /"a" is both a file and a directory/,
    ],
  ];
  for (const [name, entries, message] of hostile) {
    it(`refuses an archive with ${name}; nothing lands anywhere`, async () => {
      const { run, dir, parent } = await fetchServed(tgz(entries));
      const err = await failure(run);
      expect(err.code).toBe('source_invalid');
      expect(err.message).toMatch(message);
      expect(err.message).not.toContain(root);
      expect(await readdir(dir)).toEqual([]);
      expect(await readdir(parent)).toEqual(['out']);
      await expect(stat('/tmp/caas-evil-abs')).rejects.toThrow();
    });
  }

  it('refuses a pax header that renames an entry to escape', async () => {
    const body = gzipSync(Buffer.concat([paxHeader({ path: '../../pax-evil' }), tarEntry({ path: 'innocent', body: 'x' }), Buffer.alloc(1024)]));
    const { run, dir, parent } = await fetchServed(body);
    expect(await failure(run)).toMatchObject({ code: 'source_invalid', message: expect.stringMatching(/"\.\.\/\.\.\/pax-evil" has "\.\."/) });
    expect(await readdir(dir)).toEqual([]);
    expect(await readdir(parent)).toEqual(['out']);
  });

  it('refuses an entry-count bomb (the default cap: 20 000)', async () => {
    const entries = Array.from({ length: 20_001 }, (_, i) => ({ path: `f${i}`, body: '' }));
    const { run, dir } = await fetchServed(tgz(entries));
    expect(await failure(run)).toMatchObject({ code: 'source_invalid', message: 'the archive holds more than 20000 files and directories' });
    expect(await readdir(dir)).toEqual([]);
  });

  it('counts implied directories against the entry cap', async () => {
    const { run } = await fetchServed(tgz([{ path: 'a/b/c/d/e/f/g/h/file', body: 'x' }]), { maxEntries: 5 });
    expect((await failure(run)).message).toBe('the archive holds more than 5 files and directories');
  });

  it('refuses an unpacked-size bomb before writing it', async () => {
    const zeros = Buffer.alloc(3 << 20);
    const { run, dir } = await fetchServed(
      tgz([
        { path: 'ok', body: 'x' },
        { path: 'zeros', body: zeros },
      ]),
      { maxUnpackedBytes: 2 << 20 },
    );
    expect(await failure(run)).toMatchObject({ code: 'source_invalid', message: 'the archive unpacks to more than 2 MiB' });
    expect(await readdir(dir)).toEqual([]);
    // A header alone declaring a huge file is refused at the header.
    const declared = await fetchServed(gzipSync(tarEntry({ path: 'huge', size: 600 << 20 })));
    expect(await failure(declared.run)).toMatchObject({ code: 'source_invalid', message: 'the archive unpacks to more than 500 MiB' });
  });

  it('caps the decompressed stream itself (metadata headers, no entries)', async () => {
    const pax = paxHeader({ comment: 'z'.repeat(500_000) });
    const body = gzipSync(Buffer.concat([...Array.from({ length: 12 }, () => pax), tarEntry({ path: 'a', body: 'a' }), Buffer.alloc(1024)]));
    const { run } = await fetchServed(body, { maxEntries: 2, maxUnpackedBytes: 1 << 20 });
    expect(await failure(run)).toMatchObject({ code: 'source_invalid', message: expect.stringMatching(/too large once decompressed/) });
  });

  it('ignores what follows the end of the archive', async () => {
    const body = gzipSync(Buffer.concat([tarOf([{ path: 'a', body: 'a' }]), Buffer.from('trailing garbage'.repeat(100))]));
    const { run, dir } = await fetchServed(body);
    expect((await run).files).toBe(1);
    expect(await tree(dir)).toEqual(['a']);
  });

  it('takes a git archive (a global pax header) and a localhost URL (127.0.0.1 without DNS)', async () => {
    const body = gzipSync(
      Buffer.concat([
        tarEntry({ path: 'pax_global_header', type: 'g', body: '52 comment=0123456789abcdef0123456789abcdef01234567\n' }),
        tarOf([{ path: 'repo-0123456/' }, { path: 'repo-0123456/index.js', body: 'x' }]),
      ]),
    );
    routes.set('/git.tar.gz', { body });
    const dir = path.join(root, 'git');
    const result = await fetchSource(`${base.replace('127.0.0.1', 'localhost')}/git.tar.gz`, dir, { policy: insecure });
    expect(result.files).toBe(1);
    expect(await tree(dir)).toEqual(['index.js']);
  });

  it('leaves no temporary download behind', async () => {
    const left = (await readdir(tmpdir())).filter((name) => name.startsWith('caas-source-') && !name.startsWith('caas-source-test-'));
    expect(left).toEqual([]);
  });

  it('needs an empty directory', async () => {
    const dir = path.join(root, 'busy');
    await mkdir(dir);
    await writeFile(path.join(dir, 'x'), 'x');
    await expect(fetchSource(`${base}/whatever`, dir, { policy: insecure })).rejects.not.toBeInstanceOf(SourceError);
  });
});
