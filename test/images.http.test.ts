import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImageDeliveryServer } from '../dataplane/images/server';
import { signatureOf } from '../dataplane/images/signing';
import { ImagesProvisioner } from '../domain/images/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { createAccount, createApiKey, createService, createUser } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';

/**
 * Image services end to end: the control plane's tokens, secrets, origins and usage, and the
 * delivery plane (dataplane/images/server.ts, here in the test's process on its own port) serving
 * real images from a loopback origin, decoded and checked.
 */
let stack: Stack;
let delivery: ImageDeliveryServer;
let deliveryUrl: string;
let origin: http.Server;
let originPort: number;
let originHits = 0;
let cacheDir: string;
let token: string;
let jpeg: Buffer;

const api = {
  post: (p: string, body?: unknown, t = stack.owner.key) => stack.http.post(p, { token: t, body }),
  get: (p: string, t = stack.owner.key) => stack.http.get(p, { token: t }),
  del: (p: string, t = stack.owner.key) => stack.http.request('DELETE', p, { token: t }),
};

/** A source URL on the loopback origin under `host` (a *.localhost name is 127.0.0.1 without DNS). */
const src = (file: string, host = 'img.localhost') => `http://${host}:${originPort}/${file}`;

/**
 * The delivery plane hears of a tenant's change from PostgreSQL's notification of the commit, which
 * may reach its event loop just after a request sent at once: ask again for up to a second.
 */
async function untilStatus<T extends { status: number }>(ask: () => Promise<T>, status: number): Promise<T> {
  const started = Date.now();
  let answer = await ask();
  while (answer.status !== status && Date.now() - started < 1_000) answer = await ask();
  return answer;
}

async function img(query: Record<string, string>, opts: { token?: string | null; accept?: string } = {}) {
  const headers: Record<string, string> = {};
  const t = opts.token === undefined ? token : opts.token;
  if (t) headers.authorization = `Bearer ${t}`;
  if (opts.accept) headers.accept = opts.accept;
  const res = await fetch(`${deliveryUrl}/v1/img?${new URLSearchParams(query)}`, { headers });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, body, json: () => JSON.parse(body.toString('utf8')) };
}

async function provision(accountId: number, product = 'images-basic'): Promise<number> {
  const svc = await createService(stack.db, accountId, { family: 'other', product });
  await stack.db('services').where({ id: svc.serviceId }).update({ product_family: 'images' });
  await new ImagesProvisioner(stack.db, stack.api.deps.keyring, deliveryUrl).provision((await provisionTargetOf(stack.db, svc.serviceId))!);
  return svc.serviceId;
}

async function usage(t = stack.owner.key) {
  await delivery.flush();
  return (await api.get('/v1/images/usage', t)).body;
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'none', env: { ALLOW_INSECURE_TARGETS: '1' } });
  jpeg = await sharp({ create: { width: 2000, height: 1500, channels: 3, background: { r: 10, g: 120, b: 200 } } })
    .jpeg()
    .toBuffer();
  const png = await sharp({ create: { width: 64, height: 64, channels: 4, background: { r: 0, g: 0, b: 0, alpha: 0.5 } } })
    .png()
    .toBuffer();
  origin = http.createServer((req, res) => {
    originHits++;
    if (req.url === '/photo.jpg') return res.writeHead(200, { 'content-type': 'image/jpeg' }).end(jpeg);
    if (req.url === '/icon.png') return res.writeHead(200, { 'content-type': 'image/png' }).end(png);
    if (req.url === '/corrupt.jpg') return res.writeHead(200, { 'content-type': 'image/jpeg' }).end(jpeg.subarray(0, 3000));
    if (req.url === '/huge.jpg') {
      // 50 MB, streamed without a length: refused once the cap is passed.
      res.writeHead(200, { 'content-type': 'image/jpeg' });
      const chunk = Buffer.alloc(1024 * 1024, 1);
      let sent = 0;
      const pump = () => {
        while (sent < 50 && res.write(chunk)) sent++;
        if (sent >= 50) res.end();
        else res.once('drain', pump);
      };
      res.on('close', () => (sent = 50));
      return pump();
    }
    if (req.url === '/moved.jpg') return res.writeHead(302, { location: '/photo.jpg' }).end();
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
  originPort = (origin.address() as AddressInfo).port;
  cacheDir = await mkdtemp(path.join(tmpdir(), 'images-cache-'));
  delivery = new ImageDeliveryServer({
    db: stack.db,
    keyring: stack.api.deps.keyring,
    cacheDir,
    policy: { allowInsecure: true },
    maxSourceBytes: 20 * 1024 * 1024,
    fetchTimeoutMs: 5_000,
    flushMs: 200,
  });
  deliveryUrl = await delivery.listen(0);
  await provision(stack.owner.accountId);
  const created = await api.post('/v1/images/keys');
  expect(created.status, created.text).toBe(201);
  token = created.body.token;
}, 60_000);

