import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { sampleApp, startArchiveServer, type ArchiveServer } from './caas.support';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/**
 * Ordering a container service (`caas-starter`, simulated backend): the order builds its space
 * (router address, ingress); terminating the service removes its apps' containers and images from
 * the backend and its database servers.
 */
let stack: Stack;
let archives: ArchiveServer;
beforeAll(async () => {
  stack = await startStack({ temporal: 'dev', env: { SIM_DELAY_SCALE: '0', OPERATION_CACHE_TTL: '100ms', ALLOW_INSECURE_TARGETS: '1' } });
  await seedOrders(stack.db);
  archives = await startArchiveServer();
  await archives.put('v1', sampleApp('v1'));
}, 120_000);
afterAll(async () => {
  await archives?.close();
  await stack?.close();
});

const settled = (id: string) =>
  waitFor(
    () => storedOperation(stack, id),
    (o) => o.status === 'succeeded' || o.status === 'failed',
    30_000,
  );

describe('ordering a container service', () => {
  it('caas-starter builds the service ready to serve; terminating it removes its apps and database servers from the backend', async () => {
    const c = await newCustomer(stack);
    const order = await placeOrder(stack, c, { product: 'caas-starter', promo_code: 'WELCOME100' });
    expect(order.status, order.text).toBe(202);
    const op = await settled(order.body.id);
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    const id = op.result.service.id;
    const service = await stack.http.get(`/v1/caas/${id}`, { token: c.token });
    expect(service.status, service.text).toBe(200);
    expect(service.body).toMatchObject({ object: 'caas', id, provisioning_state: 'ready', ip: '127.0.0.1' });
    expect(service.body.ingress_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);

    const app = await stack.http.post(`/v1/caas/${id}/apps`, { token: c.token, body: { name: 'shop', source: { type: 'archive', url: archives.url('v1') } } });
    expect(app.status, app.text).toBe(201);
    const deploy = await stack.http.post(`/v1/caas/${id}/apps/${app.body.id}/deploy`, { token: c.token });
    expect((await settled(deploy.body.id)).status).toBe('succeeded');
    expect((await stack.http.post(`/v1/caas/${id}/databases`, { token: c.token, body: { engine: 'postgresql', name: 'shop' } })).status).toBe(201);
    const serviceId = Number(id.slice(4));
    expect(await stack.db('sim_caas_deployments').where({ service_id: serviceId })).toHaveLength(1);
    const instance = (await stack.db('caas_db_servers').where({ service_id: serviceId }).first()).instance;

    expect((await stack.http.post(`/_dev/services/${id}/terminate`, { body: {} })).status).toBe(200);
    await waitFor(
      () => stack.db('caas_db_servers').where({ service_id: serviceId }),
      (rows) => rows.length === 0,
      20_000,
      200,
    );
    expect(await stack.db('sim_caas_deployments').where({ service_id: serviceId })).toEqual([]);
    expect(await stack.db('sim_caas_routes').where({ service_id: serviceId })).toEqual([]);
    await expect(stack.api.deps.providers.dbaas.status(instance)).rejects.toThrow();
    expect(
      (await stack.http.post(`/v1/caas/${id}/apps`, { token: c.token, body: { name: 'more', source: { type: 'archive', url: archives.url('v1') } } })).status,
    ).toBe(409);
  });
});
