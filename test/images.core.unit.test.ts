import { createHmac } from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { deflateSync } from 'node:zlib';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DiskImageCache } from '../dataplane/images/cache';
import { fetchSource, OriginFailed, OriginRefused, SourceBuffers, SourceTooLarge } from '../dataplane/images/fetch';
import { allowedBy, normalizePattern, OriginPatternError, patternMatches, sourceHost } from '../domain/images/origins';
import { canonicalTransformation, parseDelivery, ParamError, resolveFormat } from '../dataplane/images/params';
import { canonicalString, enc, signatureMatches, signatureOf, signedUrl } from '../dataplane/images/signing';
import { MAX_INPUT_PIXELS, transform, UnsupportedImageError } from '../dataplane/images/transform';
import { IMAGES_NODE_FLAGS } from '../dataplane/images/node-flags';
import { readFileSync } from 'node:fs';

/**
 * The image delivery plane's core (DECISIONS "Images"), without a server: the signature's exact
 * string, origin patterns, the delivery parameters, transformations on real images with sharp, and
 * the disk cache.
 */
const q = (s: string) => new URLSearchParams(s);
const paramOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    if (err instanceof ParamError) return err.param;
    throw err;
  }
  return null;
};

describe('signatures', () => {
  it('encodes like RFC 3986 unreserved characters, upper-case %XX of UTF-8 bytes', () => {
    expect(enc('aZ09-._~')).toBe('aZ09-._~');
    expect(enc('a b/é+&=')).toBe('a%20b%2F%C3%A9%2B%26%3D');
    // What encodeURIComponent leaves alone but RFC 3986 reserves; a lone surrogate is U+FFFD's bytes.
    expect(enc("!'()*")).toBe('%21%27%28%29%2A');
    expect(enc('😀\ud800x')).toBe('%F0%9F%98%80%EF%BF%BDx');
  });

  it('signs /v1/img? and the parameters but sig, sorted by encoded key then value, as hex HMAC-SHA256 of the secret', () => {
    const params: Array<[string, string]> = [
      ['w', '400'],
      ['url', 'https://img.example.com/a b.jpg'],
      ['tenant', 't1'],
      ['exp', '1900000000'],
      ['sig', 'ignored'],
    ];
    const expected = '/v1/img?exp=1900000000&tenant=t1&url=https%3A%2F%2Fimg.example.com%2Fa%20b.jpg&w=400';
    expect(canonicalString(params)).toBe(expected);
    const sig = createHmac('sha256', 'imgs_secret').update(expected).digest('hex');
    expect(signatureOf('imgs_secret', params)).toBe(sig);
    expect(signatureMatches(['imgs_other', 'imgs_secret'], params, sig)).toBe(true);
    expect(signatureMatches(['imgs_other'], params, sig)).toBe(false);
    expect(signatureMatches(['imgs_secret'], [...params, ['h', '10']], sig)).toBe(false);
    expect(signatureMatches(['imgs_secret'], params, sig.toUpperCase())).toBe(false);
  });

  it('a signed URL parses back into the parameters it signed', () => {
    const url = new URL(
      signedUrl(
        'http://127.0.0.1:9000/',
        'imgs_s',
        [
          ['url', 'https://a.example.com/x.png?v=1&y=é'],
          ['w', '64'],
          ['tenant', 'abc'],
        ],
        new Date(1_900_000_000_500),
      ),
    );
    expect(url.pathname).toBe('/v1/img');
    const parsed = parseDelivery(url.searchParams, undefined);
    expect(parsed.signed).toMatchObject({ tenant: 'abc', exp: 1_900_000_000 });
    expect(signatureMatches(['imgs_s'], parsed.params, parsed.signed!.sig)).toBe(true);
    expect(parsed.transformation.url).toBe('https://a.example.com/x.png?v=1&y=%C3%A9');
  });
});

describe('origin patterns', () => {
  it('normalises host names and wildcards, and refuses schemes, ports, paths, IPs and short wildcards', () => {
    expect(normalizePattern('IMG.Example.COM.')).toBe('img.example.com');
    expect(normalizePattern('*.Example.com')).toBe('*.example.com');
    expect(normalizePattern('bücher.example')).toBe('xn--bcher-kva.example');
    for (const bad of [
      'https://a.example.com',
      'a.example.com:443',
      'a.example.com/x',
      '*.com',
      'a.*.example.com',
      '*',
      '10.0.0.1',
      '',
      '-a.example.com',
      'a b.com',
    ]) {
      expect(() => normalizePattern(bad), bad).toThrow(OriginPatternError);
    }
  });

  it('a wildcard matches names under the domain at any depth, never the domain itself or a look-alike', () => {
    expect(patternMatches('*.example.com', 'a.example.com')).toBe(true);
    expect(patternMatches('*.example.com', 'x.y.example.com')).toBe(true);
    expect(patternMatches('*.example.com', 'example.com')).toBe(false);
    expect(patternMatches('*.example.com', 'badexample.com')).toBe(false);
    expect(patternMatches('example.com', 'example.com')).toBe(true);
    expect(patternMatches('example.com', 'a.example.com')).toBe(false);
    expect(allowedBy([], 'example.com')).toBe(false);
  });

  it('matches the source URL by host, ignoring port and case', () => {
    expect(sourceHost(new URL('https://IMG.example.com:8443/a.png'))).toBe('img.example.com');
    expect(allowedBy(['img.example.com'], sourceHost(new URL('http://img.example.com.:81/x'))!)).toBe(true);
  });
});

