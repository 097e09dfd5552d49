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
 * - for every route with an {id}, an id the credential cannot see gets 404;
 * - every action of a product family on a suspended or terminated service gets 409 conflict.
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
  images: 'other',
  serverless: 'other',
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
  // Hundreds of requests of one key: the rate limits are not what this test is about.
  stack = await startStack({
    temporal: 'none',
    env: {
      RATE_LIMIT_DEFAULT_PER_KEY: '100000',
      RATE_LIMIT_DEFAULT_PER_ACCOUNT: '100000',
      RATE_LIMIT_MUTATIONS_PER_KEY: '100000',
      RATE_LIMIT_MUTATIONS_PER_ACCOUNT: '100000',
    },
  });
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

/**
 * Path values of a family route that name the seeded service `svc`: its `{id}`, or a resource the
 * service owns, found (made) from the service, such as the DNS `{zone}`. Every other parameter (a
 * record name, a backup id) gets a sample of the route's own schema: the service's status is refused
 * before such a thing is looked up. A route that names its service by a new key asks for it here.
 */
const SERVICE_KEYS: Record<string, (svc: { id: string; serviceId: number }) => Promise<string>> = {
  id: async (svc) => svc.id,
  // Object storage: a bucket and a key of the account's storage (made by FAMILY_SETUP below).
  bucket: async (svc) => {
    const name = `matrix-${svc.serviceId}`;
    await stack.db('objectstorage_buckets').insert({ name, service_id: svc.serviceId, created_at: new Date() });
    return name;
  },
  pattern: async (svc) => {
    await stack.db('images_origins').insert({ service_id: svc.serviceId, pattern: 'matrix.example.com' });
    return 'matrix.example.com';
  },
  key_id: async (svc) => {
    // A sending key when the service is a mail gateway, else an S3 key.
    if (await stack.db('mail_gateways').where({ service_id: svc.serviceId }).first()) {
      const [key] = await stack
        .db('mail_keys')
        .insert({ service_id: svc.serviceId, name: 'matrix', secret_hash: `matrix${svc.serviceId}` })
        .returning('id');
      return `mgk_${key.id}`;
    }
    const [row] = await stack
      .db('objectstorage_keys')
      .insert({ service_id: svc.serviceId, name: 'matrix', access_key_id: `AKIAMATRIX${svc.serviceId}` })
      .returning('id');
    return `s3k_${row.id}`;
  },
  domain: async (svc) => {
    const domain = `matrix-${svc.serviceId}.example`;
    await stack.db('mail_domains').insert({
      service_id: svc.serviceId,
      domain,
      dkim_selector: 'matrix',
      dkim_public: 'AAAA',
      dkim_private_sealed: stack.api.deps.keyring.encrypt('mail-dkim-private-key', 'matrix'),
      mail_from_host: `bounce.${domain}`,
    });
    return domain;
  },
  zone: async (svc) => {
    const zone = `matrix-${svc.serviceId}.example`;
    const made = await stack.http.post(`/_dev/dns/${svc.id}/zone`, { body: { zone } });
    expect(made.status, made.text).toBe(200);
    return zone;
  },
};

/**
 * What a family's service needs before its actions can be asked for. The account's object storage
 * (a per-account singleton: its paths name no service) is its newest service with a storage record.
 */