afterAll(async () => {
  await delivery?.close();
  await new Promise<void>((resolve) => (origin ? origin.close(() => resolve()) : resolve()));
  await stack?.close();
  if (cacheDir) await rm(cacheDir, { recursive: true, force: true });
});

describe('image services: control plane', () => {
  it('describes the tenant: plan, delivery endpoint, no origins yet (nothing is served)', async () => {
    const res = await api.get('/v1/images');
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ object: 'images', plan: 'images-basic', api_endpoint: deliveryUrl, origin_count: 0, origin_limit: 10 });
    expect(res.body.month_usage).toEqual({ transformations: 0, deliveries: 0, egress_bytes: 0 });
    expect(res.body.tenant).toMatch(/^t[0-9a-f]{12}$/);
    expect(token).toMatch(/^imgt_[A-Za-z0-9]{32,}$/);
    // Fail-closed: no origin, nothing served.
    const refused = await img({ url: src('photo.jpg'), w: '100' });
    expect(refused.status).toBe(403);
    expect(refused.json().error).toMatchObject({ code: 'origin_not_allowed', param: 'url' });
    expect(refused.headers.get('x-request-id')).toBe(refused.json().error.request_id);
  });

  it('manages origins: normalised, idempotent, validated, capped, and removable', async () => {
    const added = await api.post('/v1/images/origins', { pattern: 'IMG.localhost.' });
    expect(added.status, added.text).toBe(201);
    expect(added.body).toMatchObject({ object: 'images_origin', pattern: 'img.localhost' });
    expect((await api.post('/v1/images/origins', { pattern: 'img.localhost' })).status).toBe(200);
    for (const bad of ['http://a.example.com', 'a.example.com:80', 'a.example.com/x', '*.com']) {
      const res = await api.post('/v1/images/origins', { pattern: bad });
      expect(res.status, bad).toBe(400);
      expect(res.body.error.param).toBe('pattern');
    }
    expect((await api.post('/v1/images/origins', { pattern: '*.cdn.localhost' })).status).toBe(201);
    const list = await api.get('/v1/images/origins');
    expect(list.body.data.map((o: any) => o.pattern)).toEqual(['*.cdn.localhost', 'img.localhost']);
    expect((await api.del('/v1/images/origins/not-listed.example')).status).toBe(404);
    // The cap: 10 on images-basic.
    for (let i = 0; i < 8; i++) expect((await api.post('/v1/images/origins', { pattern: `o${i}.example.com` })).status).toBe(201);
    const over = await api.post('/v1/images/origins', { pattern: 'one-too-many.example.com' });
    expect(over.status).toBe(429);
    expect(over.body.error.code).toBe('quota_exceeded');
    for (let i = 0; i < 8; i++) expect((await api.del(`/v1/images/origins/o${i}.example.com`)).status).toBe(204);
    expect((await api.get('/v1/images')).body.origin_count).toBe(2);
  });

  it('another account sees nothing: 404 without a tenant, and its token reaches nothing of this tenant', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const other = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['images:read', 'images:write', 'images:keys'] })).token;
    for (const p of ['/v1/images', '/v1/images/origins', '/v1/images/usage']) expect((await api.get(p, other)).status, p).toBe(404);
    expect((await api.post('/v1/images/keys', undefined, other)).status).toBe(404);
    await provision(accountId);
    const theirToken = (await api.post('/v1/images/keys', undefined, other)).body.token;
    // Their allowlist is empty: this tenant's origins do not count for them.
    const res = await img({ url: src('photo.jpg'), w: '50' }, { token: theirToken });
    expect(res.status).toBe(403);
    expect(res.json().error.code).toBe('origin_not_allowed');
    // An image token is no /v1 credential.
    const asBearer = await stack.http.get('/v1/images', { token: theirToken, checkContract: false });
    expect(asBearer.status).toBe(401);
  });
});

