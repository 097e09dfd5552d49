import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildRouteTable } from '../api/routes';
import type { AnyRoute } from '../api/route';
import { newUlidId } from '../common/ids';
import { seedOrders } from '../db/seeds/orders.seed';
import { emitEvent } from '../domain/events';
import { ALL_SCOPES, SESSION_ONLY_SCOPES } from '../domain/scopes';
import { eventBody } from '../domain/webhooks/webhooks';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createSession, createUser } from './helpers/fixtures';

/**
 * Narrowed credentials (docs/security.md "Narrowed credentials"), generated from the route table:
 * every GET route, called with a key limited by its allowlist and with the session of a user limited
 * by per-service permissions, never shows anything of the account's services they cannot see: not
 * the services themselves, their operations (an order's included), the orders that created them,
 * the bodies of their events in webhook deliveries, or concrete paths of requests about them in the
 * audit log. The same calls with the owner's session do show all of it, so the fixture is real.
 */
// Public routes (the OpenAPI document) carry no account data.
const routes = buildRouteTable({ devEndpoints: false }).filter((r) => !r.internal && r.method === 'get' && r.credential !== 'none');

/** The service family a route's `{id}` names, by the route's first path segment. */
const FAMILY_OF_SEGMENT: Record<string, string> = {
  services: 'vps',
  vps: 'vps',
  dns: 'dns',
  dbaas: 'dbaas',
  caas: 'caas',
  'load-balancers': 'lb',
  'object-storage': 'objectstorage',
  'mail-gateway': 'mailgateway',
  wordpress: 'other',
};

let stack: Stack;
let narrowKey: string;
let narrowSession: string;
let narrowUserKeyId: string;
const visible: Record<string, string> = {};
const fill: Record<string, string> = {};
/** Everything that must not reach a narrowed credential, with what it is. */
const markers: Array<{ what: string; pattern: RegExp }> = [];

/** The text around the first match, for a readable failure. */
function around(text: string, pattern: RegExp): string {
  const at = text.search(pattern);
  return at < 0 ? '' : `...${text.slice(Math.max(0, at - 120), at + 80)}...`;
}

function marker(what: string, value: string) {
  markers.push({ what, pattern: new RegExp(`${value.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(?![0-9A-Za-z])`) });
}

async function insertOperation(fields: { type: string; serviceId: number; resource: { object: string; id: string }; result: unknown }) {
  const id = newUlidId('op');
  await stack.db('operations').insert({
    id,
    account_id: stack.owner.accountId,
    type: fields.type,
    status: 'succeeded',
    progress: 100,
    resource_object: fields.resource.object,
    resource_id: fields.resource.id,
    service_id: fields.serviceId,
    result: JSON.stringify(fields.result),
    completed_at: new Date(),
  });
  return id;
}

/** An order that created `service`, with its operation (whose service is the order's, as the workflow records it). */
async function insertOrder(service: { serviceId: number; id: string }) {
  const product = await stack.db('products').where({ slug: 'vps-s' }).first();
  const operationId = newUlidId('op');
  const [order] = await stack
    .db('orders')
    .insert({
      account_id: stack.owner.accountId,
      operation_id: operationId,
      product_id: product.id,
      product: 'vps-s',
      billing_cycle: 'monthly',
      payment_method: 'card',
      currency: 'EUR',
      price: 1,
      status: 'active',
    })
    .returning('id');
  await stack.db('service_billing').insert({ service_id: service.serviceId, order_id: order.id, product_family: 'vps', recurring_amount: 1, currency: 'EUR' });
  const orderRef = `ord_${order.id}`;
  await insertOperation({
    type: 'orders.create',
    serviceId: service.serviceId,
    resource: { object: 'order', id: orderRef },
    result: { order: { id: orderRef }, service: { id: service.id } },
  });
  return { orderRef, operationId };
}