const SEGMENT_SETUP: Record<string, (svc: { id: string; serviceId: number }, route: AnyRoute) => Promise<void>> = {
  // A hosted site: a service of catalog family `wordpress` (Service family `other`) with a site's capabilities.
  wordpress: async (svc) => {
    const everything = Object.fromEntries(Object.keys(DEFAULT_CAPABILITIES.wordpress ?? {}).map((c) => [c, true]));
    await stack
      .db('services')
      .where({ id: svc.serviceId })
      .update({ product_family: 'wordpress', product: 'wordpress-starter', capabilities: JSON.stringify(everything) });
  },
  // The account's image tenant: a service of catalog family `images` with its tenant record.
  images: async (svc) => {
    await stack.db('services').where({ id: svc.serviceId }).update({ product_family: 'images' });
    await stack.db('images_tenants').insert({
      service_id: svc.serviceId,
      account_id: stack.owner.accountId,
      tenant: `matrix${svc.serviceId}`,
      plan: 'images-basic',
      api_endpoint: 'http://127.0.0.1:3100',
    });
    await stack
      .db('images_secrets')
      .insert({ service_id: svc.serviceId, secret_sealed: stack.api.deps.keyring.encrypt('images-signing-secret', 'imgs_matrix') });
  },
  // The account's tenant of the route's serverless primitive (`/v1/serverless/{primitive}/...`).
  serverless: async (svc, route) => {
    const primitive = route.path.split('/')[3];
    await stack
      .db('services')
      .where({ id: svc.serviceId })
      .update({ product_family: 'serverless', product: `serverless-${primitive}` });
    await stack.db('serverless_tenants').insert({
      service_id: svc.serviceId,
      account_id: stack.owner.accountId,
      primitive,
      handle: `matrix${svc.serviceId}`,
      plan: `serverless-${primitive}`,
      api_endpoint: `http://127.0.0.1:3300/${primitive}`,
    });
  },
};
const FAMILY_SETUP: Record<string, (svc: { id: string; serviceId: number }) => Promise<void>> = {
  mailgateway: async (svc) => {
    await stack
      .db('mail_gateways')
      .insert({ service_id: svc.serviceId, account_id: stack.owner.accountId, plan: 'mailgateway-10k', api_endpoint: 'http://127.0.0.1:3200' });
  },
  objectstorage: async (svc) => {
    await stack.db('objectstorage_services').insert({
      service_id: svc.serviceId,
      account_id: stack.owner.accountId,
      s3_endpoint: 'http://127.0.0.1:8333',
      region: 'us-east-1',
      bucket_prefix: `cus${stack.owner.accountId}-`,
    });
  },
};
const SINGLETON_SEGMENTS = new Set(['object-storage', 'images', 'mail-gateway', 'serverless']);

async function actionPath(route: AnyRoute, svc: { id: string; serviceId: number }): Promise<string> {
  const names = [...route.path.matchAll(/\{([a-z_]+)\}/g)].map((m) => m[1]);
  const segment = route.path.split('/')[2];
  await (SEGMENT_SETUP[segment] ?? FAMILY_SETUP[FAMILY_OF_SEGMENT[segment]])?.(svc, route);
  if (!SINGLETON_SEGMENTS.has(segment) && !names.some((name) => SERVICE_KEYS[name]))
    throw new Error(`${route.path} names no service this test knows: add its key to SERVICE_KEYS`);
  const sample = (route.params ? sampleOf(route.params) : {}) as Record<string, unknown>;
  let path = route.path;
  for (const name of names) {
    const value = SERVICE_KEYS[name] ? await SERVICE_KEYS[name](svc) : sample[name];
    if (value === undefined) throw new Error(`no value for {${name}} of ${route.path}: add one to this test`);
    path = path.replace(`{${name}}`, encodeURIComponent(String(value)));
  }
  return path;
}

describe('status matrix: every action on a suspended or terminated service answers 409 conflict', () => {
  // Every mutation of a product family's routes, whatever path parameter names the service (`{id}`,
  // a DNS `{zone}`, ...); reads stay available.
  // The recipe registry (`/v1/wordpress/recipes...`) is the account's, not a service's: no status applies.
  const actions = routes.filter(
    (r) => r.method !== 'get' && FAMILY_OF_SEGMENT[r.path.split('/')[2]] && r.path.split('/')[2] !== 'services' && !r.path.startsWith('/v1/wordpress/recipes'),
  );
  it('covers every family action, also those keyed by a resource of the service', () => {
    expect(actions.length).toBeGreaterThan(0);
    expect(actions.filter((r) => !r.path.includes('{id}')).map((r) => `${r.method} ${r.path}`)).toContain('put /v1/dns/zones/{zone}/records/{name}/{type}');
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
    const res = await stack.http.request(route.method.toUpperCase(), await actionPath(route, svc), {
      token: stack.owner.key,
      body: bodyFor(route),
      headers: route.idempotencyKey === 'required' ? { 'idempotency-key': newUlidId('idem') } : {},
    });
    expect(res.status, res.text).toBe(409);
    expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code: 'conflict' });
    expect(res.body.error.message).toContain(`this service is ${status}`);
  });
});
