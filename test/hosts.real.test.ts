import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMove } from '../domain/hosts/move';
import { balancersToRun } from '../domain/lb/store';
import { provisionTargetOf } from '../domain/provisioning';
import { LbProvisioner } from '../domain/lb/provisioner';
import { DbInstancesAdapter } from '../providers/dbinstances/dbinstances.adapter';
import { HaproxyLbProvider } from '../providers/haproxy/haproxy.adapter';
import { seedOrders } from '../db/seeds/orders.seed';
import { createService } from './helpers/fixtures';
import { connectClient } from './dbaas.instances.support';
import { startHostAgent, type HostAgentHandle } from './helpers/hosts';
import { startStack, type Stack } from './helpers/stack';
import { freePort } from './lb.contract';
import { eventually, get, startBackend, type Backend } from './lb.support';

/**
 * Two host agents on one machine (docs/hosts.md): the stack's worker is host `h1`, a second worker in
 * this process is `h2`, each with its own data directories and address ranges, one database and one
 * Temporal namespace between them. Real HAProxy balancers and PostgreSQL instances, placed on them.
 */
const execFileAsync = promisify(execFile);
const root = path.resolve(__dirname, '..');
const FAST = { HOST_HEARTBEAT_INTERVAL: '250ms', LB_KEEPER_INTERVAL: '500ms', DBAAS_KEEPER_INTERVAL: '500ms' };

let stack: Stack;
let h2: HostAgentHandle;
let backend: Backend;

beforeAll(async () => {
  stack = await startStack({ env: { LB_BACKEND: 'haproxy', DBAAS_BACKEND: 'instances', HOST_NAME: 'h1', TEARDOWN_SWEEP_INTERVAL: '200ms', ...FAST } });
  await seedOrders(stack.db);
  h2 = await startHostAgent(stack, 'h2', { HOST_HEARTBEAT_INTERVAL: 250, LB_KEEPER_INTERVAL: 500, DBAAS_KEEPER_INTERVAL: 500 });
  backend = await startBackend('behind-h2');
});
afterAll(async () => {
  await backend?.stop();
  await h2?.close();
  await stack?.close();
});

type HostsBody = { data: Array<{ name: string; status: string; families: string[]; resources: Array<{ object: string; id: string }> }> };
const hosts = async () => (await stack.http.get('/_dev/hosts')).body as HostsBody;
const hostOf = async (id: string) => (await hosts()).data.find((h) => h.resources.some((r) => r.id === id))?.name;
const statusOf = async (name: string) => (await hosts()).data.find((h) => h.name === name)?.status;

async function newBalancer(label: string): Promise<{ id: string; serviceId: number }> {
  const svc = await createService(stack.db, stack.owner.accountId, { family: 'lb', product: 'lb-s', label });
  // What the order's provisioning does, from the API's process (no host): placed, then built on its host.
  const target = (await provisionTargetOf(stack.db, svc.serviceId))!;
  await new LbProvisioner(stack.db, stack.api.deps.providers.lb, stack.api.deps.providers.hosts).provision(target);
  return svc;
}

async function newDatabase(product = 'dbaas-postgres-s'): Promise<{ id: string; serviceId: number }> {
  const svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product });
  const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
  expect(attached.status, attached.text).toBe(200);
  return svc;
}

const lbDir = (host: 'h1' | 'h2') =>
  new HaproxyLbProvider({ dataDir: host === 'h1' ? stack.config.LB_DATA_DIR : h2.config.LB_DATA_DIR, bindAddress: '127.0.0.1' });
const dbDir = (host: 'h1' | 'h2') => new DbInstancesAdapter({ rootDir: host === 'h1' ? stack.config.DBAAS_DATA_DIR! : h2.config.DBAAS_DATA_DIR! });