beforeAll(async () => {
  stack = await startStack({ temporal: 'none' });
  await seedOrders(stack.db);
  // Ids well away from the small ones of examples and fixtures, so a match is a real leak.
  await stack.db.raw(`select setval(pg_get_serial_sequence('services', 'id'), 7000), setval(pg_get_serial_sequence('orders', 'id'), 8000)`);
  const accountId = stack.owner.accountId;
  const hidden: Record<string, { serviceId: number; id: string }> = {};
  for (const family of new Set(Object.values(FAMILY_OF_SEGMENT))) {
    const shown = await createService(stack.db, accountId, { family });
    visible[family] = shown.id;
    const label = `hidden-${family}-label.example`;
    hidden[family] = await createService(stack.db, accountId, { family, label });
    marker(`the hidden ${family} service id`, hidden[family].id);
    marker(`the hidden ${family} service label`, label);
  }
  // Each dns service gets its zone (on the stack's DNS backend); routes name a zone, not a service.
  for (const [id, zone] of [
    [visible.dns, 'visible-zone.example'],
    [hidden.dns.id, 'hidden-dns-label.example'],
  ]) {
    const made = await stack.http.post(`/_dev/dns/${id}/zone`, { body: { zone } });
    expect(made.status, made.text).toBe(200);
  }
  // `name` is also a recipe's (none of that name: 404 to everyone), `version` one of its versions.
  Object.assign(fill, { zone: 'visible-zone.example', name: '@', type: 'NS', version: '1.0.0' });
  const visibleIds = Object.values(visible).map((id) => Number(id.slice(4)));
  const key = await createApiKey(stack.db, accountId, stack.owner.userId, {
    scopes: ALL_SCOPES.filter((s) => !SESSION_ONLY_SCOPES.includes(s)),
    allowlist: visibleIds,
  });
  narrowKey = key.token;
  const user = await createUser(stack.db, accountId, { scopes: [...ALL_SCOPES], serviceIds: visibleIds });
  narrowSession = (await createSession(stack.db, accountId, user.userId)).token;
  narrowUserKeyId = (await createApiKey(stack.db, accountId, user.userId, { scopes: ['services:read'] })).id;

  // Operations: one on the hidden VPS, and the order that created it with its operation.
  const hiddenVps = hidden.vps;
  marker(
    'an operation on the hidden VPS',
    await insertOperation({ type: 'vps.power', serviceId: hiddenVps.serviceId, resource: { object: 'vps', id: hiddenVps.id }, result: {} }),
  );
  const hiddenOrder = await insertOrder(hiddenVps);
  marker('the order of the hidden VPS', hiddenOrder.orderRef);
  marker('the operation of that order', hiddenOrder.operationId);
  const visibleVps = { serviceId: Number(visible.vps.slice(4)), id: visible.vps };
  const shownOrder = await insertOrder(visibleVps);
  fill.orders = shownOrder.orderRef;
  fill.operations = await insertOperation({ type: 'vps.power', serviceId: visibleVps.serviceId, resource: { object: 'vps', id: visible.vps }, result: {} });

  // A webhook with a delivery of an event about the hidden VPS, and one about the visible VPS.
  const [webhook] = await stack
    .db('webhooks')
    .insert({ account_id: accountId, url: 'https://hooks.example.com/x', events: ['*'], secret_sealed: 'sealed' })
    .returning('id');
  fill.webhooks = `whk_${webhook.id}`;
  // Object storage routes name a bucket of the account's one storage (none here: they answer 404 to everyone).
  fill.bucket = 'narrowed-no-such-bucket';
  // Container app routes name an app of the visible caas service.
  const [app] = await stack
    .db('caas_apps')
    .insert({ service_id: Number(visible.caas.slice(4)), name: 'visible', default_host: `visible-${visible.caas.slice(4)}.apps.localhost` })
    .returning('id');
  fill.app_id = `app_${app.id}`;
  // Hosted-site domain routes name a domain of the site (none here: the services are not built sites).
  fill.domain_id = 'dom_1';
  for (const [service, label] of [
    [hiddenVps, 'hidden'],
    [visibleVps, 'visible'],
  ] as const) {
    const event = await emitEvent(stack.db, {
      accountId,
      type: 'service.suspended',
      serviceId: service.serviceId,
      data: { object: 'service', id: service.id },
    });
    const id = newUlidId('dlv');
    await stack
      .db('webhook_deliveries')
      .insert({ id, webhook_id: webhook.id, account_id: accountId, event_id: event.id, event_type: event.type, body: eventBody(event) });
    if (label === 'hidden') fill.delivery_id = id;
  }

  // The owner's requests about the hidden VPS are in the audit log.
  await stack.http.get(`/v1/services/${hiddenVps.id}`, { token: stack.owner.session });
  await stack.http.get(`/v1/vps/${hiddenVps.id}/config`, { token: stack.owner.session });
  await stack.api.deps.audit.flush();
});
afterAll(() => stack?.close());

function pathOf(route: AnyRoute): string {
  const segment = route.path.split('/')[2];
  let path = route.path.replace('{id}', () => {
    const family = FAMILY_OF_SEGMENT[segment];
    if (family) return visible[family];
    if (segment === 'api-keys') return narrowUserKeyId;
    if (fill[segment]) return fill[segment];
    throw new Error(`no value for {id} of ${route.path}: add one to this test`);
  });
  path = path.replace(/\{([a-z_]+)\}/g, (_, name: string) => {
    if (fill[name]) return fill[name];
    throw new Error(`no value for {${name}} of ${route.path}: add one to this test`);
  });
  const query = route.query && 'limit' in route.query.shape ? '?limit=100' : '';
  return path + query;
}

function tokensFor(route: AnyRoute, narrow: boolean): string[] {
  if (!narrow) return [stack.owner.session];
  return route.credential === 'session' ? [narrowSession] : [narrowKey, narrowSession];
}

describe('narrowed credentials read nothing of services they cannot see', () => {
  it.each(routes.map((r) => [`GET ${r.path}`, r] as const))('%s', async (_name, route) => {
    for (const token of tokensFor(route, true)) {
      const res = await stack.http.get(pathOf(route), { token });
      expect(res.status, res.text).toBeLessThan(500);
      for (const { what, pattern } of markers) expect(pattern.test(res.text), `${what}: ${around(res.text, pattern)}`).toBe(false);
    }
  });

  it('the owner sees all of it through the same routes (the fixture is real)', async () => {
    let seen = '';
    for (const route of routes) for (const token of tokensFor(route, false)) seen += (await stack.http.get(pathOf(route), { token })).text;
    for (const { what, pattern } of markers) expect(pattern.test(seen), what).toBe(true);
  });

  it("redacts rather than hides where the record is the account's own: delivery bodies and audit paths", async () => {
    const deliveries = await stack.http.get(`/v1/webhooks/${fill.webhooks}/deliveries`, { token: narrowKey });
    expect(deliveries.body.data).toHaveLength(2);
    expect(deliveries.body.data.find((d: { id: string }) => d.id === fill.delivery_id).body).toBeNull();
    expect(deliveries.body.data.find((d: { id: string }) => d.id !== fill.delivery_id).body).toContain(visible.vps);
    const log = await stack.http.get('/v1/audit-logs?limit=100', { token: narrowKey });
    const owners = log.body.data.filter((e: { credential_id: string }) => e.credential_id?.startsWith('ses_'));
    expect(owners.map((e: { path: string }) => e.path)).toEqual(expect.arrayContaining(['/v1/services/:id', '/v1/vps/:id/config']));
  });
});
