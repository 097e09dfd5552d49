import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { auditRowOf, startStack, type Stack } from './helpers/stack';
import { AuditWriter, type AuditEntry } from '../infra/audit';
import { createLogger } from '../common/logger';
import { createDb } from '../db/knex';
import { createApiKey, createSession, createUser } from './helpers/fixtures';

/** Hardening of the request pipeline found by an audit: routing, audit attribution, input limits. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
});
afterAll(() => stack?.close());

const auditRow = (res: { headers: Headers }) => auditRowOf(stack, res);

describe('routing and the audit log', () => {
  it('routes case-sensitively: /V1/... runs no handler, and the probe is still audited', async () => {
    for (const path of ['/V1/services', '/v1/Services', '/V1/account']) {
      const res = await stack.http.get(path, { token: stack.owner.key, checkContract: false });
      expect(res.status, path).toBe(404);
      expect(res.body.error.code, path).toBe('route_not_found');
      expect(await auditRow(res), path).toMatchObject({ path, status: 404, error_code: 'route_not_found', account_id: stack.owner.accountId });
    }
    const doubled = await stack.http.get('//v1/services', { token: stack.owner.key, checkContract: false });
    expect(doubled.status).toBe(404);
    expect(await auditRow(doubled)).toMatchObject({ status: 404 });
    const encoded = await stack.http.get('/%76%31/services', { token: stack.owner.key, checkContract: false });
    expect(encoded.status).toBe(404);
    expect(await auditRow(encoded)).toMatchObject({ status: 404 });
  });

  it('attributes malformed requests from a valid credential to its account', async () => {
    const cases = [
      await stack.http.post('/v1/api-keys', { token: stack.owner.session, rawBody: '{"name": ', headers: { 'content-type': 'application/json' } }),
      await stack.http.post('/v1/api-keys', { token: stack.owner.session, rawBody: 'name=x', headers: { 'content-type': 'text/plain' } }),
      await stack.http.post('/v1/api-keys', { token: stack.owner.session, body: { name: 'x'.repeat(1_100_000), scopes: [] } }),
      await stack.http.get('/v1/nowhere', { token: stack.owner.key }),
      await stack.http.delete('/v1/services', { token: stack.owner.key }),
    ];
    expect(cases.map((r) => r.status)).toEqual([400, 415, 413, 404, 405]);
    for (const res of cases) {
      expect(await auditRow(res), res.text).toMatchObject({ account_id: stack.owner.accountId, credential_id: expect.stringMatching(/^(ses|key)_/) });
    }
    // The owner sees them in the account's audit log.
    const log = await stack.http.get('/v1/audit-logs?status=415', { token: stack.owner.key });
    expect(log.body.data.map((e: { request_id: string }) => e.request_id)).toContain(cases[1].headers.get('x-request-id'));
    // An unknown credential stays unattributed.
    const stranger = await stack.http.post('/v1/api-keys', { token: 'cloud_live_unknown', rawBody: '{', headers: { 'content-type': 'application/json' } });
    expect(await auditRow(stranger)).toMatchObject({ status: 400, account_id: null, credential_id: null });
  });
});

describe('input limits', () => {
  it('answers deeply nested JSON with 400, never 500', async () => {
    for (const rawBody of ['['.repeat(100_000) + ']'.repeat(100_000), '{"a":'.repeat(50_000) + '1' + '}'.repeat(50_000)]) {
      for (const path of ['/v1/sessions', '/v1/webhooks']) {
        const res = await stack.http.post(path, {
          token: stack.owner.key,
          rawBody,
          headers: { 'content-type': 'application/json', 'idempotency-key': `deep-${Math.random()}` },
        });
        expect(res.status, res.text).toBe(400);
        expect(res.body.error).toMatchObject({ code: 'validation_failed', param: 'body' });
      }
    }
    // Brackets inside strings do not count; ordinary nesting is fine.
    const ok = await stack.http.post('/v1/sessions', { body: { email: '[[[[{{{{'.repeat(30), password: 'x' } });
    expect(ok.status).toBe(401);
  });
});

describe('the audit write queue', () => {
  /** A plain entry of the owner's account, as the API records a 200 to `GET /v1/services`. */
  const auditEntry = (requestId: string, fields: Partial<AuditEntry> = {}): AuditEntry => ({
    request_id: requestId,
    account_id: stack.owner.accountId,
    method: 'GET',
    path: '/v1/services',
    route: null,
    status: 200,
    error_code: null,
    scope_required: null,
    credential_id: null,
    ip: '127.0.0.1',
    via: 'api',
    duration_ms: 1,
    created_at: new Date(),
    ...fields,
  });

  it('is bounded while PostgreSQL does not answer, says what it drops, and writes the rest when it is back', async () => {
    const lines: string[] = [];
    const logger = createLogger('error', 'test', { write: (line: string) => void lines.push(line) });
    const down = createDb('postgres://cloud:cloud@127.0.0.1:1/nowhere', 1);
    const writer = new AuditWriter(down, logger, 10, 500, 5);
    for (let i = 0; i < 12; i++) writer.record(auditEntry(`req_bounded_${i}`, { route: '/v1/services' }));
    await writer.flush();
    expect(writer.droppedTotal).toBe(7);
    const reports = lines.map((l) => JSON.parse(l)).filter((l) => l.dropped !== undefined);
    expect(reports.reduce((n, l) => n + l.dropped, 0)).toBe(7);
    expect(reports.flatMap((l) => l.request_ids)).toEqual([5, 6, 7, 8, 9, 10, 11].map((i) => `req_bounded_${i}`));
    // The five it kept are written once the database answers again.
    (writer as unknown as { db: unknown }).db = stack.db;
    await writer.close();
    expect((await stack.db('audit_logs').where('request_id', 'like', 'req_bounded_%').orderBy('request_id')).map((r) => r.request_id)).toEqual(
      [0, 1, 2, 3, 4].map((i) => `req_bounded_${i}`),
    );
    await down.destroy();
  });

  it('at shutdown keeps trying while PostgreSQL does not answer, then says which entries it could not write', async () => {
    const lines: string[] = [];
    const logger = createLogger('error', 'test', { write: (line: string) => void lines.push(line) });
    const down = createDb('postgres://cloud:cloud@127.0.0.1:1/nowhere', 1);
    // Back within the window: written.
    const patient = new AuditWriter(down, logger, 10_000, 500, 50_000, 5_000);
    patient.record(auditEntry('req_shutdown_kept', { route: '/v1/services' }));
    const closing = patient.close();
    await new Promise((r) => setTimeout(r, 300));
    (patient as unknown as { db: unknown }).db = stack.db;
    await closing;
    expect(await stack.db('audit_logs').where({ request_id: 'req_shutdown_kept' })).toHaveLength(1);
    // Not back within it: given up, and said so with the request ids.
    const hopeless = new AuditWriter(down, logger, 10_000, 500, 50_000, 300);
    hopeless.record(auditEntry('req_shutdown_lost_0', { route: '/v1/services' }));
    hopeless.record(auditEntry('req_shutdown_lost_1', { route: '/v1/services' }));
    await hopeless.close();
    const lost = lines.map((l) => JSON.parse(l)).filter((l) => l.lost !== undefined);
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({ lost: 2, request_ids: ['req_shutdown_lost_0', 'req_shutdown_lost_1'] });
    expect(lost[0].msg).toMatch(/not written at shutdown/);
    await down.destroy();
  });

  it('leaves out an entry PostgreSQL refuses and writes the rest of its batch; later batches are not held up', async () => {
    const lines: string[] = [];
    const logger = createLogger('info', 'test', { write: (line: string) => void lines.push(line) });
    const writer = new AuditWriter(stack.db, logger, 10_000);
    writer.record(auditEntry('req_poison_a', { path: '/v1/a' }));
    writer.record(auditEntry('req_poison_b', { path: null as never })); // audit_logs.path is NOT NULL
    writer.record(auditEntry('req_poison_c', { path: '/v1/c' }));
    await writer.flush();
    writer.record(auditEntry('req_poison_d', { path: '/v1/d' }));
    await writer.close();
    const written = await stack.db('audit_logs').where('request_id', 'like', 'req_poison_%').orderBy('request_id');
    expect(written.map((r) => r.request_id)).toEqual(['req_poison_a', 'req_poison_c', 'req_poison_d']);
    expect(writer.refusedTotal).toBe(1);
    const refused = lines.map((l) => JSON.parse(l)).filter((l) => l.request_id === 'req_poison_b');
    expect(refused).toHaveLength(1);
    expect(refused[0].msg).toMatch(/refused by the database/);
  });

  it('writes a batch exactly as recorded: quotes, backslashes, control characters, non-ASCII text, nulls', async () => {
    const writer = new AuditWriter(stack.db, createLogger('silent', 'test'), 10_000);
    const odd = ['/v1/services/"quoted"\\back\\slash', '/v1/tab\there\nline\r\u0001', '/v1/café/日本/🚀/\u00ff', "/v1/it's%00%ZZ", '/v1/' + 'x'.repeat(4000)];
    const entries: AuditEntry[] = odd.map((path, i) => ({
      request_id: `req_exact_${i}`,
      account_id: i % 2 ? null : stack.owner.accountId,
      method: 'PATCH',
      path,
      route: i % 2 ? null : '/v1/services/{id}',
      status: 400 + i,
      error_code: i % 2 ? null : 'validation_failed',
      scope_required: i % 2 ? null : 'services:write',
      credential_id: i % 2 ? null : 'key_1',
      ip: i % 2 ? null : '2001:db8::1',
      via: 'mcp',
      duration_ms: 12_345 + i,
      created_at: new Date(Date.UTC(2026, 10, 24, 5, 6, 7, 89 + i)),
    }));
    for (const e of entries) writer.record(e);
    await writer.close();
    const rows = await stack.db('audit_logs').where('request_id', 'like', 'req_exact_%').orderBy('request_id');
    expect(rows.map(({ id: _id, ...row }) => ({ ...row, account_id: row.account_id === null ? null : Number(row.account_id) }))).toEqual(entries);
  });
});