describe('image services: the delivery plane', () => {
  it('transforms real images (format and size decoded), caches them, and counts each delivery', async () => {
    const before = await usage();
    const first = await img({ url: src('photo.jpg'), w: '400', format: 'webp' });
    expect(first.status, first.body.toString()).toBe(200);
    expect(first.headers.get('x-cache')).toBe('MISS');
    expect(first.headers.get('content-type')).toBe('image/webp');
    expect(first.headers.get('vary')).toBe('Accept');
    const meta = await sharp(first.body).metadata();
    expect([meta.format, meta.width, meta.height]).toEqual(['webp', 400, 300]);
    const hits = originHits;
    const second = await img({ url: src('photo.jpg'), w: '400', format: 'webp' });
    expect(second.headers.get('x-cache')).toBe('HIT');
    expect(second.body.equals(first.body)).toBe(true);
    expect(originHits).toBe(hits);
    const after = await usage();
    expect(after.transformations - before.transformations).toBe(1);
    expect(after.deliveries - before.deliveries).toBe(2);
    expect(after.egress_bytes - before.egress_bytes).toBe(2 * first.body.length);
    expect(after.daily.at(-1)).toMatchObject({ date: new Date().toISOString().slice(0, 10) });
    expect((await api.get('/v1/images')).body.month_usage).toEqual({
      transformations: after.transformations,
      deliveries: after.deliveries,
      egress_bytes: after.egress_bytes,
    });
  });

  it('a burst of requests for a new image fetches and transforms it once, and counts one transformation', async () => {
    const before = await usage();
    const hits = originHits;
    const answers = await Promise.all(Array.from({ length: 8 }, () => img({ url: src('photo.jpg'), w: '333', format: 'webp' })));
    expect(answers.map((a) => a.status)).toEqual(Array(8).fill(200));
    expect(originHits - hits).toBe(1);
    const after = await usage();
    expect([after.transformations - before.transformations, after.deliveries - before.deliveries]).toEqual([1, 8]);
  });

  it('picks the format from Accept when none is asked, and fits cover/contain/fill exactly', async () => {
    const avif = await img({ url: src('photo.jpg'), w: '120' }, { accept: 'image/avif,image/webp,*/*' });
    expect(avif.headers.get('content-type')).toBe('image/avif');
    const webp = await img({ url: src('photo.jpg'), w: '120' }, { accept: 'image/webp,*/*' });
    expect(webp.headers.get('content-type')).toBe('image/webp');
    const source = await img({ url: src('icon.png'), w: '32' }, { accept: '*/*' });
    expect((await sharp(source.body).metadata()).format).toBe('png');
    for (const fit of ['cover', 'contain', 'fill']) {
      const out = await img({ url: src('photo.jpg'), w: '200', h: '50', fit, format: 'jpeg', q: '60' });
      const meta = await sharp(out.body).metadata();
      expect([meta.format, meta.width, meta.height], fit).toEqual(['jpeg', 200, 50]);
    }
  });

  it('a wildcard serves subdomains at any depth, never the apex', async () => {
    expect((await img({ url: src('photo.jpg', 'a.cdn.localhost'), w: '10' })).status).toBe(200);
    expect((await img({ url: src('photo.jpg', 'x.y.cdn.localhost'), w: '10' })).status).toBe(200);
    const apex = await img({ url: src('photo.jpg', 'cdn.localhost'), w: '10' });
    expect(apex.status).toBe(403);
    expect(apex.json().error.code).toBe('origin_not_allowed');
  });

  it('an origin removed from the allowlist is not served, cached or not; added back it is', async () => {
    const q = { url: src('photo.jpg'), w: '77', format: 'png' };
    expect((await img(q)).status).toBe(200);
    expect((await img(q)).headers.get('x-cache')).toBe('HIT');
    expect((await api.del('/v1/images/origins/img.localhost')).status).toBe(204);
    const refused = await untilStatus(() => img(q), 403);
    expect(refused.status).toBe(403);
    expect(refused.json().error.code).toBe('origin_not_allowed');
    expect((await api.post('/v1/images/origins', { pattern: 'img.localhost' })).status).toBe(201);
    const back = await untilStatus(() => img(q), 200);
    expect(back.status).toBe(200);
    expect(back.headers.get('x-cache')).toBe('HIT');
  });

  it('refuses bad input clearly and counts nothing for it: parameters, corrupt and 50 MB images, redirects', async () => {
    const before = await usage();
    const repeated = await fetch(`${deliveryUrl}/v1/img?url=${encodeURIComponent(src('photo.jpg'))}&w=1&w=2`, {
      headers: { authorization: `Bearer ${token}` },
    });
    expect(repeated.status).toBe(400);
    expect(((await repeated.json()) as any).error).toMatchObject({ code: 'validation_failed', param: 'w' });
    expect((await img({ url: src('photo.jpg'), w: '9000' })).json().error.param).toBe('w');
    const corrupt = await img({ url: src('corrupt.jpg'), w: '10' });
    expect(corrupt.status).toBe(422);
    expect(corrupt.json().error.code).toBe('unsupported_image');
    const huge = await img({ url: src('huge.jpg'), w: '10' });
    expect(huge.status).toBe(422);
    expect(huge.json().error.code).toBe('unsupported_image');
    const moved = await img({ url: src('moved.jpg'), w: '10' });
    expect(moved.status).toBe(502);
    expect(moved.json().error.code).toBe('origin_error');
    const missing = await img({ url: src('nothing.jpg'), w: '10' });
    expect(missing.status).toBe(502);
    // The process is still serving.
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' })).status).toBe(200);
    const after = await usage();
    expect(after.transformations - before.transformations).toBe(0);
    expect(after.deliveries - before.deliveries).toBe(1);
  });

  it('requires a valid token: missing, unknown and non-token credentials are 401', async () => {
    const none = await img({ url: src('photo.jpg'), w: '10' }, { token: null });
    expect(none.status).toBe(401);
    expect(none.json().error.code).toBe('authentication_required');
    expect((await img({ url: src('photo.jpg'), w: '10' }, { token: 'imgt_unknown0000000000000000000000000000' })).json().error.code).toBe('invalid_token');
    expect((await img({ url: src('photo.jpg'), w: '10' }, { token: stack.owner.key })).status).toBe(401);
  });

  it("answers 405 to other methods, keeps token answers private, counts a HEAD as no delivery, and a host that does not resolve is the origin's error", async () => {
    const put = await fetch(`${deliveryUrl}/v1/img?url=x`, { method: 'PUT', headers: { authorization: `Bearer ${token}` } });
    expect(put.status).toBe(405);
    expect(put.headers.get('allow')).toBe('GET, HEAD');
    const got = await img({ url: src('photo.jpg'), w: '400', format: 'webp' });
    expect(got.headers.get('cache-control')).toBe('private, max-age=300');
    const before = await usage();
    const head = await fetch(`${deliveryUrl}/v1/img?${new URLSearchParams({ url: src('photo.jpg'), w: '400', format: 'webp' })}`, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(head.status).toBe(200);
    const after = await usage();
    expect([after.deliveries - before.deliveries, after.egress_bytes - before.egress_bytes]).toEqual([0, 0]);
    await api.post('/v1/images/origins', { pattern: 'nowhere.invalid' });
    const unresolved = await img({ url: 'http://nowhere.invalid/x.jpg', w: '10' });
    expect(unresolved.status).toBe(502);
    expect(unresolved.json().error.code).toBe('origin_error');
    expect((await api.del('/v1/images/origins/nowhere.invalid')).status).toBe(204);
  });

  it('signs URLs: a signed URL works without a token; tampered and expired ones are refused', async () => {
    const signed = await fetch(`${deliveryUrl}/v1/sign`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ url: src('photo.jpg'), w: 64, format: 'webp', expires_in: 60 }),
    });
    expect(signed.status).toBe(200);
    const { url, expires_at } = (await signed.json()) as { url: string; expires_at: string };
    expect(Date.parse(expires_at) - Date.now()).toBeLessThanOrEqual(60_000);
    const ok = await fetch(url);
    expect(ok.status).toBe(200);
    expect((await sharp(Buffer.from(await ok.arrayBuffer())).metadata()).width).toBe(64);
    const tampered = await fetch(url.replace('w=64', 'w=65'));
    expect(tampered.status).toBe(403);
    expect(((await tampered.json()) as any).error.code).toBe('invalid_signature');
    // An expired one, signed correctly with the secret (as a client would sign it).
    const secret = (await api.post('/v1/images/signing-secret')).body.secret;
    const tenant = (await api.get('/v1/images')).body.tenant;
    const params: Array<[string, string]> = [
      ['url', src('photo.jpg')],
      ['w', '64'],
      ['tenant', tenant],
      ['exp', String(Math.floor(Date.now() / 1000) - 10)],
    ];
    const expired = await fetch(`${deliveryUrl}/v1/img?${new URLSearchParams([...params, ['sig', signatureOf(secret, params)]])}`);
    expect(expired.status).toBe(403);
    expect(((await expired.json()) as any).error.code).toBe('signature_expired');
  });

  it('rotates the signing secret with and without grace', async () => {
    const tenant = (await api.get('/v1/images')).body.tenant;
    const urlWith = (secret: string) => {
      const params: Array<[string, string]> = [
        ['url', src('photo.jpg')],
        ['w', '32'],
        ['tenant', tenant],
        ['exp', String(Math.floor(Date.now() / 1000) + 600)],
      ];
      return `${deliveryUrl}/v1/img?${new URLSearchParams([...params, ['sig', signatureOf(secret, params)]])}`;
    };
    const old = (await api.post('/v1/images/signing-secret')).body;
    const graced = await api.post('/v1/images/signing-secret/rotate', { grace_seconds: 600 });
    expect(graced.status, graced.text).toBe(200);
    expect(graced.body.secret).not.toBe(old.secret);
    expect(Date.parse(graced.body.previous_valid_until) - Date.now()).toBeGreaterThan(590_000);
    expect((await fetch(urlWith(old.secret))).status).toBe(200);
    expect((await fetch(urlWith(graced.body.secret))).status).toBe(200);
    expect((await api.post('/v1/images/signing-secret')).body.secret).toBe(graced.body.secret);
    const hard = await api.post('/v1/images/signing-secret/rotate', { grace_seconds: 0 });
    expect(hard.body.previous_valid_until).toBeNull();
    expect((await untilStatus(() => fetch(urlWith(graced.body.secret)), 403)).status).toBe(403);
    expect((await fetch(urlWith(hard.body.secret))).status).toBe(200);
  });

  it('rotates delivery tokens: with grace both work until it ends; with 0 the old ones stop within a second', async () => {
    const before = token;
    const graced = await api.post('/v1/images/keys/rotate', { grace_seconds: 2 });
    expect(graced.status, graced.text).toBe(200);
    expect(graced.body.previous_valid_until).not.toBeNull();
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: before })).status).toBe(200);
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: graced.body.token })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 2_700));
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: before })).status).toBe(401);
    const hard = await api.post('/v1/images/keys/rotate', { grace_seconds: 0 });
    expect(hard.body.previous_valid_until).toBeNull();
    await new Promise((r) => setTimeout(r, 1_000));
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: graced.body.token })).status).toBe(401);
    token = hard.body.token;
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' })).status).toBe(200);
  });

  it('on a plan with a hard cap, delivery stops at the included amount and nothing is billed', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const t = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['images:read', 'images:write', 'images:keys'] })).token;
    const serviceId = await provision(accountId, 'images-capped');
    await api.post('/v1/images/origins', { pattern: 'img.localhost' }, t);
    const capped = (await api.post('/v1/images/keys', undefined, t)).body.token;
    // Used up but one: the included deliveries of the month (10,000), as recorded today.
    await stack
      .db('images_usage_days')
      .insert({ service_id: serviceId, day: new Date().toISOString().slice(0, 10), deliveries: 9_999, transformations: 0, egress_bytes: 0 });
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: capped })).status).toBe(200);
    await delivery.flush();
    const refused = await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: capped });
    expect(refused.status).toBe(429);
    expect(refused.json().error.code).toBe('quota_exceeded');
    const report = (await api.get('/v1/images/usage', t)).body;
    expect(report).toMatchObject({ deliveries: 10_000, included: { deliveries: 10_000, hard_cap: true }, overage: { deliveries: 0 }, total_usd: 0 });
  });

  it('prices the overage of an uncapped plan in USD', async () => {
    const svc = (await api.get('/v1/images')).body.service_id;
    await stack
      .db('images_usage_days')
      .insert({ service_id: Number(svc.slice(4)), day: new Date().toISOString().slice(0, 10), transformations: 7_000 })
      .onConflict(['service_id', 'day'])
      .merge({ transformations: 7_000 });
    const report = (await api.get('/v1/images/usage')).body;
    expect(report.overage.transformations).toBe(2_000);
    expect(report.total_usd).toBeCloseTo(1, 2);
    expect(report.period_start).toBe(`${new Date().toISOString().slice(0, 7)}-01`);
    expect(report.daily.length).toBe(new Date().getUTCDate());
  });

  it('a suspended service delivers nothing and refuses changes; its tenant stays readable', async () => {
    const { accountId } = await createAccount(stack.db);
    const owner = await createUser(stack.db, accountId, { isOwner: true });
    const t = (await createApiKey(stack.db, accountId, owner.userId, { scopes: ['images:read', 'images:write', 'images:keys'] })).token;
    const serviceId = await provision(accountId);
    await api.post('/v1/images/origins', { pattern: 'img.localhost' }, t);
    const theirs = (await api.post('/v1/images/keys', undefined, t)).body.token;
    expect((await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: theirs })).status).toBe(200);
    await stack.db('services').where({ id: serviceId }).update({ status: 'suspended' });
    // Within the delivery plane's token cache (500 ms).
    await new Promise((r) => setTimeout(r, 600));
    const refused = await img({ url: src('photo.jpg'), w: '400', format: 'webp' }, { token: theirs });
    expect(refused.status).toBe(403);
    expect(refused.json().error.code).toBe('service_not_active');
    expect((await api.get('/v1/images', t)).status).toBe(200);
    const change = await api.post('/v1/images/origins', { pattern: 'other.localhost' }, t);
    expect(change.status).toBe(409);
  });
});
