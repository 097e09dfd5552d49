import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addressGroup, LoginThrottle } from '../domain/login-throttle';
import { loadConfig } from '../common/config';
import { createApiKey } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';

/**
 * Issue 22, API hardening: POST /mcp refuses DNS-rebinding requests (a foreign Origin, or a Host
 * this loopback server does not serve); a guessed bearer token counts like a failed sign-in
 * against the client address, on /mcp and /v1, and is throttled past the limit; that address
 * groups IPv6 by /64 and reads IPv4-mapped IPv6 as IPv4.
 */
let stack: Stack;
let port: number;

beforeAll(async () => {
  stack = await startStack({
    temporal: 'none',
    // Behind the loopback "proxy" each test names its own client address in X-Forwarded-For.
    env: { LOGIN_MAX_ATTEMPTS_PER_IP: '4', TRUSTED_PROXIES: 'loopback', MCP_ALLOWED_ORIGINS: 'https://console.example.com' },
  });
  port = Number(new URL(stack.url).port);
});
afterAll(() => stack?.close());

const initialize = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } },
};

interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: any;
}

/** POST /mcp with exactly these headers (fetch cannot set `Host`); the body parsed when it is JSON. */
function postMcp(headers: Record<string, string>): Promise<RawAnswer> {
  const payload = JSON.stringify(initialize);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/mcp',
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'content-length': Buffer.byteLength(payload),
          ...headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // An event stream: the MCP answer itself.
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

let nextClient = 1;
/** A client address of its own for each test. */
const newClient = () => `198.51.100.${nextClient++}`;

describe('POST /mcp and DNS rebinding', () => {
  it('refuses a foreign Origin with 403 in the error envelope, and takes its own origin, the configured ones and none', async () => {
    const auth = { authorization: `Bearer ${stack.owner.key}` };
    const evil = await postMcp({ ...auth, origin: 'http://evil.example' });
    expect(evil.status).toBe(403);
    expect(evil.body.error).toMatchObject({ type: 'authorization_error', code: 'origin_not_allowed', request_id: evil.headers['x-request-id'] });
    expect((await postMcp({ ...auth, origin: 'null' })).status).toBe(403);
    expect((await postMcp({ ...auth, origin: `http://127.0.0.1:${port + 1}` })).status).toBe(403);

    expect((await postMcp({ ...auth, origin: `http://127.0.0.1:${port}` })).status).toBe(200);
    expect((await postMcp({ ...auth, host: `localhost:${port}`, origin: `http://localhost:${port}` })).status).toBe(200);
    expect((await postMcp({ ...auth, origin: 'https://console.example.com' })).status).toBe(200);
    // Non-browser clients (the CLI, SDK clients, curl) send no Origin.
    expect((await postMcp(auth)).status).toBe(200);
  });

  it('refuses a Host this loopback server does not serve (a rebound name), even with a matching Origin', async () => {
    const auth = { authorization: `Bearer ${stack.owner.key}` };
    const rebound = await postMcp({ ...auth, host: `evil.example:${port}`, origin: `http://evil.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.body.error).toMatchObject({ type: 'authorization_error', code: 'host_not_allowed' });
    expect((await postMcp({ ...auth, host: `evil.example:${port}` })).status).toBe(403);
    expect((await postMcp({ ...auth, host: 'localhost@evil.example' })).status).toBe(403);
    // Refused before the credential is looked at.
    expect((await postMcp({ host: `evil.example:${port}` })).status).toBe(403);

    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, `console.example.com`]) {
      expect((await postMcp({ ...auth, host })).status, host).toBe(200);
    }
  });

  it('reads MCP_ALLOWED_ORIGINS as origins, and refuses what is not one', () => {
    expect(loadConfig({ MCP_ALLOWED_ORIGINS: 'https://a.example, http://b.example:8080/' }).MCP_ALLOWED_ORIGINS).toEqual([
      'https://a.example',
      'http://b.example:8080',
    ]);
    expect(() => loadConfig({ MCP_ALLOWED_ORIGINS: 'a.example' })).toThrow(/MCP_ALLOWED_ORIGINS/);
    expect(() => loadConfig({ MCP_ALLOWED_ORIGINS: 'https://a.example/path' })).toThrow(/MCP_ALLOWED_ORIGINS/);
  });
});

describe('guessed bearer tokens', () => {
  const guess = () => `Bearer cloud_live_${'x'.repeat(40)}`;

  it('count like failed sign-ins on /mcp: past the limit guesses get 429 with Retry-After, valid keys still work', async () => {
    const from = newClient();
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await postMcp({ authorization: guess(), 'x-forwarded-for': from })).status);
    expect(statuses).toEqual([401, 401, 401, 401]);
    const refused = await postMcp({ authorization: guess(), 'x-forwarded-for': from });
    expect(refused.status).toBe(429);
    expect(refused.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited', retry_after: expect.any(Number) });
    expect(Number(refused.headers['retry-after'])).toBeGreaterThan(800);
    expect((await postMcp({ authorization: guess(), 'x-forwarded-for': from })).status).toBe(429);
    // A valid credential behind the same address (a NAT) is not locked out by someone else's guesses.
    expect((await postMcp({ authorization: `Bearer ${stack.owner.key}`, 'x-forwarded-for': from })).status).toBe(200);
    expect((await stack.http.get('/v1/services', { token: stack.owner.key, headers: { 'x-forwarded-for': from } })).status).toBe(200);
    // Other addresses are not affected.
    expect((await postMcp({ authorization: `Bearer ${stack.owner.key}`, 'x-forwarded-for': newClient() })).status).toBe(200);
  });

  it('count on /v1 too, apart from sign-ins: guesses never hold off the address`s sign-ins, nor sign-ins its tokens', async () => {
    const from = newClient();
    const headers = { 'x-forwarded-for': from };
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await stack.http.get('/v1/services', { headers: { ...headers, authorization: guess() } })).status);
    expect(statuses).toEqual([401, 401, 401, 401, 429]);
    const again = await stack.http.get('/v1/services', { headers: { ...headers, authorization: guess() } });
    expect(again.status).toBe(429);
    expect(again.body.error.code).toBe('rate_limited');
    expect((await stack.http.get('/v1/services', { token: stack.owner.key, headers })).status).toBe(200);
    // A stale token's script behind a NAT does not lock the people behind it out of signing in.
    const signIn = await stack.http.post('/v1/sessions', { body: { email: 'nobody@nowhere.example', password: 'x' }, headers });
    expect(signIn.status).toBe(401);
    expect((await stack.http.get('/v1/services', { token: stack.owner.key, headers: { 'x-forwarded-for': newClient() } })).status).toBe(200);
  });

  it('do not count a missing or revoked credential (not a guess), nor valid ones', async () => {
    const from = newClient();
    const headers = { 'x-forwarded-for': from };
    const revoked = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['services:read'], revoked: true });
    const statuses = [];
    for (let i = 0; i < 6; i++) {
      statuses.push((await stack.http.get('/v1/services', { token: revoked.token, headers })).status);
      statuses.push((await stack.http.get('/v1/services', { headers })).status);
      statuses.push((await stack.http.get('/v1/services', { token: stack.owner.key, headers })).status);
    }
    expect(new Set(statuses)).toEqual(new Set([401, 200]));
    expect(await stack.db('login_throttle').where({ bucket: `ip:${from}` })).toEqual([]);
  });
});