describe('rate-limit tiers', () => {
  it('lets only the account owner set a tier above standard', async () => {
    const dev = await createUser(stack.db, stack.owner.accountId, { scopes: ['apikeys:write', 'services:read'] });
    const session = (await createSession(stack.db, stack.owner.accountId, dev.userId)).token;
    const refused = await stack.http.post('/v1/api-keys', { token: session, body: { name: 'fast', scopes: ['services:read'], rate_limit_tier: 'high' } });
    expect(refused.status, refused.text).toBe(403);
    expect(refused.body.error).toMatchObject({ type: 'authorization_error', code: 'owner_required' });
    const standard = await stack.http.post('/v1/api-keys', { token: session, body: { name: 'plain', scopes: ['services:read'], rate_limit_tier: 'standard' } });
    expect(standard.status).toBe(201);
    const owner = await stack.http.post('/v1/api-keys', {
      token: stack.owner.session,
      body: { name: 'fast', scopes: ['services:read'], rate_limit_tier: 'high' },
    });
    expect(owner.status).toBe(201);
    expect(owner.body.rate_limit_tier).toBe('high');
  });

  it("multiplies only the key's own budget: the account budget is the same for every key", async () => {
    const limited = await startStack({ temporal: 'none', env: { RATE_LIMIT_DEFAULT_PER_KEY: '4', RATE_LIMIT_DEFAULT_PER_ACCOUNT: '6' } });
    try {
      const high = await createApiKey(limited.db, limited.owner.accountId, limited.owner.userId, { scopes: ['services:read'], tier: 'high' });
      const statuses: number[] = [];
      for (let i = 0; i < 8; i++) statuses.push((await limited.http.get('/v1/services', { token: high.token })).status);
      // The high key may make more than 4 (its own budget is 40), but the account stops it at 6.
      expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 429, 429]);
      // A high-tier key made by someone other than the owner (before the rule existed) counts as standard.
      const [acct] = await limited.db('accounts').insert({ name: 'Legacy' }).returning('id');
      const dev = await createUser(limited.db, acct.id, { scopes: ['services:read'] });
      const legacy = await createApiKey(limited.db, acct.id, dev.userId, { scopes: ['services:read'], tier: 'high' });
      const seen: number[] = [];
      for (let i = 0; i < 5; i++) seen.push((await limited.http.get('/v1/services', { token: legacy.token })).status);
      expect(seen).toEqual([200, 200, 200, 200, 429]);
    } finally {
      await limited.close();
    }
  });
});

