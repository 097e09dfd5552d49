import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { startReceiver, waitFor, type Receiver } from './webhooks.support';
import { classifyAddress, resetResolver, targetResolver, type ResolvedAddress } from '../infra/webhook-targets';

/**
 * Webhook targets (SSRF): https and public only; with WEBHOOK_ALLOW_INSECURE_TARGETS=1 also http and
 * loopback, never private, link-local, unique-local, CGNAT, multicast or unspecified. Checked at
 * registration and before every attempt after DNS resolution, and the request goes to the address
 * that was checked. DNS is replaced by an injected resolver (no real DNS on this machine).
 */
let insecure: Stack; // the test stack: WEBHOOK_ALLOW_INSECURE_TARGETS=1, with a worker
let strict: Stack; // the rule as written: no flag, no Temporal needed
const fakeDns = new Map<string, string[]>();
let lookups: string[] = [];

beforeAll(async () => {
  [insecure, strict] = await Promise.all([
    startStack({ env: { WEBHOOK_RETRY_DELAYS: '300ms,300ms,300ms,300ms,300ms', WEBHOOK_SWEEP_INTERVAL: '500ms' } }),
    startStack({ temporal: 'none', env: { WEBHOOK_ALLOW_INSECURE_TARGETS: '0' } }),
  ]);
  const system = targetResolver.lookup;
  targetResolver.lookup = async (host: string): Promise<ResolvedAddress[]> => {
    lookups.push(host);
    const fake = fakeDns.get(host);
    if (!fake) return system(host);
    return fake.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  };
});
afterAll(async () => {
  resetResolver();
  await Promise.all([insecure?.close(), strict?.close()]);
});
const receivers: Receiver[] = [];
afterEach(async () => {
  await Promise.all(receivers.splice(0).map((r) => r.close()));
  fakeDns.clear();
});

const create = (stack: Stack, url: string) => stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url, events: ['*'] } });

async function expectRejected(stack: Stack, url: string, reason: RegExp) {
  const res = await create(stack, url);
  expect(res.status, `${url}: ${res.text}`).toBe(400);
  expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'url' });
  expect(res.body.error.message).toMatch(reason);
}

