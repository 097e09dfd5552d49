import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedOrders } from '../db/seeds/orders.seed';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder } from './orders.support';
import { createVps, waitFor } from './vps.support';

/**
 * Termination tears down what provisioning built: the worker's sweeper starts `teardown-svc_<n>`
 * for every terminated service, which deprovisions it through its family's provisioner, whether
 * billing terminated it on its own clock or the panel stand-in did.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ env: { SIM_BILLING_INTERVAL: '300ms' } });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

const deprovisioned = (serviceId: number) =>
  waitFor(
    () => stack.db('services').where({ id: serviceId }).first(),
    (row) => row.deprovisioned_at !== null,
  );

describe('service teardown', () => {
  it('destroys the machine of a terminated VPS and forgets it, in a workflow named by the service', async () => {
    const vps = await createVps(stack);
    expect(await stack.db('sim_hv_machines').where({ vmid: vps.vmid }).first()).toBeTruthy();
    expect((await stack.http.post(`/_dev/services/${vps.id}/terminate`)).status).toBe(200);
    const row = await deprovisioned(vps.serviceId);
    expect(row.deprovisioned_at).not.toBeNull();
    expect(await stack.db('sim_hv_machines').where({ vmid: vps.vmid }).first()).toBeUndefined();
    expect(await stack.db('vps_servers').where({ service_id: vps.serviceId }).first()).toBeUndefined();
    const handle = stack.temporal!.client.workflow.getHandle(`teardown-${vps.id}`);
    await handle.result();
    const run = await handle.describe();
    expect(run.type).toBe('serviceTeardownWorkflow');
    expect(run.status.name).toBe('COMPLETED');
    // The VPS reads as terminated, without a machine.
    const res = await stack.http.get(`/v1/vps/${vps.id}`, { token: stack.owner.key });
    expect(res.body).toMatchObject({ status: 'terminated', vmid: null, state: null });
  });

  it('tears down an ordered service that billing terminated after an immediate cancellation', async () => {
    const c = await newCustomer(stack, { credit: 100 });
    // A hosted site (the WordPress simulator, a simulated database instance).
    const order = await placeOrder(stack, c, { product: 'wordpress-starter', site_name: 'teardown-cancel.example.test' });
    expect(order.status, order.text).toBe(202);
    await stack.temporal!.client.workflow.getHandle(order.body.id).result();
    const orderId = order.body.resource.id as string;
    const serviceId = Number((await stack.http.get(`/v1/orders/${orderId}`, { token: c.token })).body.services[0].id.slice(4));
    expect(await stack.db('sim_wordpress_sites').where({ service_id: serviceId }).first()).toBeTruthy();
    const instance = (await stack.db('wordpress_sites').where({ service_id: serviceId }).first()).db_instance as string;
    expect((await stack.http.post(`/v1/orders/${orderId}/cancel`, { token: c.token, body: { type: 'immediate' } })).status).toBe(200);
    await deprovisioned(serviceId);
    expect((await stack.db('services').where({ id: serviceId }).first()).status).toBe('terminated');
    // The backend forgot the site, and its database instance is gone.
    expect(await stack.db('sim_wordpress_sites').where({ service_id: serviceId }).first()).toBeUndefined();
    expect(await stack.db('wordpress_sites').where({ service_id: serviceId }).first()).toBeUndefined();
    await expect(stack.api.deps.providers.dbaas.status(instance)).rejects.toThrow();
  });
});
