import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApi } from '../api/bootstrap';
import { httpClient, type HttpClient } from './helpers/http';
import { auditRowOf, startStack, type Stack } from './helpers/stack';
import { createUser, FIXTURE_PASSWORD } from './helpers/fixtures';

/**
 * Sign-in throttling per email and per client IP, stored in PostgreSQL so that every API process
 * counts against the same buckets; and TRUSTED_PROXIES, which decides whose X-Forwarded-For names
 * the client. Two API processes share the stack's database here.
 */
let stack: Stack;
let second: { http: HttpClient; close(): Promise<void> };

beforeAll(async () => {
  const env = { LOGIN_MAX_ATTEMPTS_PER_EMAIL: '3', LOGIN_MAX_ATTEMPTS_PER_IP: '6', TRUSTED_PROXIES: 'loopback' };
  stack = await startStack({ temporal: 'none', env });
  const api = await createApi(stack.config);
  const server: Server = await new Promise((resolve) => {
    const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
  });
  second = {
    http: httpClient(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
    async close() {
      await new Promise((r) => server.close(r));
      await api.close();
    },
  };
});
afterAll(async () => {
  await second?.close();
  await stack?.close();
});

let nextIp = 1;
/** A client address of its own for each test (behind the trusted loopback proxy). */
const newClient = () => ({ 'x-forwarded-for': `198.51.100.${nextIp++}` });
const signIn = (http: HttpClient, email: string, password: string, headers: Record<string, string>) =>
  http.post('/v1/sessions', { body: { email, password }, headers });

describe('sign-in throttling', () => {
  it('counts attempts per email across API processes, and refuses even the right password past the limit', async () => {
    const { email } = await createUser(stack.db, stack.owner.accountId);
    const from = newClient();
    const statuses = [
      (await signIn(stack.http, email, 'wrong', from)).status,
      (await signIn(second.http, email, 'wrong', newClient())).status,
      (await signIn(stack.http, email, 'wrong', newClient())).status,
    ];
    expect(statuses).toEqual([401, 401, 401]);
    const refused = await signIn(second.http, email, FIXTURE_PASSWORD, from);
    expect(refused.status, refused.text).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited', retry_after: expect.any(Number) });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(800);
    // The bucket is the address, in any case; other addresses are not affected.
    expect((await signIn(stack.http, email.toUpperCase(), FIXTURE_PASSWORD, from)).status).toBe(429);
    const other = await createUser(stack.db, stack.owner.accountId);
    expect((await signIn(stack.http, other.email, FIXTURE_PASSWORD, from)).status).toBe(201);
    // Unknown addresses are counted the same way (nothing tells them apart).
    const unknown = [];
    for (let i = 0; i < 4; i++) unknown.push((await signIn(second.http, 'nobody@nowhere.example', 'x', newClient())).status);
    expect(unknown).toEqual([401, 401, 401, 429]);
    // The email is stored hashed.
    expect(await stack.db('login_throttle').where('bucket', 'like', `%${email}%`)).toEqual([]);
  });

  it("clears the email's count after a successful sign-in", async () => {
    const { email } = await createUser(stack.db, stack.owner.accountId);
    const from = newClient();
    expect((await signIn(stack.http, email, 'wrong', from)).status).toBe(401);
    expect((await signIn(stack.http, email, 'wrong', from)).status).toBe(401);
    expect((await signIn(second.http, email, FIXTURE_PASSWORD, from)).status).toBe(201);
    expect((await signIn(stack.http, email, 'wrong', from)).status).toBe(401);
    expect((await signIn(stack.http, email, 'wrong', from)).status).toBe(401);
    expect((await signIn(stack.http, email, FIXTURE_PASSWORD, from)).status).toBe(201);
  });

  it('counts failures per client IP across emails and processes', async () => {
    const from = newClient();
    const statuses = [];
    for (let i = 0; i < 7; i++) {
      const { email } = await createUser(stack.db, stack.owner.accountId);
      statuses.push((await signIn(i % 2 ? second.http : stack.http, email, 'wrong', from)).status);
    }
    expect(statuses).toEqual([401, 401, 401, 401, 401, 401, 429]);
    const { email } = await createUser(stack.db, stack.owner.accountId);
    expect((await signIn(stack.http, email, FIXTURE_PASSWORD, from)).status).toBe(429);
    expect((await signIn(stack.http, email, FIXTURE_PASSWORD, newClient())).status).toBe(201);
  });
});

describe('retention', () => {
  it('sweeps buckets whose window has ended', async () => {
    const { RetentionSweeper } = await import('../workers/retention-sweeper');
    await stack.db('login_throttle').insert({ bucket: 'ip:192.0.2.200', attempts: 9, window_started_at: new Date(Date.now() - 16 * 60_000) });
    const swept = await new RetentionSweeper({ db: stack.db, config: stack.config, logger: stack.api.deps.logger }).sweep();
    expect(swept.loginThrottle).toBeGreaterThanOrEqual(1);
    expect(await stack.db('login_throttle').where({ bucket: 'ip:192.0.2.200' })).toEqual([]);
    expect(Number((await stack.db('login_throttle').count('* as n').first())!.n)).toBeGreaterThan(0);
  });
});

describe('trusted proxies', () => {
  it('takes the client address from X-Forwarded-For of a trusted proxy, in the audit log and for /_dev', async () => {
    const res = await stack.http.get('/v1/services', { token: stack.owner.key, headers: { 'x-forwarded-for': '203.0.113.9, 127.0.0.1' } });
    expect((await auditRowOf(stack, res)).ip).toBe('203.0.113.9');
    // A remote client behind the local proxy is not on loopback: the /_dev stand-ins do not exist for it.
    const dev = await stack.http.post('/_dev/backends/vps/outage', {
      body: { down: false },
      headers: { 'x-forwarded-for': '203.0.113.9' },
      checkContract: false,
    });
    expect(dev.status).toBe(404);
    const local = await stack.http.post('/_dev/backends/vps/outage', { body: { down: false }, checkContract: false });
    expect(local.status).toBe(200);
  });

  it('ignores X-Forwarded-For without TRUSTED_PROXIES', async () => {
    const plain = await startStack({ temporal: 'none', env: { LOGIN_MAX_ATTEMPTS_PER_IP: '2' } });
    try {
      const res = await plain.http.get('/v1/services', { token: plain.owner.key, headers: { 'x-forwarded-for': '203.0.113.10' } });
      expect((await auditRowOf(plain, res)).ip).toBe('127.0.0.1');
      // A client cannot dodge the per-IP count by inventing addresses.
      const statuses = [];
      for (let i = 0; i < 3; i++) statuses.push((await signIn(plain.http, `x${i}@nowhere.example`, 'x', { 'x-forwarded-for': `192.0.2.${i}` })).status);
      expect(statuses).toEqual([401, 401, 429]);
    } finally {
      await plain.close();
    }
  });

  it('refuses a TRUSTED_PROXIES entry that is not an address, range or keyword', async () => {
    const { loadConfig } = await import('../common/config');
    expect(loadConfig({ TRUSTED_PROXIES: '10.0.0.0/8, loopback, ::1' }).TRUSTED_PROXIES).toEqual(['10.0.0.0/8', 'loopback', '::1']);
    expect(() => loadConfig({ TRUSTED_PROXIES: '10.0.0.0/33' })).toThrow(/TRUSTED_PROXIES/);
    expect(() => loadConfig({ TRUSTED_PROXIES: 'proxy.example' })).toThrow(/TRUSTED_PROXIES/);
  });
});