describe('delivery parameters', () => {
  it('takes url, w, h, fit, format, q with their defaults', () => {
    const r = parseDelivery(q('url=https://a.example.com/x.jpg&w=400'), undefined);
    expect(r.transformation).toEqual({ url: 'https://a.example.com/x.jpg', w: 400, h: null, fit: 'inside', format: 'source', q: 80 });
    expect(r.signed).toBeNull();
  });

  it('refuses repeats, unknown parameters and bad values, naming the parameter', () => {
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&w=1&w=2'), undefined))).toBe('w');
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&width=2'), undefined))).toBe('width');
    expect(paramOf(() => parseDelivery(q('w=2'), undefined))).toBe('url');
    expect(paramOf(() => parseDelivery(q('url=/x.jpg'), undefined))).toBe('url');
    expect(paramOf(() => parseDelivery(q('url=ftp://a.b/x'), undefined))).toBe('url');
    expect(paramOf(() => parseDelivery(q('url=https://u:p@a.b/x'), undefined))).toBe('url');
    for (const w of ['0', '8193', '1.5', '-1', 'abc']) expect(paramOf(() => parseDelivery(q(`url=https://a.b/x&w=${w}`), undefined))).toBe('w');
    expect(parseDelivery(q('url=https://a.b/x&w=10&fit=cover'), undefined).transformation).toMatchObject({ w: 10, h: null, fit: 'cover' });
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&fit=stretch'), undefined))).toBe('fit');
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&format=gif'), undefined))).toBe('format');
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&q=0'), undefined))).toBe('q');
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&tenant=t&exp=1'), undefined))).toBe('sig');
    expect(paramOf(() => parseDelivery(q('url=https://a.b/x&tenant=t&exp=soon&sig=00'), undefined))).toBe('exp');
  });

  it('resolves auto from Accept: AVIF if named, else WebP if named, else the source format', () => {
    expect(resolveFormat('auto', 'image/avif,image/webp,*/*')).toBe('avif');
    expect(resolveFormat('auto', 'image/webp;q=0.9, */*')).toBe('webp');
    expect(resolveFormat('auto', '*/*')).toBe('source');
    expect(resolveFormat('png', 'image/avif')).toBe('png');
  });

  it('keys the cache on the resolved transformation', () => {
    const a = parseDelivery(q('url=https://a.b/x&w=10'), 'image/webp').transformation;
    const b = parseDelivery(q('w=10&url=https://a.b/x&format=webp'), undefined).transformation;
    expect(canonicalTransformation(a)).toBe(canonicalTransformation(b));
    expect(canonicalTransformation(a)).not.toBe(canonicalTransformation(parseDelivery(q('url=https://a.b/x&w=10'), 'image/avif').transformation));
  });
});

