import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from './helpers/stack';
import { FIXTURE_PASSWORD, createUser } from './helpers/fixtures';
import { createVps, waitFor, waitForOperation } from './vps.support';

/**
 * Secrets never reach the logs: with every log line of the API and the worker captured at `trace`,
 * a sign-in password, session and API key tokens, a VPS root password, a SPICE console file and a
 * webhook secret appear in none of them (nor in the audit log).
 */
const lines: string[] = [];
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ env: { LOG_LEVEL: 'trace' }, logLines: lines });
});
afterAll(() => stack?.close());

describe('secrets in logs', () => {
  it('logs none of the secrets that pass through requests and workflows', async () => {
    const secrets: string[] = [FIXTURE_PASSWORD];
    // Subscribed first, so the operations below also drive webhook deliveries (and their logging).
    const webhook = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: 'http://127.0.0.1:9/hook', events: ['*'] } });
    expect(webhook.status, webhook.text).toBe(201);
    secrets.push(webhook.body.secret);

    const user = await createUser(stack.db, stack.owner.accountId, { scopes: ['apikeys:write', 'account:read'] });
    const session = await stack.http.post('/v1/sessions', { body: { email: user.email, password: FIXTURE_PASSWORD } });
    expect(session.status).toBe(201);
    secrets.push(session.body.token);
    const key = await stack.http.post('/v1/api-keys', { token: session.body.token, body: { name: 'k', scopes: ['account:read'] } });
    secrets.push(key.body.token);
    expect((await stack.http.get('/v1/account', { token: key.body.token })).status).toBe(200);

    const vps = await createVps(stack);
    const templates = await stack.http.get(`/v1/vps/${vps.id}/templates`, { token: stack.owner.key });
    const rootPassword = `Root-${randomUUID()}`;
    secrets.push(rootPassword);
    const reinstall = await stack.http.post(`/v1/vps/${vps.id}/reinstall`, {
      token: stack.owner.key,
      body: { template: templates.body.data[0].id, root_password: rootPassword },
    });
    expect(reinstall.status, reinstall.text).toBe(202);
    expect((await waitForOperation(stack, reinstall.body.id)).status).toBe('succeeded');

    const spice = await stack.http.post(`/v1/vps/${vps.id}/console`, { token: stack.owner.key, body: { type: 'spice' } });
    expect(spice.status, spice.text).toBe(201);
    const spicePassword = /password=(.+)/.exec(spice.body.file)?.[1];
    expect(spicePassword).toBeTruthy();
    secrets.push(spicePassword!);

    // A failing request at every level still leaks nothing.
    await stack.http.post('/v1/sessions', { body: { email: user.email, password: `${FIXTURE_PASSWORD}-wrong` } });
    secrets.push(`${FIXTURE_PASSWORD}-wrong`);

    // The reinstall's operation.completed reaches the (unreachable) webhook: an attempt is logged.
    await waitFor(
      async () => lines.some((l) => l.includes('webhook delivery attempt')),
      (seen) => seen,
      20_000,
    );
    await stack.api.deps.audit.flush();
    expect(lines.some((l) => l.includes('"msg":"request"'))).toBe(true); // the capture works
    const logged = lines.join('\n');
    const audit = JSON.stringify(await stack.db('audit_logs').select('*'));
    for (const secret of secrets) {
      expect(logged.includes(secret), `a secret reached the logs: ${secret.slice(0, 6)}...`).toBe(false);
      expect(audit.includes(secret)).toBe(false);
    }
  });
});