describe('the client address bucket', () => {
  it('groups IPv6 by /64 and reads IPv4-mapped IPv6 as IPv4', () => {
    expect(addressGroup('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(addressGroup('2001:DB8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(addressGroup('2001:db8::')).toBe('2001:db8:0:0::/64');
    expect(addressGroup('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressGroup('::1')).toBe('0:0:0:0::/64');
    expect(addressGroup('::ffff:198.51.100.7')).toBe('198.51.100.7');
    expect(addressGroup('::ffff:c633:6407')).toBe('198.51.100.7');
    expect(addressGroup('198.51.100.7')).toBe('198.51.100.7');
    expect(LoginThrottle.ipBucket('2001:db8:1:2::99')).toBe('ip:2001:db8:1:2::/64');
    expect(LoginThrottle.ipBucket(null)).toBe('ip:unknown');
  });

  it('counts sign-ins from every address of one IPv6 /64 together, and IPv4-mapped with IPv4', async () => {
    // A new email each time, so that only the address's bucket fills.
    let n = 0;
    const signIn = (from: string) =>
      stack.http.post('/v1/sessions', { body: { email: `nobody-${n++}@nowhere.example`, password: 'x' }, headers: { 'x-forwarded-for': from } });
    const statuses = [];
    for (let i = 1; i <= 5; i++) statuses.push((await signIn(`2001:db8:aa:${i === 5 ? '0' : ''}1::${i}`)).status);
    // ...:aa:1::1-4 share a /64 (the 5th address, 2001:db8:aa:1::5 written with a leading zero, too).
    expect(statuses).toEqual([401, 401, 401, 401, 429]);
    expect((await signIn('2001:db8:aa:2::1')).status).toBe(401);

    const v4 = newClient();
    const [a, b, c, d] = v4.split('.').map(Number);
    const hex = (x: number, y: number) => ((x << 8) | y).toString(16);
    const mapped = `::ffff:${hex(a, b)}:${hex(c, d)}`; // ::ffff:c633:64xx, IPv4-mapped in hex words
    const mixed = [];
    for (const from of [v4, mapped, `::ffff:${v4}`, mapped, v4]) mixed.push((await signIn(from)).status);
    expect(mixed).toEqual([401, 401, 401, 401, 429]);
  });
});