describe('transformations with sharp', () => {
  let jpeg: Buffer;
  let png: Buffer;
  beforeAll(async () => {
    jpeg = await sharp({ create: { width: 2000, height: 1500, channels: 3, background: { r: 200, g: 30, b: 60 } } })
      .jpeg()
      .toBuffer();
    png = await sharp({ create: { width: 300, height: 200, channels: 4, background: { r: 0, g: 90, b: 200, alpha: 0.5 } } })
      .png()
      .toBuffer();
  });
  const base = { url: 'https://a.example.com/x', w: null, h: null, fit: 'inside' as const, format: 'source' as const, q: 80 };

  it('resizes within the box keeping the ratio, and encodes each format so that it decodes as that format', async () => {
    for (const format of ['webp', 'avif', 'jpeg', 'png'] as const) {
      const out = await transform(jpeg, { ...base, w: 400, format });
      const meta = await sharp(out.body).metadata();
      expect(meta.format).toBe(format === 'avif' ? 'heif' : format);
      expect([meta.width, meta.height, out.width, out.height]).toEqual([400, 300, 400, 300]);
      expect(out.contentType).toBe(`image/${format}`);
    }
    // Only h: the width follows the ratio (libvips may round the JPEG shrink-on-load by a pixel).
    const tall = await transform(jpeg, { ...base, h: 150 });
    expect([tall.height, tall.format]).toEqual([150, 'jpeg']);
    expect(Math.abs(tall.width - 200)).toBeLessThanOrEqual(1);
  });

  it('cover, contain and fill give exactly w x h; the source format is kept for PNG', async () => {
    for (const fit of ['cover', 'contain', 'fill'] as const) {
      const out = await transform(jpeg, { ...base, w: 300, h: 100, fit, format: 'webp' });
      const meta = await sharp(out.body).metadata();
      expect([meta.width, meta.height], fit).toEqual([300, 100]);
    }
    const kept = await transform(png, { ...base, w: 150 });
    expect(kept.format).toBe('png');
    expect((await sharp(kept.body).metadata()).hasAlpha).toBe(true);
  });

  it('refuses what is not an image, and a decompression bomb, without decoding it', async () => {
    await expect(transform(Buffer.from('definitely not an image'), base)).rejects.toThrow(UnsupportedImageError);
    await expect(transform(jpeg.subarray(0, 2000), { ...base, w: 10 })).rejects.toThrow(UnsupportedImageError);
    await expect(transform(bombPng(100_000, 100_000), { ...base, w: 10 })).rejects.toThrow(/more than 70000000 pixels/);
    await expect(transform(bombPng(100_000, 100_000), { ...base, format: 'webp' })).rejects.toThrow(UnsupportedImageError);
    expect(100_000 * 100_000).toBeGreaterThan(MAX_INPUT_PIXELS);
  });
});

describe('the disk cache', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'img-cache-'));
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('returns what was put for the same tenant and key, nothing for another tenant, and forgets a tenant', async () => {
    const cache = new DiskImageCache(dir);
    expect(await cache.get('t1', 'k')).toBeNull();
    await cache.put('t1', 'k', { body: Buffer.from([1, 2, 3]), contentType: 'image/webp', format: 'webp' });
    expect(await cache.get('t1', 'k')).toEqual({ body: Buffer.from([1, 2, 3]), contentType: 'image/webp', format: 'webp' });
    expect(await cache.get('t2', 'k')).toBeNull();
    await cache.dropTenant('t1');
    expect(await cache.get('t1', 'k')).toBeNull();
  });

  it('keeps writing after its directories are removed under it', async () => {
    const cache = new DiskImageCache(dir);
    await cache.put('t3', 'a', { body: Buffer.from('one'), contentType: 'image/png', format: 'png' });
    await rm(dir, { recursive: true, force: true });
    await cache.put('t3', 'a', { body: Buffer.from('two'), contentType: 'image/png', format: 'png' });
    expect((await cache.get('t3', 'a'))?.body.toString()).toBe('two');
  });
});

