import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { FIXTURE_PASSWORD, createApiKey, createService, createSession, createUser } from './helpers/fixtures';
import { sha256Hex } from '../common/crypto';

/** Sessions, API keys and effective authority (SPEC "Authentication", DECISIONS "Credentials and sessions"). */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
});
afterAll(() => stack?.close());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('sessions', () => {
  it('signs in with email and password, acts as the user, and signs out', async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['services:read', 'account:read'] });
    const res = await stack.http.post('/v1/sessions', { body: { email: user.email.toUpperCase(), password: FIXTURE_PASSWORD } });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ object: 'session', user: { id: `usr_${user.userId}`, email: user.email, is_owner: false } });
    expect(res.body.token).toMatch(/^cloud_sess_[0-9A-Za-z]{43}$/);
    const ttl = new Date(res.body.expires_at).getTime() - Date.now();
    expect(ttl).toBeGreaterThan(11.9 * 3_600_000);
    expect(ttl).toBeLessThanOrEqual(12 * 3_600_000);
    expect(res.headers.get('cache-control')).toBe('no-store');

    const account = await stack.http.get('/v1/account', { token: res.body.token });
    expect(account.body.credential).toMatchObject({ type: 'session', id: null, is_owner: false, scopes: ['account:read', 'services:read'] });

    expect((await stack.http.delete('/v1/sessions/current', { token: res.body.token })).status).toBe(204);
    const after = await stack.http.get('/v1/account', { token: res.body.token });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('invalid_api_key');
  });

  it('gives the same 401 for an unknown email and a wrong password', async () => {
    const user = await createUser(stack.db, stack.owner.accountId);
    const wrong = await stack.http.post('/v1/sessions', { body: { email: user.email, password: 'nope' } });
    const unknown = await stack.http.post('/v1/sessions', { body: { email: 'nobody@test.example', password: 'nope' } });
    for (const res of [wrong, unknown]) {
      expect(res.status).toBe(401);
      expect(res.body.error).toMatchObject({ type: 'authentication_error', code: 'invalid_credentials' });
    }
    expect(wrong.body.error.message).toBe(unknown.body.error.message);
  });

  it('rejects an expired session with session_expired', async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['account:read'] });
    const session = await createSession(stack.db, stack.owner.accountId, user.userId, 50);
    await sleep(100);
    const res = await stack.http.get('/v1/account', { token: session.token });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('session_expired');
  });

  it('validates the sign-in body', async () => {
    const res = await stack.http.post('/v1/sessions', { body: { email: 'a@b.c' } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'password' });
  });
});

describe('credentials', () => {
  it.each([
    ['no header', undefined, 'authentication_required'],
    ['a malformed header', 'Token abc', 'authentication_required'],
    ['an unknown key', 'Bearer cloud_live_doesnotexist000000000000000000000000', 'invalid_api_key'],
    ['an unknown token kind', 'Bearer hello', 'invalid_api_key'],
    ['a mail sending key', 'Bearer mg_live_abcdef', 'wrong_credential_type'],
    ['an image token', 'Bearer imgt_abcdef', 'wrong_credential_type'],
    ['a serverless kv token', 'Bearer kvt_abcdef', 'wrong_credential_type'],
    ['an S3 access key', 'Bearer AKIAIOSFODNN7EXAMPLE', 'wrong_credential_type'],
  ])('answers %s with 401 %s', async (_label, header, code) => {
    const res = await stack.http.get('/v1/services', { headers: header ? { authorization: header } : {} });
    expect(res.status).toBe(401);
    expect(res.body.error).toMatchObject({ type: 'authentication_error', code });
    expect(res.body.error.request_id).toBe(res.headers.get('x-request-id'));
  });

  it('names the data plane a data-plane token belongs to', async () => {
    const res = await stack.http.get('/v1/services', { token: 'fnt_abc' });
    expect(res.body.error.message).toMatch(/functions data plane/);
  });

  it('rejects an expired API key with api_key_expired', async () => {
    const key = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['services:read'], expiresAt: new Date(Date.now() - 1000) });
    const res = await stack.http.get('/v1/services', { token: key.token });
    expect(res.status).toBe(401);
    expect(res.body.error.code).toBe('api_key_expired');
  });

  it('refuses API keys on /v1/api-keys with 403 session_required', async () => {
    const res = await stack.http.get('/v1/api-keys', { token: stack.owner.key });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ type: 'authorization_error', code: 'session_required' });
  });
});