describe('address classes', () => {
  it.each([
    ['8.8.8.8', 'public'],
    ['10.0.0.1', 'private'],
    ['172.16.5.4', 'private'],
    ['172.32.0.1', 'public'],
    ['192.168.1.1', 'private'],
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['100.64.0.1', 'cgnat'],
    ['224.0.0.251', 'multicast'],
    ['0.0.0.0', 'unspecified'],
    ['255.255.255.255', 'reserved'],
    ['::1', 'loopback'],
    ['::', 'unspecified'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456:789a::1', 'unique-local'],
    ['ff02::1', 'multicast'],
    ['2606:4700:4700::1111', 'public'],
    ['::ffff:10.0.0.1', 'private'],
    ['::ffff:a00:1', 'private'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['64:ff9b::a9fe:a9fe', 'link-local'],
    ['2002:c0a8:0101::1', 'private'],
    ['2001:db8::1', 'reserved'],
    ['127.0.0.1%eth0', 'reserved'],
    ['8.8.8.8%1', 'reserved'],
  ])('%s is %s', (address, cls) => {
    expect(classifyAddress(address)).toBe(cls);
  });
});

describe('registration with WEBHOOK_ALLOW_INSECURE_TARGETS=1', () => {
  it.each([
    ['https://10.0.0.8/hook', /private/],
    ['http://192.168.1.20:8080/hook', /private/],
    ['https://172.20.0.1/hook', /private/],
    ['https://169.254.169.254/latest/meta-data', /link-local/],
    ['https://[fe80::1]/hook', /link-local/],
    ['https://[fc00::1]/hook', /unique-local/],
    ['https://[fd00:ec2::254]/hook', /unique-local/],
    ['https://100.64.1.1/hook', /cgnat/],
    ['https://224.0.0.1/hook', /multicast/],
    ['https://0.0.0.0/hook', /unspecified/],
    ['https://[::]/hook', /unspecified/],
    ['https://[::ffff:10.0.0.1]/hook', /private/],
  ])('rejects %s', async (url, reason) => {
    await expectRejected(insecure, url, reason);
  });

  it('rejects a name that resolves to a private address, or to any private address among public ones', async () => {
    fakeDns.set('internal.example.test', ['10.20.30.40']);
    fakeDns.set('mixed.example.test', ['93.184.216.34', '192.168.0.1']);
    fakeDns.set('v6.example.test', ['fd00::5']);
    await expectRejected(insecure, 'https://internal.example.test/hook', /resolves to 10\.20\.30\.40.*private/);
    await expectRejected(insecure, 'https://mixed.example.test/hook', /resolves to 192\.168\.0\.1/);
    await expectRejected(insecure, 'https://v6.example.test/hook', /unique-local/);
    await expectRejected(insecure, 'https://does-not-exist.invalid/hook', /does not resolve/);
  });

  it('accepts http and loopback (127.0.0.0/8, ::1, localhost)', async () => {
    for (const url of ['http://localhost:9/hook', 'http://127.0.0.1:9/hook', 'https://127.3.4.5/hook', 'http://[::1]:9/hook']) {
      const res = await create(insecure, url);
      expect(res.status, `${url}: ${res.text}`).toBe(201);
      await insecure.http.delete(`/v1/webhooks/${res.body.id}`, { token: insecure.owner.key });
    }
  });
});

describe('registration without the flag (SPEC as written)', () => {
  it('rejects plain http and every loopback form', async () => {
    await expectRejected(strict, 'http://93.184.216.34/hook', /https/);
    await expectRejected(strict, 'https://127.0.0.1/hook', /loopback/);
    await expectRejected(strict, 'https://localhost/hook', /loopback/);
    await expectRejected(strict, 'https://[::1]/hook', /loopback/);
    await expectRejected(strict, 'https://[::ffff:127.0.0.1]/hook', /loopback/);
    await expectRejected(strict, 'https://10.0.0.1/hook', /private/);
    await expectRejected(strict, 'https://169.254.1.1/hook', /link-local/);
    await expectRejected(strict, 'https://[fc00::9]/hook', /unique-local/);
    fakeDns.set('rebinder.example.test', ['127.0.0.1']);
    await expectRejected(strict, 'https://rebinder.example.test/hook', /loopback/);
  });

  it('accepts public https targets', async () => {
    fakeDns.set('hooks.example.test', ['93.184.216.34', '2606:2800:220:1::1']);
    for (const url of ['https://hooks.example.test/cloud', 'https://93.184.216.34:8443/x?y=1']) {
      const res = await create(strict, url);
      expect(res.status, res.text).toBe(201);
      expect(res.body.url).toBe(url);
    }
  });
});

describe('before every attempt', () => {
  it('connects to the address it checked, with the original Host, resolving once per attempt', async () => {
    const r = await startReceiver({ path: '/hook' });
    receivers.push(r);
    fakeDns.set('receiver.example.test', ['127.0.0.1']);
    const url = `http://receiver.example.test:${r.port}/hook`;
    const res = await create(insecure, url);
    expect(res.status, res.text).toBe(201);
    r.secret = res.body.secret;
    lookups = [];
    // The name exists only in the injected resolver: had the HTTP client resolved it again (system
    // DNS at connect time), the request could not have arrived. It arrives, so it went to the checked address.
    await insecure.http.post(`/v1/webhooks/${res.body.id}/ping`, { token: insecure.owner.key });
    await r.waitFor(1);
    expect(r.received[0].headers.host).toBe(`receiver.example.test:${r.port}`);
    expect(r.received[0].verification.ok).toBe(true);
    expect(lookups.filter((h) => h === 'receiver.example.test')).toHaveLength(1);
    await insecure.http.delete(`/v1/webhooks/${res.body.id}`, { token: insecure.owner.key });
  });

  it('fails the attempt with a clear last_error when the target has become forbidden, and sends nothing', async () => {
    const r = await startReceiver({ path: '/hook' });
    receivers.push(r);
    fakeDns.set('moving.example.test', ['127.0.0.1']);
    const res = await create(insecure, `http://moving.example.test:${r.port}/hook`);
    expect(res.status).toBe(201);
    r.secret = res.body.secret;
    const hookId = res.body.id;
    fakeDns.set('moving.example.test', ['10.9.8.7']);
    await insecure.http.post(`/v1/webhooks/${hookId}/ping`, { token: insecure.owner.key });
    const [d] = await waitFor(
      async () => (await insecure.http.get(`/v1/webhooks/${hookId}/deliveries`, { token: insecure.owner.key })).body.data,
      (ds: any[]) => ds[0]?.attempts >= 1,
    );
    expect(d.last_status).toBeNull();
    expect(d.last_error).toMatch(/^target refused: host "moving\.example\.test" resolves to 10\.9\.8\.7, which is a private address/);
    expect(r.received).toHaveLength(0);
    // Back on loopback: the next attempt of the same schedule goes through.
    fakeDns.set('moving.example.test', ['127.0.0.1']);
    await r.waitFor(1);
    const [done] = await waitFor(
      async () => (await insecure.http.get(`/v1/webhooks/${hookId}/deliveries`, { token: insecure.owner.key })).body.data,
      (ds: any[]) => ds[0]?.status === 'delivered',
    );
    expect(done.attempts).toBeGreaterThanOrEqual(2);
    expect(r.received.every((x) => x.verification.ok)).toBe(true);
    await insecure.http.delete(`/v1/webhooks/${hookId}`, { token: insecure.owner.key });
  });
});

describe("the control plane's own local services stay out of reach, even with the flag", () => {
  it('refuses the API, its /_dev stand-ins, the Temporal ports and the UI at registration', async () => {
    const apiPort = new URL(insecure.url).port;
    const temporalPort = insecure.temporal!.address.split(':').pop();
    const uiPort = new URL(insecure.config.TEMPORAL_UI_URL).port;
    const ownService = /belongs to the control plane/;
    await expectRejected(insecure, `http://127.0.0.1:${apiPort}/hook`, ownService);
    await expectRejected(insecure, `http://localhost:${apiPort}/v1/services`, ownService);
    await expectRejected(insecure, `http://[::1]:${apiPort}/hook`, ownService);
    await expectRejected(insecure, `http://127.0.0.1:${temporalPort}/`, ownService);
    await expectRejected(insecure, `http://127.0.0.1:${uiPort}/namespaces/default/workflows`, ownService);
    await expectRejected(insecure, `http://127.0.0.1:${insecure.config.PORT}/hook`, ownService);
    fakeDns.set('sneaky.example.test', ['127.0.0.1']);
    await expectRejected(insecure, `http://sneaky.example.test:${apiPort}/hook`, ownService);
    // /_dev on any loopback port, however it is spelt.
    for (const path of ['/_dev/services/svc_1/terminate', '/_DEV/invoices/inv_1/pay', '/%5Fdev/backends/vps/outage', '//_dev/x']) {
      await expectRejected(insecure, `http://127.0.0.1:9${path}`, /_dev/);
    }
  });

  it('refuses them before every attempt too: a stored target aimed at /_dev is never called', async () => {
    const svc = await insecure
      .db('services')
      .insert({ account_id: insecure.owner.accountId, family: 'vps', status: 'active', capabilities: '{}' })
      .returning('id');
    const serviceId = Number(svc[0].id);
    const apiPort = new URL(insecure.url).port;
    // As if it had been registered before this rule existed.
    const [hook] = await insecure
      .db('webhooks')
      .insert({
        account_id: insecure.owner.accountId,
        url: `http://127.0.0.1:${apiPort}/_dev/services/svc_${serviceId}/terminate`,
        events: ['*'],
        secret_sealed: insecure.api.deps.keyring.encrypt('webhook-secret', 'whsec_test'),
      })
      .returning('id');
    await insecure.http.post(`/v1/webhooks/whk_${hook.id}/ping`, { token: insecure.owner.key });
    const [d] = await waitFor(
      async () => (await insecure.http.get(`/v1/webhooks/whk_${hook.id}/deliveries`, { token: insecure.owner.key })).body.data,
      (ds: any[]) => ds[0]?.attempts >= 1,
    );
    expect(d.last_error).toMatch(/^target refused: port \d+ on this machine belongs to the control plane/);
    expect((await insecure.db('services').where({ id: serviceId }).first()).status).toBe('active');
    await insecure.http.delete(`/v1/webhooks/whk_${hook.id}`, { token: insecure.owner.key });
  });
});