/** A PNG whose header claims `width` x `height` pixels, with almost no data: a decompression bomb's shape. */
function bombPng(width: number, height: number): Buffer {
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const length = Buffer.alloc(4);
    length.writeUInt32BE(data.length);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(body));
    return Buffer.concat([length, body, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.writeUInt8(1, 8); // bit depth
  ihdr.writeUInt8(0, 9); // greyscale
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(Buffer.alloc(1024))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

function crc32(buf: Buffer): number {
  let c = 0xffffffff;
  for (const byte of buf) {
    c ^= byte;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

describe('fetching a source with the SSRF rules', () => {
  let server: http.Server;
  let port: number;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      if (req.url === '/a.png') return res.end(Buffer.alloc(100, 7));
      if (req.url === '/moved') return res.writeHead(302, { location: 'http://10.0.0.1/' }).end();
      if (req.url === '/big') return res.writeHead(200, { 'content-length': '5000' }).end(Buffer.alloc(5000));
      if (req.url === '/drip') {
        res.writeHead(200);
        const timer = setInterval(() => res.write(Buffer.alloc(600)), 5);
        req.on('close', () => clearInterval(timer));
        return;
      }
      if (req.url === '/slow') return void setTimeout(() => res.end('late'), 2_000);
      const sized = /^\/bytes\/(\d+)\/(\d+)$/.exec(req.url ?? '');
      if (sized) return res.writeHead(200, { 'content-length': sized[1] }).end(Buffer.alloc(Number(sized[1]), Number(sized[2])));
      res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  const dev = { allowInsecure: true };
  const limits = { maxBytes: 4096, timeoutMs: 500 };

  it('fetches from loopback only with the development flag, also as *.localhost without DNS', async () => {
    expect((await fetchSource(`http://127.0.0.1:${port}/a.png`, dev, limits)).length).toBe(100);
    expect((await fetchSource(`http://img.localhost:${port}/a.png`, dev, limits, async () => [{ address: '10.0.0.1', family: 4 }])).length).toBe(100);
    await expect(fetchSource(`http://127.0.0.1:${port}/a.png`, { allowInsecure: false }, limits)).rejects.toThrow(OriginRefused);
    await expect(fetchSource(`https://127.0.0.1:${port}/a.png`, { allowInsecure: false }, limits)).rejects.toThrow(OriginRefused);
  });

  it('refuses private, link-local and rebinding names before connecting', async () => {
    for (const address of ['10.0.0.1', '169.254.169.254', '192.168.1.1', '::1']) {
      await expect(
        fetchSource('https://images.example.com/a.png', { allowInsecure: false }, limits, async () => [{ address, family: address.includes(':') ? 6 : 4 }]),
        address,
      ).rejects.toThrow(OriginRefused);
    }
    // One checked address and one private: refused as a whole.
    await expect(
      fetchSource(`http://mixed.example:${port}/a.png`, dev, limits, async () => [
        { address: '127.0.0.1', family: 4 },
        { address: '10.1.2.3', family: 4 },
      ]),
    ).rejects.toThrow(OriginRefused);
  });

  it('does not follow redirects, reports non-2xx, caps the size and keeps one deadline', async () => {
    await expect(fetchSource(`http://127.0.0.1:${port}/moved`, dev, limits)).rejects.toThrow(/redirect/);
    await expect(fetchSource(`http://127.0.0.1:${port}/missing`, dev, limits)).rejects.toThrow(OriginFailed);
    await expect(fetchSource(`http://127.0.0.1:${port}/big`, dev, limits)).rejects.toThrow(SourceTooLarge);
    await expect(fetchSource(`http://127.0.0.1:${port}/drip`, dev, limits)).rejects.toThrow(SourceTooLarge);
    await expect(fetchSource(`http://127.0.0.1:${port}/slow`, dev, limits)).rejects.toThrow(/within 500 ms/);
  });

  it('reads bodies into buffers used again, each exactly its own bytes, and gives them back when a fetch fails', async () => {
    const buffers = new SourceBuffers(1024, 2);
    const pooled = { ...limits, buffers };
    const first = await fetchSource(`http://127.0.0.1:${port}/bytes/900/1`, dev, pooled);
    expect(first.equals(Buffer.alloc(900, 1))).toBe(true);
    buffers.release(first);
    buffers.release(first); // a second release is ignored
    expect(buffers.idleCount).toBe(1);
    const second = await fetchSource(`http://127.0.0.1:${port}/bytes/300/2`, dev, pooled);
    expect(second.buffer).toBe(first.buffer); // the same memory, now holding only the new body
    expect(second.equals(Buffer.alloc(300, 2))).toBe(true);
    expect(buffers.idleCount).toBe(0);
    // Over the pool's size: an ordinary buffer, which release ignores.
    const large = await fetchSource(`http://127.0.0.1:${port}/bytes/2000/3`, dev, pooled);
    expect(large.equals(Buffer.alloc(2000, 3))).toBe(true);
    buffers.release(large);
    expect(buffers.idleCount).toBe(0);
  });

  it('refuses an answer shorter or longer than its Content-Length, giving its buffer back', async () => {
    const liar = net.createServer((socket) => {
      socket.once('data', (request) => {
        const long = request.toString().startsWith('GET /long');
        socket.end(`HTTP/1.1 200 OK\r\nContent-Length: ${long ? 10 : 50}\r\nConnection: close\r\n\r\n${'x'.repeat(20)}`);
      });
    });
    await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
    const at = (liar.address() as AddressInfo).port;
    try {
      const buffers = new SourceBuffers(1024, 2);
      await expect(fetchSource(`http://127.0.0.1:${at}/short`, dev, { ...limits, buffers })).rejects.toThrow(OriginFailed);
      await expect(fetchSource(`http://127.0.0.1:${at}/long`, dev, { ...limits, buffers })).rejects.toThrow(OriginFailed);
      expect(buffers.idleCount).toBe(1);
    } finally {
      liar.close();
    }
  });
});

describe('launching the delivery plane', () => {
  it('every launcher passes the Node flags V8 only reads at start', () => {
    const root = path.resolve(__dirname, '..');
    const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const dockerImages = /images\) exec node ([^;]*) ;;/.exec(readFileSync(path.join(root, 'Dockerfile'), 'utf8'))?.[1] ?? '';
    expect(IMAGES_NODE_FLAGS.length).toBeGreaterThan(0);
    for (const flag of IMAGES_NODE_FLAGS) {
      expect(pkg.scripts.images.split(' '), 'npm run images').toContain(flag);
      expect(dockerImages.split(' '), "the image's images command").toContain(flag);
    }
    expect(readFileSync(path.join(root, 'scripts/dev.ts'), 'utf8')).toMatch(
      /run\('images', tsxBin, \[\.\.\.IMAGES_NODE_FLAGS, 'dataplane\/images\/main\.ts'\]\)/,
    );
  });
});