describe('password hashing', () => {
  it('uses scrypt at the OWASP minimum (N=2^17, r=8, p=1) and upgrades older hashes at sign-in', async () => {
    const { hashPassword, verifyPassword } = await import('../common/crypto');
    const fresh = await hashPassword('a long enough passphrase');
    expect(fresh.split('$').slice(0, 4)).toEqual(['scrypt', '131072', '8', '1']);
    expect(await verifyPassword('a long enough passphrase', fresh)).toBe(true);
    // A hash stored with the earlier parameters still verifies, and is replaced at the next sign-in.
    const { scryptSync, randomBytes } = await import('node:crypto');
    const salt = randomBytes(16);
    const key = scryptSync('old but valid password', salt, 32, { N: 32768, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
    const old = `scrypt$32768$8$1$${salt.toString('base64')}$${key.toString('base64')}`;
    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['services:read'] });
    await stack.db('users').where({ id: user.userId }).update({ password_hash: old });
    const res = await stack.http.post('/v1/sessions', { body: { email: user.email, password: 'old but valid password' } });
    expect(res.status, res.text).toBe(201);
    const stored = (await stack.db('users').where({ id: user.userId }).first()).password_hash as string;
    expect(stored.split('$').slice(0, 4)).toEqual(['scrypt', '131072', '8', '1']);
    expect(await verifyPassword('old but valid password', stored)).toBe(true);
  });
});
