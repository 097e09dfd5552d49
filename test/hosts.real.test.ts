import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMove } from '../domain/hosts/move';
import { balancersToRun } from '../domain/lb/store';
import { startTwoHosts, type Svc, type TwoHosts } from './hosts.support';
import { freePort } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * Two host agents on one machine (test/hosts.support.ts): registration, placement, calls from the API
 * reaching the servers on their host, keepers, a host that stops, drain, and a balancer's move. The
 * database moves and the operator's command: test/hosts.moves.real.test.ts.
 */
let two: TwoHosts;
let backend: Backend;
let stack: TwoHosts['stack'];
let h2: TwoHosts['h2'];

beforeAll(async () => {
  two = await startTwoHosts();
  ({ stack, h2 } = two);
  backend = await startBackend('behind-h2');
});
afterAll(async () => {
  await backend?.stop();
  await two?.close();
});

const hosts = () => two.hosts();
const hostOf = (id: string) => two.hostOf(id);
const statusOf = (name: string) => two.statusOf(name);
const newBalancer = (label: string) => two.newBalancer(label);
const newDatabase = (product?: string) => two.newDatabase(product);
const lbDir = (host: 'h1' | 'h2') => two.lbDir(host);
const dbDir = (host: 'h1' | 'h2') => two.dbDir(host);

