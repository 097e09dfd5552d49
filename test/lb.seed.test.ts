import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedLb } from '../db/seeds/lb.seed';
import { findBalancer, recordBalancer } from '../domain/lb/store';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * The `npm start` seed of load balancers on real HAProxy: the demo listener fronts the demo web
 * servers of the run, never the API itself (a platform port, which a balancer may not reach).
 */
describe('the load-balancer seed', () => {
  let stack: Stack;
  let one: Backend;
  let two: Backend;
  const apiPort = () => Number(new URL(stack.url).port);

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none', env: { LB_BACKEND: 'haproxy' } });
    [one, two] = [await startBackend('demo one'), await startBackend('demo two')];
  });
  afterAll(async () => {
    await Promise.all([one, two].map((b) => b?.stop()));
    await stack?.close();
  });

  const demoBackends = () => [one, two].map((b) => ({ ip: '127.0.0.1', port: b.port, weight: 1 }));

  it('gives a new balancer a `web` listener on 8080 in front of the demo servers, and traffic reaches both', async () => {
    const { serviceId } = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s' });
    await seedLb(stack.db, stack.api.deps.providers, { apiPort: apiPort(), demoBackends: demoBackends() });
    const balancer = (await findBalancer(stack.db, serviceId))!;
    expect(balancer.listeners.map((l) => [l.name, l.port, l.backends.map((b) => b.port)])).toEqual([['web', 8080, [one.port, two.port]]]);
    const seen = await eventually(
      async () => {
        const bodies = new Set<string>();
        for (let i = 0; i < 6; i++) bodies.add(await get(balancer.address, 8080).catch(() => 'no answer'));
        return bodies;
      },
      (bodies) => bodies.has('demo one') && bodies.has('demo two'),
    );
    expect([...seen].sort()).toEqual(['demo one', 'demo two']);
  });

  it('turns an earlier seed`s `api` listener (in front of the API port) into the `web` demo, and keeps listeners the user made', async () => {
    const { serviceId } = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s' });
    const status = await stack.api.deps.providers.lb.create(serviceId, []);
    const own = {
      name: 'mine',
      protocol: 'tcp' as const,
      port: 9000,
      algorithm: 'roundrobin' as const,
      health_check: null,
      backends: [{ ip: '10.0.0.7', port: 5432, weight: 1 }],
    };
    const old = {
      name: 'api',
      protocol: 'http' as const,
      port: 8080,
      algorithm: 'roundrobin' as const,
      health_check: { path: '/healthz', interval_seconds: 5 },
      backends: [{ ip: '127.0.0.1', port: apiPort(), weight: 1 }],
    };
    await recordBalancer(stack.db, serviceId, status.address, [old, own]);
    await seedLb(stack.db, stack.api.deps.providers, { apiPort: apiPort(), demoBackends: demoBackends() });
    const balancer = (await findBalancer(stack.db, serviceId))!;
    expect(balancer.listeners.map((l) => [l.name, l.port, l.backends.map((b) => `${b.ip}:${b.port}`)])).toEqual([
      ['web', 8080, [`127.0.0.1:${one.port}`, `127.0.0.1:${two.port}`]],
      ['mine', 9000, ['10.0.0.7:5432']],
    ]);
    expect(await stack.api.deps.providers.lb.listeners(serviceId)).toEqual(balancer.listeners);
    const body = await eventually(
      () => get(balancer.address, 8080).catch(() => 'no answer'),
      (b) => b.startsWith('demo'),
    );
    expect(body).toMatch(/^demo (one|two)$/);
  });
  it('records the address the balancer runs on now, when another checkout`s run recorded another one', async () => {
    const { serviceId } = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s' });
    await seedLb(stack.db, stack.api.deps.providers, { apiPort: apiPort(), demoBackends: demoBackends() });
    const actual = (await findBalancer(stack.db, serviceId))!.address;
    // What a first checkout's run, in its own range, left in the shared database.
    await stack.db('lb_balancers').where({ service_id: serviceId }).update({ address: '127.77.0.99' });
    await seedLb(stack.db, stack.api.deps.providers, { apiPort: apiPort(), demoBackends: demoBackends() });
    expect((await findBalancer(stack.db, serviceId))!.address).toBe(actual);
    expect(await get(actual, 8080)).toMatch(/^demo (one|two)$/);
  });
});
