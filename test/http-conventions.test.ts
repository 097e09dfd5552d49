import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createUser } from './helpers/fixtures';
import { legacyRequestHash } from '../domain/idempotency';
import { isLoopback } from '../api/client-address';

/** Conventions that hold for every route: ids, errors, body handling, idempotency, pagination, rate limits, audit. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
});
afterAll(() => stack?.close());

describe('request ids and errors', () => {
  it('puts a req_<ulid> X-Request-Id on every answer, equal to request_id in errors', async () => {
    const ok = await stack.http.get('/v1/services', { token: stack.owner.key });
    expect(ok.headers.get('x-request-id')).toMatch(/^req_[0-9A-Z]{26}$/);
    const err = await stack.http.get('/v1/nowhere', { token: stack.owner.key });
    expect(err.status).toBe(404);
    expect(err.body).toEqual({
      error: { type: 'invalid_request_error', code: 'route_not_found', message: expect.any(String), param: null, request_id: err.headers.get('x-request-id') },
    });
  });

  it('answers a wrong method with 405 method_not_allowed and Allow', async () => {
    const res = await stack.http.delete('/v1/services', { token: stack.owner.key });
    expect(res.status).toBe(405);
    expect(res.body.error.code).toBe('method_not_allowed');
    expect(res.headers.get('allow')).toBe('GET');
  });

  it('answers malformed JSON with 400 invalid_json', async () => {
    const key = await stack.http.post('/v1/api-keys', { token: stack.owner.session, rawBody: '{"name": ', headers: { 'content-type': 'application/json' } });
    expect(key.status).toBe(400);
    expect(key.body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_json' });
  });

  it('answers a non-JSON body with 415 unsupported_media_type', async () => {
    const res = await stack.http.post('/v1/sessions', { rawBody: 'email=a&password=b', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(res.status).toBe(415);
    expect(res.body.error.code).toBe('unsupported_media_type');
  });

  it('answers a body over 1 MiB with 413 payload_too_large', async () => {
    const res = await stack.http.post('/v1/sessions', { body: { email: 'a@b.c', password: 'x'.repeat(1_100_000) } });
    expect(res.status).toBe(413);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'payload_too_large' });
  });

  it('reports every invalid field with its dotted param', async () => {
    const res = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 5, scopes: ['services:read', 7] } });
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe('validation_failed');
    expect(res.body.error.errors.map((e: { param: string }) => e.param).sort()).toEqual(['name', 'scopes.1']);
  });

  it('refuses a NUL character in a query, path or body string with 400 validation_failed, never 500', async () => {
    const query = await stack.http.get('/v1/operations?type=vps.power%00x', { token: stack.owner.key });
    expect(query.status).toBe(400);
    expect(query.body.error).toMatchObject({ type: 'invalid_request_error', code: 'validation_failed', param: 'type' });
    const filter = await stack.http.get('/v1/audit-logs?credential_id=%00', { token: stack.owner.key });
    expect(filter.body.error).toMatchObject({ code: 'validation_failed', param: 'credential_id' });
    const path = await stack.http.get('/v1/services/svc_%00', { token: stack.owner.key });
    expect(path.body.error).toMatchObject({ code: 'validation_failed', param: 'id' });
    const signIn = await stack.http.post('/v1/sessions', { body: { email: 'owner\u0000@example.test', password: 'x' } });
    expect(signIn.status).toBe(400);
    expect(signIn.body.error).toMatchObject({ code: 'validation_failed', param: 'email' });
    const nested = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'nul', scopes: ['services:read', 'a\u0000'] } });
    expect(nested.body.error).toMatchObject({ code: 'validation_failed', param: 'scopes.1' });
    const key = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'nul\u0000', scopes: ['services:read'] } });
    expect(key.status).toBe(400);
    expect(key.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
  });

  it('accepts ids with or without their prefix', async () => {
    const svc = await createService(stack.db, stack.owner.accountId);
    const a = await stack.http.get(`/v1/services/${svc.id}`, { token: stack.owner.key });
    const b = await stack.http.get(`/v1/services/${svc.serviceId}`, { token: stack.owner.key });
    expect(a.status).toBe(200);
    expect(b.body).toEqual(a.body);
    expect((await stack.http.get('/v1/services/svc_abc', { token: stack.owner.key })).status).toBe(404);
    expect((await stack.http.get('/v1/services/key_1', { token: stack.owner.key })).status).toBe(404);
  });
});

describe('idempotency', () => {
  async function newKey() {
    const res = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'idem', scopes: ['services:read', 'account:read'] } });
    return res.body.id as string;
  }

  it('replays a stored 2xx with the same status and body and Idempotent-Replayed: true', async () => {
    const id = await newKey();
    const headers = { 'idempotency-key': `rename-${id}` };
    const first = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { name: 'first' } });
    expect(first.status).toBe(200);
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    await stack
      .db('api_keys')
      .where({ id: Number(id.slice(4)) })
      .update({ name: 'changed meanwhile' });
    const replay = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { name: 'first' } });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);
  });

  it('refuses the same key with another body (422) or path (422)', async () => {
    const id = await newKey();
    const headers = { 'idempotency-key': `reuse-${id}` };
    await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { name: 'one' } });
    const otherBody = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { name: 'two' } });
    expect(otherBody.status).toBe(422);
    expect(otherBody.body.error).toMatchObject({ type: 'invalid_request_error', code: 'idempotency_key_reused' });
    const otherPath = await stack.http.post(`/v1/api-keys/${id}/revoke`, { token: stack.owner.session, headers });
    expect(otherPath.status).toBe(422);
  });

  it('answers 409 idempotency_key_in_use while the first request still runs', async () => {
    const id = await newKey();
    const path = `/v1/api-keys/${id}`;
    await stack.db('idempotency_keys').insert({
      account_id: stack.owner.accountId,
      key: 'in-flight',
      method: 'PATCH',
      path,
      // A record written before fingerprints were keyed still matches its request.
      request_hash: legacyRequestHash({ method: 'PATCH', path, body: { name: 'x' } }),
      state: 'running',
      expires_at: new Date(Date.now() + 60_000),
    });
    const res = await stack.http.patch(path, { token: stack.owner.session, headers: { 'idempotency-key': 'in-flight' }, body: { name: 'x' } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('idempotency_key_in_use');
  });

  it('does not store a non-2xx answer: the same key can be retried', async () => {
    const id = await newKey();
    const headers = { 'idempotency-key': `retry-${id}` };
    const widen = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { scopes: ['vps:write'] } });
    expect(widen.status).toBe(403);
    const fixed = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, headers, body: { scopes: ['account:read'] } });
    expect(fixed.status).toBe(200);
    expect(fixed.headers.get('idempotent-replayed')).toBeNull();
  });

  it('keeps key spaces per account', async () => {
    const [other] = await stack.db('accounts').insert({ name: 'Other' }).returning('id');
    const owner = await createUser(stack.db, other.id, { isOwner: true });
    const { createSession } = await import('./helpers/fixtures');
    const session = await createSession(stack.db, other.id, owner.userId);
    const mine = await newKey();
    const created = await stack.http.post('/v1/api-keys', { token: session.token, body: { name: 'theirs', scopes: ['account:read'] } });
    const headers = { 'idempotency-key': 'shared-name' };
    const a = await stack.http.patch(`/v1/api-keys/${mine}`, { token: stack.owner.session, headers, body: { name: 'a' } });
    const b = await stack.http.patch(`/v1/api-keys/${created.body.id}`, { token: session.token, headers, body: { name: 'b' } });
    expect(a.status).toBe(200);
    expect(b.status).toBe(200);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
  });
});

describe('pagination', () => {
  it('walks a list with opaque cursors: has_more, no duplicates, no totals', async () => {
    const [acct] = await stack.db('accounts').insert({ name: 'Pages' }).returning('id');
    const owner = await createUser(stack.db, acct.id, { isOwner: true });
    const key = await createApiKey(stack.db, acct.id, owner.userId, { scopes: ['services:read', 'operations:read'] });
    const ids: string[] = [];
    for (let i = 0; i < 25; i++) ids.push((await createService(stack.db, acct.id)).id);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: any = await stack.http.get(`/v1/services?limit=10${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token: key.token });
      expect(res.status).toBe(200);
      expect(Object.keys(res.body).sort()).toEqual(['data', 'has_more', 'next_cursor', 'object']);
      seen.push(...res.body.data.map((s: { id: string }) => s.id));
      cursor = res.body.has_more ? res.body.next_cursor : null;
      if (!res.body.has_more) expect(res.body.next_cursor).toBeNull();
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(seen).toEqual([...ids].reverse());

    const first = await stack.http.get('/v1/services?limit=10', { token: key.token });
    const tampered = first.body.next_cursor.replace(/^./, (c: string) => (c === 'e' ? 'f' : 'e'));
    const bad = await stack.http.get(`/v1/services?cursor=${encodeURIComponent(tampered)}`, { token: key.token });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'cursor' });
    const elsewhere = await stack.http.get(`/v1/operations?cursor=${encodeURIComponent(first.body.next_cursor)}`, { token: key.token });
    expect(elsewhere.body.error).toMatchObject({ code: 'validation_failed', param: 'cursor' });
    const otherFilter = await stack.http.get(`/v1/services?family=dns&cursor=${encodeURIComponent(first.body.next_cursor)}`, { token: key.token });
    expect(otherFilter.body.error.param).toBe('cursor');
  });

  it.each(['0', '101', 'ten', '1.5'])('rejects limit=%s with 400 param limit', async (limit) => {
    const res = await stack.http.get(`/v1/services?limit=${limit}`, { token: stack.owner.key });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'limit' });
  });

  it('defaults to 20 items a page', async () => {
    for (let i = 0; i < 21; i++) await createService(stack.db, stack.owner.accountId);
    const res = await stack.http.get('/v1/services', { token: stack.owner.key });
    expect(res.body.data).toHaveLength(20);
    expect(res.body.has_more).toBe(true);
  });
});

describe('rate limits', () => {
  it('sends RateLimit headers and answers 429 rate_limited past the per-key and per-account budgets', async () => {
    const limited = await startStack({
      temporal: 'none',
      env: { RATE_LIMIT_DEFAULT_PER_KEY: '3', RATE_LIMIT_DEFAULT_PER_ACCOUNT: '5', RATE_LIMIT_WINDOW: '60s' },
    });
    try {
      const second = await createApiKey(limited.db, limited.owner.accountId, limited.owner.userId, { scopes: ['services:read'] });
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push(await limited.http.get('/v1/services', { token: limited.owner.key }));
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 429]);
      expect(answers[0].headers.get('ratelimit-limit')).toBe('3');
      expect(answers[0].headers.get('ratelimit-remaining')).toBe('2');
      expect(Number(answers[0].headers.get('ratelimit-reset'))).toBeGreaterThan(0);
      const denied = answers[3];
      expect(denied.body.error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limited', retry_after: expect.any(Number) });
      expect(denied.headers.get('retry-after')).toBe(String(denied.body.error.retry_after));
      // The account has used 3 of 5; the second key gets 2 more, then the account budget is spent.
      const other = [];
      for (let i = 0; i < 3; i++) other.push((await limited.http.get('/v1/services', { token: second.token })).status);
      expect(other).toEqual([200, 200, 429]);

      const caps = await limited.http.get('/v1/capabilities', { token: second.token });
      expect(caps.status).toBe(429);
    } finally {
      await limited.close();
    }
  });
});

describe('audit log', () => {
  it('records every /v1 request with route template, scope, status, code, credential, ip, channel and duration', async () => {
    const svc = await createService(stack.db, stack.owner.accountId);
    const ok = await stack.http.get(`/v1/services/${svc.id}`, { token: stack.owner.key, headers: { 'cloud-channel': 'cli' } });
    const missing = await stack.http.get('/v1/services/svc_999999', { token: stack.owner.key, headers: { 'cloud-channel': 'mcp' } });
    const unknownChannel = await stack.http.get('/v1/services', { token: stack.owner.key, headers: { 'cloud-channel': 'carrier-pigeon' } });
    await stack.api.deps.audit.flush();
    const res = await stack.http.get('/v1/audit-logs?limit=100', { token: stack.owner.key });
    const byRequest = (r: { headers: Headers }) => res.body.data.find((e: { request_id: string }) => e.request_id === r.headers.get('x-request-id'));
    expect(byRequest(ok)).toMatchObject({
      object: 'audit_log',
      method: 'GET',
      path: `/v1/services/${svc.id}`,
      route: '/v1/services/:id',
      status: 200,
      error_code: null,
      scope_required: 'services:read',
      credential_id: stack.owner.keyId,
      ip: '127.0.0.1',
      via: 'cli',
      duration_ms: expect.any(Number),
    });
    expect(byRequest(ok).id).toMatch(/^log_\d+$/);
    expect(byRequest(missing)).toMatchObject({ status: 404, error_code: 'not_found', via: 'mcp' });
    expect(byRequest(unknownChannel).via).toBe('api');

    const filtered = await stack.http.get('/v1/audit-logs?via=mcp&status=404', { token: stack.owner.key });
    expect(filtered.body.data.map((e: { request_id: string }) => e.request_id)).toEqual([missing.headers.get('x-request-id')]);
    const bad = await stack.http.get('/v1/audit-logs?created_after=yesterday', { token: stack.owner.key });
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'created_after' });
  });

  it('reads created_after / created_before with any offset as UTC, and refuses dates PostgreSQL cannot hold with 400, never 500', async () => {
    const ok = await stack.http.get('/v1/services', { token: stack.owner.key });
    const requestId = ok.headers.get('x-request-id');
    await stack.api.deps.audit.flush();
    const ids = async (query: string) => {
      const res = await stack.http.get(`/v1/audit-logs?${query}`, { token: stack.owner.key });
      expect(res.status, query).toBe(200);
      return res.body.data.map((e: { request_id: string }) => e.request_id);
    };
    // Offsets past PostgreSQL's ±15:59 are valid ISO 8601: read as the UTC instant they name.
    expect(await ids('created_after=2000-01-01T00:00:00-23:59&limit=100')).toContain(requestId);
    expect(await ids('created_before=9999-12-31T00:00:00%2B23:59&limit=100')).toContain(requestId);
    expect(await ids(`created_after=${encodeURIComponent(new Date(Date.now() + 3_600_000).toISOString().replace('Z', '+20:00'))}`)).toContain(requestId);
    for (const query of ['created_after=0000-01-01T00:00:00Z', 'created_before=0001-01-01T00:00:00%2B01:00', 'created_before=9999-12-31T23:59:59-01:00']) {
      const res = await stack.http.get(`/v1/audit-logs?${query}`, { token: stack.owner.key });
      expect(res.status, query).toBe(400);
      expect(res.body.error, query).toMatchObject({ code: 'validation_failed', param: query.split('=')[0] });
    }
  });

  it('never stores secrets: not passwords, session tokens or API key tokens', async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['apikeys:write', 'account:read'] });
    const { FIXTURE_PASSWORD } = await import('./helpers/fixtures');
    const signIn = await stack.http.post('/v1/sessions', { body: { email: user.email, password: FIXTURE_PASSWORD } });
    const key = await stack.http.post('/v1/api-keys', { token: signIn.body.token, body: { name: 'secret?', scopes: ['account:read'] } });
    await stack.http.get(`/v1/account?token=${key.body.token}`, { token: key.body.token });
    await stack.api.deps.audit.flush();
    const dump = JSON.stringify(await stack.db('audit_logs').select('*'));
    expect(dump).not.toContain(FIXTURE_PASSWORD);
    expect(dump).not.toContain(signIn.body.token);
    expect(dump).not.toContain(key.body.token);
    expect(dump).toContain('/v1/sessions');
  });

  it('records unauthenticated requests and unknown routes, not health checks', async () => {
    const anon = await stack.http.get('/v1/services');
    const nowhere = await stack.http.get('/v1/does-not-exist');
    await stack.http.get('/healthz');
    await stack.api.deps.audit.flush();
    const rows = await stack.db('audit_logs').whereIn('request_id', [anon.headers.get('x-request-id'), nowhere.headers.get('x-request-id')]);
    expect(rows).toHaveLength(2);
    expect(rows.find((r) => r.request_id === anon.headers.get('x-request-id'))).toMatchObject({
      status: 401,
      error_code: 'authentication_required',
      account_id: null,
    });
    expect(rows.find((r) => r.request_id === nowhere.headers.get('x-request-id'))).toMatchObject({ status: 404, error_code: 'route_not_found', route: null });
    expect(await stack.db('audit_logs').where('path', '/healthz').count('* as n').first()).toMatchObject({ n: 0 });
  });

  it('loses no entry on a clean shutdown', async () => {
    const { createApi } = await import('../api/bootstrap');
    const { loadConfig } = await import('../common/config');
    const { createDb } = await import('../db/knex');
    const db = createDb(stack.database.url, 2);
    const api = await createApi(loadConfig({ ...process.env, DATABASE_URL: stack.database.url, AUDIT_FLUSH_INTERVAL: '1h', LOG_LEVEL: 'silent' }), { db });
    const server = await new Promise<import('node:http').Server>((resolve) => {
      const s = api.app.listen(0, '127.0.0.1', () => resolve(s));
    });
    const port = (server.address() as import('node:net').AddressInfo).port;
    const requestIds: string[] = [];
    for (let i = 0; i < 30; i++) {
      const res = await fetch(`http://127.0.0.1:${port}/v1/services`, { headers: { authorization: `Bearer ${stack.owner.key}` } });
      requestIds.push(res.headers.get('x-request-id')!);
    }
    expect(await stack.db('audit_logs').whereIn('request_id', requestIds).count('* as n').first()).toMatchObject({ n: 0 });
    await new Promise((r) => server.close(r));
    await api.close();
    expect(await stack.db('audit_logs').whereIn('request_id', requestIds).count('* as n').first()).toMatchObject({ n: 30 });
    await db.destroy();
  });
});

describe('capabilities, account and services', () => {
  it('describes the instance', async () => {
    const res = await stack.http.get('/v1/capabilities', { token: stack.owner.key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      object: 'capabilities',
      api_version: 'v1',
      brand: expect.any(String),
      scopes_never_grantable_to_keys: ['apikeys:read', 'apikeys:write', 'users:read', 'users:write'],
      limits: {
        max_page_size: 100,
        default_page_size: 20,
        rate_limits: { default: { per_key: 600, per_account: 1200 }, mutations: { per_key: 120, per_account: 240 } },
      },
    });
    expect(res.body.scopes).toEqual(expect.arrayContaining(['services:read', 'vps:console', 'wordpress:console', 'apikeys:write']));
    expect(res.body.resources).toEqual(expect.arrayContaining(['services', 'operations', 'api-keys', 'account', 'audit-logs']));
    expect(res.body.features).toMatchObject({ api_keys: true, operations: true, idempotency_keys: true });
  });

  it('returns the account and the credential in use', async () => {
    const svc = await createService(stack.db, stack.owner.accountId);
    const key = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['account:read'], allowlist: [svc.serviceId] });
    const res = await stack.http.get('/v1/account', { token: key.token });
    expect(res.body).toMatchObject({
      object: 'account',
      id: `cus_${stack.owner.accountId}`,
      credit: 5,
      credential: {
        object: 'credential',
        id: key.id,
        type: 'api_key',
        scopes: ['account:read'],
        service_allowlist: [svc.id],
        is_owner: true,
        rate_limit_tier: 'standard',
      },
    });
  });

  it("shows a service with every field, filters by family, and hides other accounts' services", async () => {
    const svc = await createService(stack.db, stack.owner.accountId, { family: 'dns', label: 'zone.test' });
    const res = await stack.http.get(`/v1/services/${svc.id}`, { token: stack.owner.key });
    expect(res.body).toEqual({
      object: 'service',
      id: svc.id,
      family: 'dns',
      status: 'active',
      name: 'Test dns',
      label: 'zone.test',
      primary_ip: null,
      billing_cycle: 'monthly',
      next_due_date: '2030-01-01',
      created_at: expect.any(String),
      capabilities: { records: true, export: true },
    });
    const dnsOnly = await stack.http.get('/v1/services?family=dns&limit=100', { token: stack.owner.key });
    expect(dnsOnly.body.data.every((s: { family: string }) => s.family === 'dns')).toBe(true);
    const [other] = await stack.db('accounts').insert({ name: 'Other' }).returning('id');
    const theirs = await createService(stack.db, other.id);
    expect((await stack.http.get(`/v1/services/${theirs.id}`, { token: stack.owner.key })).status).toBe(404);
  });
});

describe('development stand-ins', () => {
  it('moves services like billing does and writes the service.* events', async () => {
    const svc = await createService(stack.db, stack.owner.accountId);
    const suspended = await stack.http.post(`/_dev/services/${svc.id}/suspend`);
    expect(suspended.body).toMatchObject({ id: svc.id, status: 'suspended' });
    const unsuspended = await stack.http.post(`/_dev/services/${svc.id}/unsuspend`);
    expect(unsuspended.body.status).toBe('active');
    const terminated = await stack.http.post(`/_dev/services/${svc.id}/terminate`);
    expect(terminated.body.status).toBe('terminated');
    expect((await stack.http.post(`/_dev/services/${svc.id}/unsuspend`)).status).toBe(409);
    const events = await stack.db('events').where({ account_id: stack.owner.accountId }).whereRaw(`data->>'id' = ?`, [svc.id]).orderBy('id');
    expect(events.map((e) => e.type)).toEqual(['service.suspended', 'service.active', 'service.terminated']);
    expect(events[0].id).toMatch(/^evt_[0-9A-Z]{26}$/);
  });

  it('switches a backend family off and on', async () => {
    const down = await stack.http.post('/_dev/backends/vps/outage', { body: { down: true } });
    expect(down.body).toMatchObject({ family: 'vps', down: true });
    expect(await stack.api.deps.providers.switchboard.downFamilies()).toContain('vps');
    await stack.http.post('/_dev/backends/vps/outage', { body: { down: false } });
    expect(await stack.api.deps.providers.switchboard.isDown('vps')).toBe(false);
    expect((await stack.http.post('/_dev/backends/mainframe/outage', { body: { down: true } })).status).toBe(400);
  });

  it('only answers loopback callers, and does not exist without CLOUD_DEV_ENDPOINTS', async () => {
    expect(isLoopback('127.0.0.1')).toBe(true);
    expect(isLoopback('::1')).toBe(true);
    expect(isLoopback('10.0.0.5')).toBe(false);
    expect(isLoopback('192.168.1.2')).toBe(false);
    const plain = await startStack({ temporal: 'none', env: { CLOUD_DEV_ENDPOINTS: '0' } });
    try {
      const res = await plain.http.post('/_dev/backends/vps/outage', { body: { down: true } });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe('route_not_found');
    } finally {
      await plain.close();
    }
  });
});