describe('two host agents on one machine', () => {
  let lbA: Svc;
  let lbB: Svc;
  let dbC: Svc;
  let dbD: Svc;

  it('both register and beat: GET /_dev/hosts lists them up, with the families they serve', async () => {
    const listed = await eventually(hosts, (b) => b.data.filter((h) => h.status === 'up').length === 2);
    expect(listed.data.map((h) => ({ name: h.name, status: h.status, families: [...h.families].sort() }))).toEqual([
      { name: 'h1', status: 'up', families: ['dbaas', 'lb'] },
      { name: 'h2', status: 'up', families: ['dbaas', 'lb'] },
    ]);
  });

  it('placement spreads the servers (least loaded, ties by name); each is built in its host’s directory and range', async () => {
    lbA = await newBalancer('lb-a');
    lbB = await newBalancer('lb-b');
    dbC = await newDatabase();
    dbD = await newDatabase();
    expect([await hostOf(lbA.id), await hostOf(lbB.id), await hostOf(dbC.id), await hostOf(dbD.id)]).toEqual(['h1', 'h2', 'h1', 'h2']);
    const listed = await hosts();
    expect(listed.data.find((h) => h.name === 'h2')!.resources).toEqual([
      { object: 'load_balancer', id: lbB.id },
      { object: 'dbaas', id: dbD.id },
    ]);
    expect(await lbDir('h1').balancerIds()).toEqual([lbA.serviceId]);
    expect(await lbDir('h2').balancerIds()).toEqual([lbB.serviceId]);
    expect((await dbDir('h1').instanceNames()).map((n) => n.split('-')[1])).toEqual([String(dbC.serviceId)]);
    expect((await dbDir('h2').instanceNames()).map((n) => n.split('-')[1])).toEqual([String(dbD.serviceId)]);
    // Addresses from each host's own ranges.
    const b = await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key });
    expect(b.body.address.split('.').slice(0, 3)).toEqual(h2.config.LB_BIND_ADDRESS.split('.').slice(0, 3));
    const d = await stack.http.get(`/v1/dbaas/${dbD.id}`, { token: stack.owner.key });
    expect(d.body).toMatchObject({ state: 'running' });
    expect(d.body.host.split('.').slice(0, 3)).toEqual(h2.config.DBAAS_ADDRESS_RANGE.split('.').slice(0, 3));
  });

  it('synchronous calls from the API reach the server on its host: a listener PUT carries traffic, a database is created', async () => {
    const b = await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key });
    const port = await freePort(b.body.address);
    const put = await stack.http.put(`/v1/load-balancers/${lbB.id}/listeners`, {
      token: stack.owner.key,
      body: { listeners: [{ name: 'web', protocol: 'http', port, backends: [{ ip: '127.0.0.1', port: backend.port }] }] },
    });
    expect(put.status, put.text).toBe(200);
    expect(await get(b.body.address, port)).toBe('behind-h2');
    // A refusal on the host comes back as the same error: a port clash names the field.
    const clash = await stack.http.put(`/v1/load-balancers/${lbB.id}/listeners`, {
      token: stack.owner.key,
      body: {
        listeners: [
          { name: 'a', protocol: 'tcp', port, backends: [{ ip: '127.0.0.1', port: backend.port }] },
          { name: 'b', protocol: 'tcp', port, backends: [{ ip: '127.0.0.1', port: backend.port }] },
        ],
      },
    });
    expect(clash.status).toBe(400);
    expect(clash.body.error).toMatchObject({ code: 'validation_failed', param: 'listeners.1.port' });

    const created = await stack.http.post(`/v1/dbaas/${dbD.id}/databases`, { token: stack.owner.key, body: { name: 'on_h2' } });
    expect(created.status, created.text).toBe(201);
    const list = await stack.http.get(`/v1/dbaas/${dbD.id}/databases`, { token: stack.owner.key });
    expect(list.body.data.map((x: { name: string }) => x.name)).toContain('on_h2');
    // Each call was a short workflow on h2's queue, named by host, call and service.
    const runs = stack.temporal!.client.workflow.list({ query: `WorkflowId STARTS_WITH "host-call-h2-dbaas.createDatabase-svc_${dbD.serviceId}-"` });
    const ids: string[] = [];
    for await (const run of runs) ids.push(run.workflowId);
    expect(ids.length).toBe(1);
  });

  it('each keeper keeps only its own host’s balancers', async () => {
    expect((await balancersToRun(stack.db, 'h1')).map((r) => r.service_id)).toEqual([lbA.serviceId]);
    expect((await balancersToRun(stack.db, 'h2')).map((r) => r.service_id)).toEqual([lbB.serviceId]);
    // h2's balancer crashes: h2's keeper brings it back.
    const address = (await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key })).body.address;
    const port = (await stack.http.get(`/v1/load-balancers/${lbB.id}/listeners`, { token: stack.owner.key })).body.data[0].port;
    await lbDir('h2').stop(lbB.serviceId);
    await expect(get(address, port, 1_000)).rejects.toThrow();
    expect(
      await eventually(
        () => get(address, port, 1_000).catch(() => 'down'),
        (body) => body === 'behind-h2',
      ),
    ).toBe('behind-h2');
    // With h2 gone, h1's keeper leaves h2's crashed balancer alone (nothing of it appears on h1).
    await h2.stop();
    await lbDir('h2').stop(lbB.serviceId);
    await new Promise((r) => setTimeout(r, 1_500));
    await expect(get(address, port, 1_000)).rejects.toThrow();
    expect(await lbDir('h1').balancerIds()).toEqual([lbA.serviceId]);
    await h2.start();
    expect(
      await eventually(
        () => get(address, port, 1_000).catch(() => 'down'),
        (body) => body === 'behind-h2',
      ),
    ).toBe('behind-h2');
  });

  it('while a host is down its resources’ live fields are null, calls to it answer 503 at once, and an operation waits and then completes', async () => {
    await h2.stop();
    expect(
      await eventually(
        () => statusOf('h2'),
        (s) => s === 'down',
      ),
    ).toBe('down');
    const b = await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key });
    expect(b.status).toBe(200);
    expect(b.body.healthy).toBeNull();
    const started = Date.now();
    const put = await stack.http.put(`/v1/load-balancers/${lbB.id}/listeners`, { token: stack.owner.key, body: { listeners: [] } });
    expect(put.status).toBe(503);
    expect(put.body.error.code).toBe('backend_unavailable');
    expect(Date.now() - started).toBeLessThan(2_000);
    // Nothing changed: the stored set is still the one h2 runs.
    expect((await stack.http.get(`/v1/load-balancers/${lbB.id}/listeners`, { token: stack.owner.key })).body.data).toHaveLength(1);

    const backup = await stack.http.post(`/v1/dbaas/${dbD.id}/backups`, { token: stack.owner.key });
    expect(backup.status, backup.text).toBe(202);
    const waiting = await eventually(
      async () => (await stack.http.get(`/v1/operations/${backup.body.id}`, { token: stack.owner.key })).body,
      (op) => op.result?.waiting !== undefined,
    );
    expect(waiting.status).toBe('running');
    expect(waiting.result.waiting).toMatchObject({ reason: 'host_down', host: 'h2' });
    expect(waiting.result.waiting.message).toMatch(/host h2, which has not answered since .*; this operation continues when it is back/);

    await h2.start();
    const done = await eventually(
      async () => (await stack.http.get(`/v1/operations/${backup.body.id}`, { token: stack.owner.key })).body,
      (op) => op.status === 'succeeded' || op.status === 'failed',
      30_000,
    );
    expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
    expect(done.result.waiting).toBeUndefined();
    expect(done.result.size_bytes).toBeGreaterThan(0);
  });

  it('a drained host gets no new placements, and comes back into play when undrained', async () => {
    const drained = await stack.http.post('/_dev/hosts/h1/drain');
    expect(drained.status).toBe(200);
    expect(drained.body).toMatchObject({ object: 'host', name: 'h1', status: 'draining' });
    // h1 holds fewer than h2 would after this one, yet the new balancer goes to h2.
    const e = await newBalancer('lb-e');
    expect(await hostOf(e.id)).toBe('h2');
    // What h1 has stays served.
    expect((await stack.http.get(`/v1/load-balancers/${lbA.id}`, { token: stack.owner.key })).body.healthy).not.toBeNull();
    const undrained = await stack.http.post('/_dev/hosts/h1/undrain');
    expect(undrained.body.status).toBe('up');
    const f = await newBalancer('lb-f');
    expect(await hostOf(f.id)).toBe('h1');
    expect((await stack.http.post('/_dev/hosts/nope/drain')).status).toBe(404);
  });

  it('moving a balancer builds it on the other host from its stored set, moves its placement and address, and destroys the old copy', async () => {
    const before = (await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key })).body;
    const port = (await stack.http.get(`/v1/load-balancers/${lbB.id}/listeners`, { token: stack.owner.key })).body.data[0].port;
    const moves = { db: stack.db, temporal: stack.api.deps.temporal, hosts: stack.api.deps.providers.hosts };
    const started = await startMove(moves, lbB.serviceId, 'h1');
    expect(started).toEqual({ workflowId: `move-svc_${lbB.serviceId}`, family: 'lb', from: 'h2' });
    const result = await stack.temporal!.client.workflow.getHandle(started.workflowId).result();
    expect(result).toMatchObject({ from: 'h2', to: 'h1' });

    expect(await hostOf(lbB.id)).toBe('h1');
    const after = (await stack.http.get(`/v1/load-balancers/${lbB.id}`, { token: stack.owner.key })).body;
    expect(after.address).toBe(result.address);
    expect(after.address.split('.').slice(0, 3)).toEqual(stack.config.LB_BIND_ADDRESS.split('.').slice(0, 3));
    expect((await stack.http.get(`/v1/services/${lbB.id}`, { token: stack.owner.key })).body.primary_ip).toBe(after.address);
    expect(await get(after.address, port)).toBe('behind-h2');
    await expect(get(before.address, port, 1_000)).rejects.toThrow();
    expect(await lbDir('h2').balancerIds()).not.toContain(lbB.serviceId);
    expect(await lbDir('h1').balancerIds()).toContain(lbB.serviceId);

    // Refusals say why: a host that does not exist, the host it is on.
    await expect(startMove(moves, lbB.serviceId, 'nope')).rejects.toThrow(/no host nope/);
    await expect(startMove(moves, lbB.serviceId, 'h1')).rejects.toThrow(/on h1 already/);
  });
});
