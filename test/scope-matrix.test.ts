import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRouteTable } from '../api/routes';
import type { AnyRoute } from '../api/route';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../domain/scopes';
import { newUlidId } from '../common/ids';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createSession, createUser } from './helpers/fixtures';
import { sampleOf } from './helpers/sample';
import { DEFAULT_CAPABILITIES } from '../domain/capabilities';

/**
 * Generated from the route table, so every route present and future is covered:
 * - a credential without the route's scope gets 403 insufficient_scope naming that scope;
 * - for every route with an {id}, an id the credential cannot see gets 404.
 */
const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal);
const scoped = routes.filter((r) => r.scope !== null);
const withId = routes.filter((r) => r.path.includes('{id}') && r.credential !== 'none');

/** Which service family a route's {id} refers to, by its first path segment. */
const FAMILY_OF_SEGMENT: Record<string, string> = {
  vps: 'vps',
  dns: 'dns',
  dbaas: 'dbaas',
  caas: 'caas',
  'load-balancers': 'lb',
  'object-storage': 'objectstorage',
  'mail-gateway': 'mailgateway',
  wordpress: 'other',
  services: 'vps',
};

let stack: Stack;
let other: { accountId: number; keyId: number; operationId: string; services: Record<string, string> };
let hidden: Record<string, string>;

function fillPath(route: AnyRoute, id: string): string {
  return route.path.replace('{id}', encodeURIComponent(id)).replace(/\{[a-z_]+\}/g, 'placeholder');
}

function bodyFor(route: AnyRoute): unknown {
  if (!route.body) return undefined;
  return route.exampleBody !== undefined ? route.exampleBody : sampleOf(route.body);
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  const [acct] = await stack.db('accounts').insert({ name: 'Someone else' }).returning('id');
  const owner = await createUser(stack.db, acct.id, { isOwner: true });
  const key = await createApiKey(stack.db, acct.id, owner.userId, { scopes: ['services:read'] });
  const operationId = newUlidId('op');
  await stack.db('operations').insert({ id: operationId, account_id: acct.id, type: 'test.operation', status: 'succeeded' });
  const services: Record<string, string> = {};
  hidden = {};
  for (const family of new Set(Object.values(FAMILY_OF_SEGMENT))) {
    services[family] = (await createService(stack.db, acct.id, { family })).id;
    hidden[family] = (await createService(stack.db, stack.owner.accountId, { family })).id;
  }
  other = { accountId: acct.id, keyId: key.numericId, operationId, services };
});
afterAll(() => stack?.close());

describe('scope matrix: a credential without the scope gets 403 insufficient_scope', () => {
  it.each(scoped.map((r) => [`${r.method.toUpperCase()} ${r.path}`, r] as const))('%s', async (_name, route) => {
    const holds = ALL_SCOPES.filter((s) => s !== route.scope);
    let token: string;
    if (route.credential === 'session') {
      const user = await createUser(stack.db, stack.owner.accountId, { scopes: holds });
      token = (await createSession(stack.db, stack.owner.accountId, user.userId)).token;
    } else {
      token = (await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: holds.filter((s) => !SESSION_ONLY_SCOPES.includes(s)) }))
        .token;
    }
    const res = await stack.http.request(route.method.toUpperCase(), fillPath(route, hidden.vps), { token, body: bodyFor(route) });
    expect(res.status).toBe(403);
    expect(res.body.error).toMatchObject({ type: 'authorization_error', code: 'insufficient_scope', required_scope: route.scope });
  });
});

describe('visibility matrix: an {id} the credential cannot see gets 404', () => {
  it.each(withId.map((r) => [`${r.method.toUpperCase()} ${r.path}`, r] as const))('%s', async (_name, route) => {
    const segment = route.path.split('/')[2];
    const family = FAMILY_OF_SEGMENT[segment];
    const token = route.credential === 'session' ? stack.owner.session : stack.owner.key;
    const ids: string[] =
      segment === 'api-keys'
        ? [`key_${other.keyId}`]
        : segment === 'operations'
          ? [other.operationId]
          : family
            ? [other.services[family]]
            : [`${segment.slice(0, 3)}_999999`];
    for (const id of ids) {
      const res = await stack.http.request(route.method.toUpperCase(), fillPath(route, id), {
        token,
        body: bodyFor(route),
        headers: route.idempotencyKey === 'required' ? { 'idempotency-key': newUlidId('idem') } : {},
      });
      expect(res.status, `${id}: ${res.text}`).toBe(404);
      expect(res.body.error.code).toBe('not_found');
    }
    // The same account's service, hidden by the key's allowlist, looks missing as well.
    if (family) {
      const narrow = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, {
        scopes: ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s)),
        allowlist: [Number(hidden.other.slice(4))],
      });
      const target = family === 'other' ? hidden.vps : hidden[family];
      const res = await stack.http.request(route.method.toUpperCase(), fillPath(route, target), { token: narrow.token, body: bodyFor(route) });
      expect(res.status, res.text).toBe(404);
    }
  });
});

describe('status matrix: every action on a suspended or terminated service answers 409 conflict', () => {
  // Actions of the product families (their `{id}` is a service); reads stay available.
  const actions = routes.filter(
    (r) => r.method !== 'get' && r.path.includes('{id}') && FAMILY_OF_SEGMENT[r.path.split('/')[2]] && r.path.split('/')[2] !== 'services',
  );
  it('covers every family action', () => {
    expect(actions.length).toBeGreaterThan(0);
  });
  it("checks again in the operation's transaction (billing may suspend the service meanwhile)", async () => {
    const svc = await createService(stack.db, stack.owner.accountId, { family: 'vps', status: 'suspended' });
    const principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
    const start = stack.api.deps.operations.start({
      principal,
      type: 'vps.power',
      workflow: 'vpsPowerWorkflow',
      input: { serviceId: svc.serviceId, vmid: 1, action: 'start' },
      resource: { object: 'vps', id: svc.id },
      serviceId: svc.serviceId,
    });
    await expect(start).rejects.toMatchObject({ status: 409, code: 'conflict' });
    expect(await stack.db('operations').where({ service_id: svc.serviceId })).toEqual([]);
  });
  it.each(
    actions.flatMap((r) => (['suspended', 'terminated'] as const).map((status) => [`${status}: ${r.method.toUpperCase()} ${r.path}`, r, status] as const)),
  )('%s', async (_name, route, status) => {
    const family = FAMILY_OF_SEGMENT[route.path.split('/')[2]];
    const everything = Object.fromEntries(Object.keys(DEFAULT_CAPABILITIES[family] ?? {}).map((c) => [c, true]));
    const svc = await createService(stack.db, stack.owner.accountId, { family, status, capabilities: everything });
    const res = await stack.http.request(route.method.toUpperCase(), fillPath(route, svc.id), {
      token: stack.owner.key,
      body: bodyFor(route),
      headers: route.idempotencyKey === 'required' ? { 'idempotency-key': newUlidId('idem') } : {},
    });
    expect(res.status, res.text).toBe(409);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'conflict' });
    expect(res.body.error.message).toContain(`this service is ${status}`);
  });
});