describe('API keys', () => {
  it('creates a key whose token is shown once and only its hash is stored', async () => {
    const res = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'ci deploy', scopes: ['services:read', 'vps:read'] },
    });
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({
      object: 'api_key',
      name: 'ci deploy',
      scopes: ['services:read', 'vps:read'],
      service_allowlist: [],
      revoked_at: null,
      expires_at: null,
    });
    expect(res.body.token).toMatch(/^cloud_live_[0-9A-Za-z]{32,}$/);
    expect(res.body.token.startsWith(res.body.token_prefix)).toBe(true);
    expect(res.body.token.endsWith(res.body.token_last4)).toBe(true);
    expect(res.headers.get('location')).toBe(`/v1/api-keys/${res.body.id}`);

    const stored = await stack
      .db('api_keys')
      .where({ id: Number(res.body.id.slice(4)) })
      .first();
    expect(stored.token_hash).toBe(sha256Hex(res.body.token));
    expect(JSON.stringify(stored)).not.toContain(res.body.token);

    const got = await stack.http.get(`/v1/api-keys/${res.body.id}`, { token: stack.owner.session });
    expect(got.body.token).toBeUndefined();
    const list = await stack.http.get('/v1/api-keys?limit=100', { token: stack.owner.session });
    expect(list.body.data.some((k: { id: string }) => k.id === res.body.id)).toBe(true);
    expect(list.text).not.toContain(res.body.token);

    const used = await stack.http.get('/v1/services', { token: res.body.token });
    expect(used.status).toBe(200);
    await sleep(100);
    const afterUse = await stack.http.get(`/v1/api-keys/${res.body.id.slice(4)}`, { token: stack.owner.session });
    expect(afterUse.body.last_used_at).not.toBeNull();
  });

  it('never replays a create by Idempotency-Key: a repeat makes another key', async () => {
    const headers = { 'idempotency-key': 'same-key-create' };
    const a = await stack.http.post('/v1/api-keys', { token: stack.owner.session, headers, body: { name: 'a', scopes: ['services:read'] } });
    const b = await stack.http.post('/v1/api-keys', { token: stack.owner.session, headers, body: { name: 'a', scopes: ['services:read'] } });
    expect(a.status).toBe(201);
    expect(b.status).toBe(201);
    expect(b.body.id).not.toBe(a.body.id);
    expect(b.headers.get('idempotent-replayed')).toBeNull();
  });

  it.each([
    [['*'], 'scopes.0'],
    [['services:read', 'apikeys:*'], 'scopes.1'],
    [['users:*'], 'scopes.0'],
    [['apikeys:read'], 'scopes.0'],
    [['vps:fly'], 'scopes.0'],
    [[], 'scopes'],
  ])('rejects scopes %j with 400 at %s', async (scopes, param) => {
    const res = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'x', scopes } });
    expect(res.status).toBe(400);
    expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
  });

  it('validates name length, expiry and allowlist', async () => {
    const long = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'x'.repeat(256), scopes: ['services:read'] } });
    expect(long.body.error).toMatchObject({ code: 'validation_failed', param: 'name' });
    const empty = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: '', scopes: ['services:read'] } });
    expect(empty.body.error.param).toBe('name');
    const past = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'x', scopes: ['services:read'], expires_at: '2001-01-01T00:00:00Z' },
    });
    expect(past.body.error).toMatchObject({ code: 'validation_failed', param: 'expires_at' });
    const farOffset = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'x', scopes: ['services:read'], expires_at: '2999-12-31T23:59:59-23:59' },
    });
    expect(farOffset.status).toBe(201);
    expect(farOffset.body.expires_at).toBe('3000-01-01T23:58:59.000Z');
    const yearTenThousand = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'x', scopes: ['services:read'], expires_at: '9999-12-31T23:59:59-23:59' },
    });
    expect(yearTenThousand.status).toBe(400);
    expect(yearTenThousand.body.error).toMatchObject({ code: 'validation_failed', param: 'expires_at' });
    const bad = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'x', scopes: ['services:read'], service_allowlist: ['svc_999999'] },
    });
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'service_allowlist.0' });
    const unknownField = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'x', scopes: ['services:read'], admin: true } });
    expect(unknownField.status).toBe(400);
  });

  it('does not let a user grant a scope they do not hold', async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['apikeys:write', 'services:read'] });
    const session = await createSession(stack.db, stack.owner.accountId, user.userId);
    const res = await stack.http.post('/v1/api-keys', { token: session.token, body: { name: 'x', scopes: ['vps:write'] } });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'vps:write' });
  });

  it('narrows scopes and allowlist but refuses to widen them (403)', async () => {
    const s1 = await createService(stack.db, stack.owner.accountId);
    const s2 = await createService(stack.db, stack.owner.accountId);
    const created = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'n', scopes: ['services:read', 'vps:read'] } });
    const id = created.body.id;
    const rename = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { name: 'renamed' } });
    expect(rename.body.name).toBe('renamed');
    const narrow = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { scopes: ['services:read'] } });
    expect(narrow.status).toBe(200);
    expect(narrow.body.scopes).toEqual(['services:read']);
    const widen = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { scopes: ['services:read', 'vps:read'] } });
    expect(widen.status).toBe(403);
    expect(widen.body.error.type).toBe('authorization_error');

    const restrict = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { service_allowlist: [s1.id, s2.id] } });
    expect(restrict.body.service_allowlist).toEqual([s1.id, s2.id]);
    const fewer = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { service_allowlist: [s1.id] } });
    expect(fewer.body.service_allowlist).toEqual([s1.id]);
    const back = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { service_allowlist: [s1.id, s2.id] } });
    expect(back.status).toBe(403);
    const lose = await stack.http.patch(`/v1/api-keys/${id}`, { token: stack.owner.session, body: { service_allowlist: [] } });
    expect(lose.status).toBe(403);
    expect((await stack.http.get(`/v1/api-keys/${id}`, { token: stack.owner.session })).body.service_allowlist).toEqual([s1.id]);
  });

  it('revokes a key irreversibly, effective within a second in another API process', async () => {
    const created = await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'r', scopes: ['services:read'] } });
    const token = created.body.token;
    expect((await stack.http.get('/v1/services', { token })).status).toBe(200);
    // A second resolver stands in for another API process with its own cache.
    const otherProcess = new (stack.api.deps.credentials.constructor as typeof import('../domain/credentials').CredentialResolver)(
      stack.db,
      stack.config.CREDENTIAL_CACHE_TTL,
    );
    await otherProcess.authenticate(`Bearer ${token}`);

    const revoked = await stack.http.post(`/v1/api-keys/${created.body.id}/revoke`, { token: stack.owner.session });
    expect(revoked.status).toBe(200);
    expect(revoked.body.revoked_at).not.toBeNull();
    const after = await stack.http.get('/v1/services', { token });
    expect(after.status).toBe(401);
    expect(after.body.error.code).toBe('api_key_revoked');

    await sleep(stack.config.CREDENTIAL_CACHE_TTL + 50);
    await expect(otherProcess.authenticate(`Bearer ${token}`)).rejects.toMatchObject({ code: 'api_key_revoked' });
    expect(stack.config.CREDENTIAL_CACHE_TTL).toBeLessThan(1000);

    const again = await stack.http.post(`/v1/api-keys/${created.body.id}/revoke`, { token: stack.owner.session });
    expect(again.body.revoked_at).toBe(revoked.body.revoked_at);
    const patch = await stack.http.patch(`/v1/api-keys/${created.body.id}`, { token: stack.owner.session, body: { name: 'back' } });
    expect(patch.status).toBe(409);
  });

  it("shows a non-owner only their own keys; another account's key is 404", async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['apikeys:read', 'apikeys:write', 'services:read'] });
    const session = await createSession(stack.db, stack.owner.accountId, user.userId);
    const mine = await stack.http.post('/v1/api-keys', { token: session.token, body: { name: 'mine', scopes: ['services:read'] } });
    const list = await stack.http.get('/v1/api-keys', { token: session.token });
    expect(list.body.data.map((k: { id: string }) => k.id)).toEqual([mine.body.id]);
    expect((await stack.http.get(`/v1/api-keys/${stack.owner.keyId}`, { token: session.token })).status).toBe(404);
    expect((await stack.http.get(`/v1/api-keys/${mine.body.id}`, { token: stack.owner.session })).status).toBe(200);

    const [other] = await stack.db('accounts').insert({ name: 'Other' }).returning('id');
    const otherOwner = await createUser(stack.db, other.id, { isOwner: true });
    const otherSession = await createSession(stack.db, other.id, otherOwner.userId);
    expect((await stack.http.get(`/v1/api-keys/${mine.body.id}`, { token: otherSession.token })).status).toBe(404);
    expect((await stack.http.post(`/v1/api-keys/${mine.body.id}/revoke`, { token: otherSession.token })).status).toBe(404);
  });
});

