import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { startReceiver, waitFor, type Receiver } from './webhooks.support';

/**
 * A delivery over TLS to a receiver with a certificate from a test CA made here with openssl. The
 * CA is trusted for webhook deliveries only through WEBHOOK_EXTRA_CA_FILE (added to the system
 * roots); certificate verification itself stays on: a receiver whose certificate does not chain to
 * a trusted CA gets no delivery.
 */
let dir: string;
let stack: Stack;
let trusted: Receiver;
let untrusted: Receiver;

function openssl(args: string[]) {
  execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
}

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'whk-tls-'));
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Webhook Test CA']);
  writeFileSync(
    path.join(dir, 'san.ext'),
    'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n',
  );
  openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost']);
  openssl([
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    'san.ext',
  ]);
  // A self-signed certificate nobody trusts.
  openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'rogue.key',
    '-out',
    'rogue.pem',
    '-days',
    '2',
    '-subj',
    '/CN=localhost',
    '-addext',
    'subjectAltName=DNS:localhost',
  ]);
  const read = (f: string) => readFileSync(path.join(dir, f), 'utf8');
  trusted = await startReceiver({ tls: { key: read('server.key'), cert: read('server.pem') } });
  untrusted = await startReceiver({ tls: { key: read('rogue.key'), cert: read('rogue.pem') } });
  stack = await startStack({ env: { WEBHOOK_EXTRA_CA_FILE: path.join(dir, 'ca.pem'), WEBHOOK_RETRY_DELAYS: '100ms,100ms,100ms,100ms,100ms' } });
});
afterAll(async () => {
  await stack?.close();
  await Promise.all([trusted?.close(), untrusted?.close()]);
  rmSync(dir, { recursive: true, force: true });
});

describe('webhook delivery over https', () => {
  it('delivers to a receiver whose certificate chains to a trusted CA, verifying name and chain', async () => {
    expect(trusted.url).toMatch(/^https:\/\/localhost:\d+\/hook$/);
    const res = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: trusted.url, events: ['webhook.ping'] } });
    expect(res.status, res.text).toBe(201);
    trusted.secret = res.body.secret;
    await stack.http.post(`/v1/webhooks/${res.body.id}/ping`, { token: stack.owner.key });
    const [got] = await trusted.waitFor(1);
    expect(got.verification.ok).toBe(true);
    expect(got.headers['cloud-event']).toBe('webhook.ping');
    const [d] = await waitFor(
      async () => (await stack.http.get(`/v1/webhooks/${res.body.id}/deliveries`, { token: stack.owner.key })).body.data,
      (ds: any[]) => ds[0]?.status === 'delivered',
    );
    expect(d).toMatchObject({ status: 'delivered', attempts: 1, last_status: 200 });
  });

  it('refuses a receiver with an untrusted certificate: every attempt fails on TLS, nothing is received', async () => {
    const res = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: untrusted.url, events: ['webhook.ping'] } });
    expect(res.status).toBe(201);
    await stack.http.post(`/v1/webhooks/${res.body.id}/ping`, { token: stack.owner.key });
    const [d] = await waitFor(
      async () => (await stack.http.get(`/v1/webhooks/${res.body.id}/deliveries`, { token: stack.owner.key })).body.data,
      (ds: any[]) => ds[0]?.status === 'failed',
    );
    expect(d).toMatchObject({ status: 'failed', attempts: 6, last_status: null });
    expect(d.last_error).toMatch(/connection error: .*self[- ]signed certificate/);
    expect(untrusted.received).toHaveLength(0);
  });
});