describe('two host agents on one machine', () => {
  let lbA: { id: string; serviceId: number };
  let lbB: { id: string; serviceId: number };
  let dbC: { id: string; serviceId: number };
  let dbD: { id: string; serviceId: number };

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

  for (const engine of ['postgresql', 'mysql'] as const) {
    it(`moving a ${engine} instance carries its databases, rows and users (same passwords) to the other host, at a new address`, async () => {
      const svc = engine === 'postgresql' ? dbD : await newDatabase('dbaas-mysql-s');
      const token = stack.owner.key;
      const base = `/v1/dbaas/${svc.id}`;
      const from = await hostOf(svc.id);
      const to = from === 'h1' ? 'h2' : 'h1';
      const admin = (await stack.http.post(`${base}/credentials`, { token })).body.password as string;
      const user = await stack.http.post(`${base}/users`, { token, body: { username: 'mover', password: 'Moved-pass-123456' } });
      expect(user.status, user.text).toBe(201);
      expect((await stack.http.post(`${base}/databases`, { token, body: { name: 'moved' } })).status).toBe(201);
      const before = (await stack.http.get(`${base}/connection`, { token })).body;
      const session = await connectClient(engine, { host: before.host, port: before.port, ca: before.ca_certificate }, 'admin', admin, 'moved');
      await session.query('create table t (n int)');
      await session.query('insert into t values (1), (2), (3)');
      await session.close();

      const started = await startMove({ db: stack.db, temporal: stack.api.deps.temporal, hosts: stack.api.deps.providers.hosts }, svc.serviceId, to);
      const result = await stack.temporal!.client.workflow.getHandle(started.workflowId).result();
      expect(result).toMatchObject({ from, to });
      expect(result.bytes).toBeGreaterThan(0);

      expect(await hostOf(svc.id)).toBe(to);
      const after = (await stack.http.get(`${base}/connection`, { token })).body;
      const range = (to === 'h1' ? stack.config.DBAAS_ADDRESS_RANGE : h2.config.DBAAS_ADDRESS_RANGE).split('.').slice(0, 3);
      expect(after.host.split('.').slice(0, 3)).toEqual(range);
      const moved = await connectClient(engine, { host: after.host, port: after.port, ca: after.ca_certificate }, 'admin', admin, 'moved');
      expect((await moved.query('select count(*) as n from t')).map((r) => Number((r as { n: unknown }).n))).toEqual([3]);
      await moved.close();
      // Only the customer's users and the admin: no account of the old host's came along.
      const users = (await stack.http.get(`${base}/users`, { token })).body.data.map((u: { username: string }) => u.username).sort();
      expect(users).toEqual(['admin', 'mover']);
      const mover = await connectClient(
        engine,
        { host: after.host, port: after.port, ca: after.ca_certificate },
        'mover',
        'Moved-pass-123456',
        engine === 'postgresql' ? 'postgres' : undefined,
      );
      await mover.close();
      // The old copy is gone from the old host; the API serves the instance where it is now.
      expect((await dbDir(from as 'h1' | 'h2').instanceNames()).some((n) => n.startsWith(`svc-${svc.serviceId}-`))).toBe(false);
      expect((await dbDir(to).instanceNames()).some((n) => n.startsWith(`svc-${svc.serviceId}-`))).toBe(true);
      expect((await stack.http.get(`${base}/databases`, { token })).body.data.map((d: { name: string }) => d.name)).toContain('moved');
      // Its backups came along (the PostgreSQL one was backed up while its host was down, above).
      if (engine === 'postgresql') expect((await stack.http.get(`${base}/backups`, { token })).body.data.length).toBeGreaterThan(0);
      // Calls about it are taken again; a second move is refused while none runs only for a bad target.
      await expect(startMove({ db: stack.db, temporal: stack.api.deps.temporal, hosts: stack.api.deps.providers.hosts }, svc.serviceId, to)).rejects.toThrow(
        /already/,
      );
      expect(Number((await stack.db('host_transfers').count('* as n').first())!.n)).toBe(0);
    });
  }

  it('npm run hosts lists the hosts, and evacuates one: drained, then everything on it moved, one at a time', async () => {
    const hostsCommand = (...args: string[]) =>
      execFileAsync(path.join(root, 'node_modules/.bin/tsx'), [path.join(root, 'scripts/hosts.ts'), ...args], {
        cwd: root,
        env: {
          ...process.env,
          DATABASE_URL: stack.database.url,
          TEMPORAL_ADDRESS: stack.temporal!.address,
          TEMPORAL_NAMESPACE: stack.config.TEMPORAL_NAMESPACE,
          TEMPORAL_TASK_QUEUE: stack.taskQueue,
          LOG_LEVEL: 'silent',
        },
        timeout: 120_000,
      });
    const listed = await hostsCommand();
    expect(listed.stdout).toMatch(/^h1 {2}up {2}serves /m);
    expect(listed.stdout).toMatch(/^h2 {2}up {2}serves /m);
    const onH2 = (await hosts()).data.find((h) => h.name === 'h2')!.resources;
    expect(onH2.length).toBeGreaterThan(0);

    const evacuated = await hostsCommand('evacuate', 'h2');
    expect(evacuated.stdout).toContain('h2 has nothing placed on it now');
    const after = (await hosts()).data;
    expect(after.find((h) => h.name === 'h2')).toMatchObject({ status: 'draining', resources: [] });
    for (const r of onH2) expect(after.find((h) => h.name === 'h1')!.resources).toContainEqual(r);
    expect(await lbDir('h2').balancerIds()).toEqual([]);
    expect(await dbDir('h2').instanceNames()).toEqual([]);
    await expect(hostsCommand('move', 'svc_1', 'nope')).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining('no host nope') });
  });
});
