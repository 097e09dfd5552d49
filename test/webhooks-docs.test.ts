import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOLERANCE_SECONDS, verifyWebhook, webhookHandler, type CloudEvent } from '../docs/examples/verify-webhook';
import { signPayload } from '../domain/webhooks/signature';

/**
 * The receiver example of docs/webhooks.md: the doc shows the file verbatim, and the file follows
 * the receiver rules of SPEC Events (raw body, comma-split header, HMAC over t.body, constant-time
 * compare, 300 s tolerance, idempotency on the event id).
 */
const root = path.resolve(__dirname, '..');
const secret = 'whsec_test_0123456789abcdefghijklmnopqrstuv';
const body = JSON.stringify({
  id: 'evt_01JD0000000000000000000000',
  object: 'event',
  type: 'webhook.ping',
  created_at: '2026-11-22T10:00:00.000Z',
  data: { object: 'ping' },
});
const now = 1_795_000_000;
const hmac = (t: number, b: string, key = secret) => createHmac('sha256', key).update(`${t}.${b}`).digest('hex');

describe('docs/webhooks.md', () => {
  it('shows docs/examples/verify-webhook.ts verbatim', () => {
    const doc = readFileSync(path.join(root, 'docs/webhooks.md'), 'utf8');
    const example = readFileSync(path.join(root, 'docs/examples/verify-webhook.ts'), 'utf8');
    expect(doc).toContain('```ts\n' + example + '```');
  });
});

describe('verifyWebhook (the receiver rules)', () => {
  it('accepts what the service signs', () => {
    const header = signPayload(secret, body, now);
    expect(header).toBe(`t=${now},v1=${hmac(now, body)}`);
    const result = verifyWebhook(Buffer.from(body), header, secret, now);
    expect(result).toEqual({ ok: true, event: JSON.parse(body) });
  });

  it('rejects another body, another secret, a missing or malformed header', () => {
    const header = signPayload(secret, body, now);
    expect(verifyWebhook(body.replace('ping', 'pong'), header, secret, now)).toMatchObject({ ok: false, reason: 'signature does not match' });
    expect(verifyWebhook(body, header, 'whsec_other', now).ok).toBe(false);
    expect(verifyWebhook(body, undefined, secret, now)).toMatchObject({ ok: false, reason: 'missing Cloud-Signature header' });
    for (const bad of ['', 'garbage', `v1=${hmac(now, body)}`, `t=${now}`, `t=abc,v1=${hmac(now, body)}`, `t=${now},v1=zz`]) {
      expect(verifyWebhook(body, bad, secret, now).ok, bad).toBe(false);
    }
  });

  it('splits on commas: spaces and extra or unknown parts are tolerated, any matching v1 counts', () => {
    expect(verifyWebhook(body, `t=${now}, v1=${'0'.repeat(64)}, v1=${hmac(now, body)}, v0=legacy`, secret, now).ok).toBe(true);
  });

  it(`enforces the ${TOLERANCE_SECONDS} s tolerance both ways`, () => {
    expect(TOLERANCE_SECONDS).toBe(300);
    const at = (t: number) => verifyWebhook(body, `t=${t},v1=${hmac(t, body)}`, secret, now);
    expect(at(now - 300).ok).toBe(true);
    expect(at(now + 300).ok).toBe(true);
    expect(at(now - 301)).toMatchObject({ ok: false, reason: 'timestamp outside the tolerance' });
    expect(at(now + 301).ok).toBe(false);
  });

  it('verifies the raw bytes: re-serialised JSON with other spacing does not verify', () => {
    const header = signPayload(secret, body, now);
    expect(verifyWebhook(JSON.stringify(JSON.parse(body), null, 2), header, secret, now).ok).toBe(false);
    const unicode = JSON.stringify({ id: 'evt_1', object: 'event', type: 't', created_at: 'x', data: { name: 'Zürich ✓' } });
    expect(verifyWebhook(Buffer.from(unicode, 'utf8'), signPayload(secret, unicode, now), secret, now).ok).toBe(true);
  });
});

describe('webhookHandler (the copy-paste receiver)', () => {
  let server: http.Server;
  let url: string;
  const events: CloudEvent[] = [];
  beforeAll(async () => {
    server = http.createServer(webhookHandler({ secret: () => secret, onEvent: (e) => void events.push(e) }));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  const post = (payload: string, signature: string) =>
    fetch(url, { method: 'POST', body: payload, headers: { 'content-type': 'application/json', 'cloud-signature': signature } });

  it('answers 2xx to a valid delivery, handles the event once, and 400 to a forged one', async () => {
    const first = await post(body, signPayload(secret, body));
    expect(first.status).toBe(204);
    const again = await post(body, signPayload(secret, body));
    expect(again.status).toBe(200);
    expect(events.map((e) => e.id)).toEqual(['evt_01JD0000000000000000000000']);
    const forged = await post(body, signPayload('whsec_attacker', body));
    expect(forged.status).toBe(400);
    const stale = await post(body, signPayload(secret, body, Math.floor(Date.now() / 1000) - 3600));
    expect(stale.status).toBe(400);
    expect(events).toHaveLength(1);
  });
});
