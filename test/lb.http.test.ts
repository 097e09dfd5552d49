import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createService } from './helpers/fixtures';
import { LbProvisioner } from '../domain/lb/provisioner';
import { BalancerKeeper } from '../domain/lb/keeper';
import { reconcileBalancer } from '../domain/lb/reconcile';
import { lockBalancer } from '../domain/lb/store';
import { provisionTargetOf } from '../domain/provisioning';
import { freePort } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * The load-balancer endpoints over HTTP, on real HAProxy (the default LB_BACKEND) and, for the
 * shapes and the outage behaviour, on the simulator (LB_BACKEND=simulator).
 */

async function buildBalancer(stack: Stack, serviceId: number): Promise<void> {
  const target = (await provisionTargetOf(stack.db, serviceId))!;
  const provisioner = new LbProvisioner(stack.db, stack.api.deps.providers.lb, stack.api.deps.providers.hosts);
  await provisioner.provision(target);
  expect(await provisioner.isActive(target)).toBe(true);
}

const listener = (name: string, port: number, backends: Array<{ ip?: string; port: number; weight?: number }>, extra: Record<string, unknown> = {}) => ({
  name,
  protocol: 'http',
  port,
  health_check: { path: '/healthz', interval_seconds: 1 },
  backends: backends.map((b) => ({ ip: b.ip ?? '127.0.0.1', port: b.port, ...(b.weight !== undefined ? { weight: b.weight } : {}) })),
  ...extra,
});

async function outage(stack: Stack, down: boolean) {
  await stack.api.deps.providers.switchboard.setDown('lb', down);
  await new Promise((r) => setTimeout(r, 300));
}