describe('effective authority', () => {
  it('is the key scopes ∩ the user permissions, and a lost user permission leaves the key at once', async () => {
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['services:read', 'account:read', 'apikeys:write'] });
    const session = await createSession(stack.db, stack.owner.accountId, user.userId);
    const created = await stack.http.post('/v1/api-keys', { token: session.token, body: { name: 'k', scopes: ['services:read', 'account:read'] } });
    const token = created.body.token;
    expect((await stack.http.get('/v1/services', { token })).status).toBe(200);

    await stack
      .db('users')
      .where({ id: user.userId })
      .update({ scopes: ['account:read', 'apikeys:write'] });
    await sleep(stack.config.CREDENTIAL_CACHE_TTL + 50);
    const denied = await stack.http.get('/v1/services', { token });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toMatchObject({ code: 'insufficient_scope', required_scope: 'services:read' });
    const account = await stack.http.get('/v1/account', { token });
    expect(account.body.credential.scopes).toEqual(['account:read']);
  });

  it('limits services to the key allowlist ∩ the user per-service permissions', async () => {
    const a = await createService(stack.db, stack.owner.accountId);
    const b = await createService(stack.db, stack.owner.accountId);
    const c = await createService(stack.db, stack.owner.accountId);
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['services:read'], serviceIds: [a.serviceId, b.serviceId] });
    const key = await createApiKey(stack.db, stack.owner.accountId, user.userId, { scopes: ['services:read'], allowlist: [b.serviceId, c.serviceId] });
    const list = await stack.http.get('/v1/services?limit=100', { token: key.token });
    expect(list.body.data.map((s: { id: string }) => s.id)).toEqual([b.id]);
    expect((await stack.http.get(`/v1/services/${b.id}`, { token: key.token })).status).toBe(200);
    expect((await stack.http.get(`/v1/services/${a.id}`, { token: key.token })).status).toBe(404);
    expect((await stack.http.get(`/v1/services/${c.id}`, { token: key.token })).status).toBe(404);
  });
});
