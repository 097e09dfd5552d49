import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';

/** Hardening of the request pipeline found by an audit: routing, audit attribution, input limits. */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
});
afterAll(() => stack?.close());

async function auditRow(res: { headers: Headers }) {
  await stack.api.deps.audit.flush();
  return stack.db('audit_logs').where({ request_id: res.headers.get('x-request-id') }).first();
}

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
});