describe('load balancers on HAProxy, over HTTP', () => {
  let stack: Stack;
  let token: string;
  let lbId: string;
  let serviceId: number;
  let address: string;
  let port: number;
  let one: Backend;
  let two: Backend;
  let v6: Backend;
  const path = () => `/v1/load-balancers/${lbId}`;

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none', env: { LB_BACKEND: 'haproxy' } });
    token = stack.owner.key;
    // Services of other families between the load balancers, for the list's short pages.
    await createService(stack.db, stack.owner.accountId, { family: 'vps' });
    const unbuilt = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label: 'lb-unbuilt' });
    await createService(stack.db, stack.owner.accountId, { family: 'vps' });
    await createService(stack.db, stack.owner.accountId, { family: 'dns' });
    ({ serviceId, id: lbId } = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label: 'lb-main' }));
    void unbuilt;
    await buildBalancer(stack, serviceId);
    address = (await stack.db('lb_balancers').where({ service_id: serviceId }).first()).address;
    port = await freePort(address);
    [one, two, v6] = [await startBackend('one'), await startBackend('two'), await startBackend('six', 0, '::1')];
  });
  afterAll(async () => {
    await Promise.all([one, two, v6].map((b) => b?.stop()));
    await stack?.close();
  });

  it('lists load balancers from the database with live fields null, in pages that may be short', async () => {
    const seen: any[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const res: any = await stack.http.get(`/v1/load-balancers?limit=2${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token });
      expect(res.status).toBe(200);
      expect(res.body.data.length).toBeLessThanOrEqual(2);
      seen.push(...res.body.data);
      cursor = res.body.next_cursor;
      pages++;
    } while (cursor);
    // Five services, two of them load balancers: three pages of two services read, two items returned.
    expect(pages).toBe(3);
    expect(seen.map((lb) => lb.name)).toEqual(['lb-main', 'lb-unbuilt']);
    for (const lb of seen) expect(lb).toMatchObject({ object: 'load_balancer', provisioning_state: null, healthy: null, listener_count: null });
    expect(seen[0].address).toBe(address);
    expect(seen[1].address).toBeNull();
    const first = await stack.http.get('/v1/load-balancers?limit=1', { token });
    expect(first.body).toMatchObject({ data: [{ name: 'lb-main' }], has_more: true });
  });

  it('reads one load balancer live; one not built yet is provisioning', async () => {
    const res = await stack.http.get(path(), { token });
    expect(res.body).toEqual({
      object: 'load_balancer',
      id: lbId,
      name: 'lb-main',
      address,
      provisioning_state: 'running',
      healthy: true,
      listener_count: 0,
      created_at: expect.any(String),
    });
    const list = await stack.http.get('/v1/load-balancers', { token });
    const unbuilt = list.body.data.find((lb: any) => lb.name === 'lb-unbuilt');
    const one = await stack.http.get(`/v1/load-balancers/${unbuilt.id}`, { token });
    expect(one.body).toMatchObject({ provisioning_state: 'provisioning', address: null, healthy: null, listener_count: null });
    const put = await stack.http.put(`/v1/load-balancers/${unbuilt.id}/listeners`, { token, body: { listeners: [] } });
    expect(put.status).toBe(409);
  });

  it('PUT listeners applies the set before answering: traffic reaches both backends in turn', async () => {
    const res = await stack.http.put(`${path()}/listeners`, { token, body: { listeners: [listener('web', port, [{ port: one.port }, { port: two.port }])] } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      object: 'list',
      has_more: false,
      next_cursor: null,
      data: [
        {
          object: 'lb_listener',
          name: 'web',
          protocol: 'http',
          port,
          algorithm: 'roundrobin',
          health_check: { path: '/healthz', interval_seconds: 1 },
          backends: [
            { ip: '127.0.0.1', port: one.port, weight: 1 },
            { ip: '127.0.0.1', port: two.port, weight: 1 },
          ],
        },
      ],
    });
    const answers = [await get(address, port), await get(address, port), await get(address, port), await get(address, port)];
    expect(answers.sort()).toEqual(['one', 'one', 'two', 'two']);
    expect((await stack.http.get(`${path()}/listeners`, { token })).body.data).toEqual(res.body.data);
    expect((await stack.http.get(path(), { token })).body).toMatchObject({ listener_count: 1, provisioning_state: 'running' });
  });

  it('refuses an invalid set with 400 validation_failed and the failing param, and changes nothing', async () => {
    const before = (await stack.http.get(`${path()}/listeners`, { token })).body.data;
    const squatter = net.createServer();
    const taken = await freePort(address);
    await new Promise<void>((resolve) => squatter.listen(taken, address, resolve));
    try {
      const web = listener('web', port, [{ port: one.port }, { port: two.port }]);
      const cases: Array<[unknown, string]> = [
        [[web, listener('api', port, [{ port: one.port }])], 'listeners.1.port'],
        [[web, listener('api', taken, [{ port: one.port }])], 'listeners.1.port'],
        [[web, listener('api', port + 1, [])], 'listeners.1.backends'],
        [[listener('web', port, [{ ip: '10.0.0.300', port: 80 }])], 'listeners.0.backends.0.ip'],
        [[listener('web', port, [{ port: 80 }], { protocol: 'tcp' })], 'listeners.0.health_check.path'],
        [[listener('Web', port, [{ port: 80 }])], 'listeners.0.name'],
        [Array.from({ length: 11 }, (_, i) => listener(`l${i}`, 20_000 + i, [{ port: 80 }])), 'listeners'],
      ];
      for (const [listeners, param] of cases) {
        const res = await stack.http.put(`${path()}/listeners`, { token, body: { listeners } });
        expect(res.status, res.text).toBe(400);
        expect(res.body.error).toMatchObject({ code: 'validation_failed', param });
        expect(await get(address, port)).toMatch(/^(one|two)$/);
      }
    } finally {
      squatter.close();
    }
    expect((await stack.http.get(`${path()}/listeners`, { token })).body.data).toEqual(before);
  });

  it('adds a backend (applied at once), lists backends flattened, and refuses a bad one', async () => {
    const three = await startBackend('three');
    try {
      const res = await stack.http.post(`${path()}/backends`, { token, body: { listener: 'web', ip: '127.0.0.1', port: three.port } });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({ object: 'lb_backend', listener: 'web', ip: '127.0.0.1', port: three.port, weight: 1 });
      const answers = new Set<string>();
      for (let i = 0; i < 6; i++) answers.add(await get(address, port));
      expect(answers).toEqual(new Set(['one', 'two', 'three']));
      const list = await stack.http.get(`${path()}/backends`, { token });
      expect(list.body.data).toHaveLength(3);
      expect(list.body.data.every((b: any) => b.object === 'lb_backend' && b.listener === 'web')).toBe(true);
      const page = await stack.http.get(`${path()}/backends?limit=2`, { token });
      const rest = await stack.http.get(`${path()}/backends?limit=2&cursor=${encodeURIComponent(page.body.next_cursor)}`, { token });
      expect([...page.body.data, ...rest.body.data]).toEqual(list.body.data);

      for (const [body, param] of [
        [{ listener: 'web', ip: '127.0.0.1', port: three.port }, 'ip'],
        [{ listener: 'nope', ip: '127.0.0.1', port: 9 }, 'listener'],
        [{ listener: 'web', ip: 'not-an-ip', port: 9 }, 'ip'],
        [{ listener: 'web', ip: '127.0.0.1', port: 70_000 }, 'port'],
      ] as const) {
        const bad = await stack.http.post(`${path()}/backends`, { token, body });
        expect(bad.status, bad.text).toBe(400);
        expect(bad.body.error).toMatchObject({ code: 'validation_failed', param });
      }
      expect((await stack.http.delete(`${path()}/backends/web/127.0.0.1/${three.port}`, { token })).status).toBe(204);
    } finally {
      await three.stop();
    }
  });

  it('deletes a backend named listener/ip/port (IPv6 percent-encoded); not the last one of a listener', async () => {
    const put = await stack.http.put(`${path()}/listeners`, {
      token,
      body: {
        listeners: [
          listener('web', port, [{ port: one.port }, { port: two.port }]),
          listener('six', await freePort(address), [{ ip: '0:0:0:0:0:0:0:1', port: v6.port }, { port: one.port }]),
        ],
      },
    });
    expect(put.status, put.text).toBe(200);
    const six = put.body.data.find((l: any) => l.name === 'six');
    expect(six.backends[0].ip).toBe('::1');
    expect(
      await eventually(
        () => get(address, six.port).catch(() => ''),
        (a) => a === 'six',
      ),
    ).toBe('six');

    const del = await stack.http.delete(`${path()}/backends/six/${encodeURIComponent('::1')}/${v6.port}`, { token });
    expect(del.status, del.text).toBe(204);
    const backends = (await stack.http.get(`${path()}/backends`, { token })).body.data.filter((b: any) => b.listener === 'six');
    expect(backends.map((b: any) => [b.ip, b.port])).toEqual([['127.0.0.1', one.port]]);
    expect(await get(address, six.port)).toBe('one');

    const last = await stack.http.delete(`${path()}/backends/six/127.0.0.1/${one.port}`, { token });
    expect(last.status).toBe(400);
    expect(last.body.error).toMatchObject({ code: 'validation_failed', param: 'listener' });
    expect(await get(address, six.port)).toBe('one');
    expect((await stack.http.delete(`${path()}/backends/six/127.0.0.2/${one.port}`, { token })).status).toBe(404);
    expect((await stack.http.delete(`${path()}/backends/nope/127.0.0.1/${one.port}`, { token })).status).toBe(404);
    const badIp = await stack.http.delete(`${path()}/backends/six/not-an-ip/80`, { token });
    expect(badIp.body.error).toMatchObject({ code: 'validation_failed', param: 'ip' });
    const badPort = await stack.http.delete(`${path()}/backends/six/127.0.0.1/http`, { token });
    expect(badPort.body.error).toMatchObject({ code: 'validation_failed', param: 'port' });
  });

  it('reports stats from the stats socket: counters and per-backend health; a silent backend goes down', async () => {
    await stack.http.put(`${path()}/listeners`, { token, body: { listeners: [listener('web', port, [{ port: one.port }, { port: two.port }])] } });
    await get(address, port);
    const up = await eventually(
      async () => (await stack.http.get(`${path()}/stats`, { token })).body,
      (s: any) => s.listeners[0].backends.every((b: any) => b.health === 'up'),
    );
    expect(up).toMatchObject({ object: 'lb_stats', listeners: [{ name: 'web', state: 'up' }] });
    expect(up.listeners[0].bytes_in).toBeGreaterThan(0);
    expect(up.listeners[0].bytes_out).toBeGreaterThan(0);
    expect(up.listeners[0].current_connections).toEqual(expect.any(Number));

    await two.stop();
    const down = await eventually(
      async () => (await stack.http.get(`${path()}/stats`, { token })).body,
      (s: any) => s.listeners[0].backends[1].health === 'down',
    );
    expect(down.listeners[0].backends).toEqual([
      { ip: '127.0.0.1', port: one.port, health: 'up' },
      { ip: '127.0.0.1', port: two.port, health: 'down' },
    ]);
    for (let i = 0; i < 4; i++) expect(await get(address, port)).toBe('one');
    two = await startBackend('two', two.port);
  });

  it('while the lb backend is down: stats are unknown with zero counters, GETs still answer, changes are 503 and store nothing', async () => {
    await outage(stack, true);
    try {
      const stats = await stack.http.get(`${path()}/stats`, { token });
      expect(stats.status).toBe(200);
      expect(stats.body.listeners).toEqual([
        {
          name: 'web',
          state: 'unknown',
          current_connections: 0,
          bytes_in: 0,
          bytes_out: 0,
          backends: [
            { ip: '127.0.0.1', port: one.port, health: 'unknown' },
            { ip: '127.0.0.1', port: two.port, health: 'unknown' },
          ],
        },
      ]);
      expect((await stack.http.get(path(), { token })).body).toMatchObject({ provisioning_state: null, healthy: null, listener_count: null, address });
      expect((await stack.http.get('/v1/load-balancers', { token })).status).toBe(200);
      const put = await stack.http.put(`${path()}/listeners`, { token, body: { listeners: [] } });
      expect(put.status).toBe(503);
      expect(put.body.error.code).toBe('backend_unavailable');
      expect((await stack.http.get(`${path()}/listeners`, { token })).body.data).toHaveLength(1);
    } finally {
      await outage(stack, false);
    }
    // The outage was the control plane's switch: the balancer itself kept serving.
    expect(await get(address, port)).toMatch(/^(one|two)$/);
  });

  it('a set the balancer took but the database lost goes back off the balancer; the keeper puts back one changed behind its back', async () => {
    const lb = stack.api.deps.providers.lb;
    const deps = { db: stack.db, lb, logger: stack.api.deps.logger };
    const stored = async () => (await stack.db('lb_balancers').where({ service_id: serviceId }).first()).listeners;
    const running = () => lb.listeners(serviceId);
    const bothBackends = async () => (await Promise.all([1, 2, 3, 4].map(() => get(address, port)))).sort();
    const before = await stored();
    expect(before[0].backends).toHaveLength(2);
    const onlyOne = [listener('web', port, [{ port: one.port }])];
    const onlyOneApplied = [{ ...before[0], backends: before[0].backends.slice(0, 1) }];

    // The connection is lost after HAProxy took the set and before the database kept it (the
    // update kills its own backend): the answer is 503, and the stored set goes back on the balancer.
    await stack.db.raw(
      `create function lose_lb_store() returns trigger language plpgsql as $$ begin perform pg_terminate_backend(pg_backend_pid()); return new; end $$`,
    );
    await stack.db.raw('create trigger lose_lb_store before update on lb_balancers for each row execute function lose_lb_store()');
    let lost;
    try {
      lost = await stack.http.put(`${path()}/listeners`, { token, body: { listeners: onlyOne } });
    } finally {
      await stack.db.raw('drop trigger lose_lb_store on lb_balancers; drop function lose_lb_store()');
    }
    expect(lost.status).toBe(503);
    expect(await stored()).toEqual(before);
    expect(await running()).toEqual(before);
    expect(await bothBackends()).toEqual(['one', 'one', 'two', 'two']);

    // A set changed behind the control plane's back (or left by a failure it could not undo, the
    // database being out) is put back by the keeper's next pass.
    await lb.apply(serviceId, onlyOneApplied);
    expect((await running())[0].backends).toHaveLength(1);
    await new BalancerKeeper({ ...deps, intervalMs: 60_000 }).pass();
    expect(await running()).toEqual(before);
    expect(await bothBackends()).toEqual(['one', 'one', 'two', 'two']);

    // A change in flight holds the row: its set is not undone under it.
    await stack.db.transaction(async (trx) => {
      await lockBalancer(trx, serviceId);
      await lb.apply(serviceId, onlyOneApplied);
      expect(await reconcileBalancer(deps, serviceId)).toBe('busy');
      expect((await running())[0].backends).toHaveLength(1);
    });
    expect(await reconcileBalancer(deps, serviceId)).toBe('reapplied');
    expect(await reconcileBalancer(deps, serviceId)).toBe('in step');
    expect(await running()).toEqual(before);

    // A stopped balancer whose files hold another set starts again with the stored one.
    await lb.stop(serviceId);
    await lb.apply(serviceId, onlyOneApplied);
    await new BalancerKeeper({ ...deps, intervalMs: 60_000 }).pass();
    expect(await lb.status(serviceId)).toMatchObject({ state: 'running' });
    expect(await running()).toEqual(before);
    expect(await bothBackends()).toEqual(['one', 'one', 'two', 'two']);
  });

  it('PUT [] cuts the traffic', async () => {
    const res = await stack.http.put(`${path()}/listeners`, { token, body: { listeners: [] } });
    expect(res.body).toMatchObject({ data: [], has_more: false });
    await expect(get(address, port, 1_000)).rejects.toThrow(/ECONNREFUSED/);
    expect((await stack.http.get(`${path()}/stats`, { token })).body).toEqual({ object: 'lb_stats', listeners: [] });
    expect((await stack.http.get(path(), { token })).body).toMatchObject({ listener_count: 0, healthy: true });
  });
});

describe('load balancers on the simulator (LB_BACKEND=simulator), over HTTP', () => {
  let stack: Stack;
  let lbId: string;

  beforeAll(async () => {
    stack = await startStack({ temporal: 'none', env: { LB_BACKEND: 'simulator', SIM_DELAY_SCALE: '0' } });
    const service = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label: 'lb-sim' });
    lbId = service.id;
    await buildBalancer(stack, service.serviceId);
  });
  afterAll(() => stack?.close());

  it('answers the same shapes and refusals without moving traffic', async () => {
    const token = stack.owner.key;
    const put = await stack.http.put(`/v1/load-balancers/${lbId}/listeners`, {
      token,
      body: {
        listeners: [
          listener('web', 80, [
            { ip: '10.0.0.1', port: 8080 },
            { ip: '2001:DB8::1', port: 8080, weight: 2 },
          ]),
        ],
      },
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.data[0].backends[1]).toEqual({ ip: '2001:db8::1', port: 8080, weight: 2 });
    const bad = await stack.http.put(`/v1/load-balancers/${lbId}/listeners`, { token, body: { listeners: [listener('web', 80, [])] } });
    expect(bad.body.error).toMatchObject({ code: 'validation_failed', param: 'listeners.0.backends' });
    expect((await stack.http.get(`/v1/load-balancers/${lbId}`, { token })).body).toMatchObject({
      provisioning_state: 'running',
      healthy: true,
      listener_count: 1,
    });
    const stats = await stack.http.get(`/v1/load-balancers/${lbId}/stats`, { token });
    expect(stats.body.listeners[0]).toMatchObject({ name: 'web', state: 'up', bytes_in: 0, backends: [{ health: 'up' }, { health: 'up' }] });
    expect((await stack.http.delete(`/v1/load-balancers/${lbId}/backends/web/${encodeURIComponent('2001:db8:0:0:0:0:0:1')}/8080`, { token })).status).toBe(204);
    const last = await stack.http.delete(`/v1/load-balancers/${lbId}/backends/web/10.0.0.1/8080`, { token });
    expect(last.body.error).toMatchObject({ code: 'validation_failed', param: 'listener' });

    await outage(stack, true);
    try {
      const unknown = await stack.http.get(`/v1/load-balancers/${lbId}/stats`, { token });
      expect(unknown.body.listeners[0]).toMatchObject({ state: 'unknown', bytes_in: 0, backends: [{ health: 'unknown' }] });
      expect((await stack.http.post(`/v1/load-balancers/${lbId}/backends`, { token, body: { listener: 'web', ip: '10.0.0.2', port: 80 } })).status).toBe(503);
    } finally {
      await outage(stack, false);
    }
    expect((await stack.http.get(`/v1/load-balancers/${lbId}/backends`, { token })).body.data).toHaveLength(1);
  });
});
