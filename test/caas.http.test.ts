import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CaasProvisioner } from '../domain/caas/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { auditRowOf, startStack, type Stack } from './helpers/stack';
import { createService } from './helpers/fixtures';
import { startDnsAnswers, type DnsAnswers } from './helpers/dns-answers';
import { sampleApp, startArchiveServer, type ArchiveServer } from './caas.support';
import { storedOperation, waitFor } from './orders.support';

/**
 * Container apps on the simulated backend (CAAS_BACKEND=simulator) and the Temporal dev server:
 * the 17 endpoints, the `caas.deploy` workflow's outcomes and what each leaves behind. The real
 * containers and router are test/caas.real.test.ts's.
 */
let stack: Stack;
let archives: ArchiveServer;
let dns: DnsAnswers;
let svc: { id: string; serviceId: number };

const api = {
  get: (p: string) => stack.http.get(p, { token: stack.owner.key }),
  post: (p: string, body?: unknown) => stack.http.post(p, { token: stack.owner.key, body }),
  put: (p: string, body?: unknown) => stack.http.request('PUT', p, { token: stack.owner.key, body }),
  del: (p: string) => stack.http.request('DELETE', p, { token: stack.owner.key }),
};

async function deploy(appPath: string) {
  const started = await api.post(`${appPath}/deploy`);
  expect(started.status, started.text).toBe(202);
  expect(started.body).toMatchObject({ type: 'caas.deploy', resource: { object: 'caas_app', id: appPath.split('/').pop() } });
  return waitFor(
    () => storedOperation(stack, started.body.id),
    (o) => o.status === 'succeeded' || o.status === 'failed',
    30_000,
  );
}

async function newApp(name: string, source = { type: 'archive', url: archives.url('v1') }) {
  const made = await api.post(`/v1/caas/${svc.id}/apps`, { name, source });
  expect(made.status, made.text).toBe(201);
  return `/v1/caas/${svc.id}/apps/${made.body.id}`;
}

beforeAll(async () => {
  dns = await startDnsAnswers();
  stack = await startStack({
    temporal: 'dev',
    env: { CAAS_BACKEND: 'simulator', SIM_DELAY_SCALE: '0', ALLOW_INSECURE_TARGETS: '1', DNS_RESOLVER: dns.address, OPERATION_CACHE_TTL: '100ms' },
  });
  archives = await startArchiveServer();
  await archives.put('v1', sampleApp('v1'));
  await archives.put('v2', sampleApp('v2'));
  await archives.put('nothing', { 'README.md': 'no app here' });
  await archives.put('exits', { 'package.json': JSON.stringify({ name: 'x', scripts: { start: 'node -e "process.exit(3)"; exit 3' } }) });
  svc = await createService(stack.db, stack.owner.accountId, { family: 'caas', product: 'caas-starter' });
  await new CaasProvisioner(stack.db, stack.api.deps.providers).provision((await provisionTargetOf(stack.db, svc.serviceId))!);
}, 120_000);

afterAll(async () => {
  await archives?.close();
  await dns?.close();
  await stack?.close();
});

describe('container services', () => {
  it('lists and reads the service: its ip, ingress_url, limits; live fields only on the single read', async () => {
    const one = await api.get(`/v1/caas/${svc.id}`);
    expect(one.status, one.text).toBe(200);
    expect(one.body).toMatchObject({
      object: 'caas',
      id: svc.id,
      ip: '127.0.0.1',
      provisioning_state: 'ready',
      limits: { apps: 3, databases: 2 },
      machine: { apps_running: 0 },
    });
    expect(one.body.ingress_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const list = await api.get('/v1/caas');
    const listed = list.body.data.find((s: { id: string }) => s.id === svc.id);
    expect(listed).toMatchObject({ provisioning_state: null, machine: null, ip: '127.0.0.1' });
  });
});

describe('apps', () => {
  it('creates apps idle, validates name and source, refuses a taken name and the fourth app', async () => {
    const bad = await api.post(`/v1/caas/${svc.id}/apps`, { name: 'Bad_Name', source: { type: 'archive', url: 'ftp://example.com/x.tar.gz' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error.errors.map((e: { param: string }) => e.param).sort()).toEqual(['name', 'source.url']);
    expect(
      (await api.post(`/v1/caas/${svc.id}/apps`, { name: 'ok', source: { type: 'archive', url: 'https://user:pw@example.com/a.tar.gz' } })).body.error.param,
    ).toBe('source.url');
    expect((await api.post(`/v1/caas/${svc.id}/apps`, { name: 'ok', source: { type: 'git', url: 'https://example.com/a.git' } })).body.error.param).toBe(
      'source.type',
    );
    const path = await newApp('first');
    const app = (await api.get(path)).body;
    expect(app).toMatchObject({
      object: 'caas_app',
      service_id: svc.id,
      name: 'first',
      status: 'idle',
      current_deployment_id: null,
      source: { type: 'archive', url: archives.url('v1') },
    });
    expect(app.default_host).toBe(`first-${svc.serviceId}.apps.localhost`);
    const taken = await api.post(`/v1/caas/${svc.id}/apps`, { name: 'first', source: { type: 'archive', url: archives.url('v1') } });
    expect(taken.status).toBe(409);
    expect(taken.body.error.code).toBe('already_exists');
    await newApp('second');
    await newApp('third');
    const fourth = await api.post(`/v1/caas/${svc.id}/apps`, { name: 'fourth', source: { type: 'archive', url: archives.url('v1') } });
    expect(fourth.status).toBe(429);
    expect(fourth.body.error.code).toBe('quota_exceeded');
    const list = await api.get(`/v1/caas/${svc.id}/apps`);
    expect(list.body.data.map((a: { name: string }) => a.name)).toEqual(['third', 'second', 'first']);
    expect(list.body.data.every((a: { source: unknown }) => a.source === null)).toBe(true);
    for (const name of ['second', 'third'])
      expect((await api.del(`/v1/caas/${svc.id}/apps/${list.body.data.find((a: { name: string }) => a.name === name).id}`)).status).toBe(204);
  });

  it('variables: the whole set replaced, names only back, values sealed and in no answer or audit row', async () => {
    const path = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data.find((a: { name: string }) => a.name === 'first');
    const env = `/v1/caas/${svc.id}/apps/${path.id}/env`;
    const bad = await api.put(env, {
      vars: [
        { name: 'PORT', value: '1' },
        { name: 'DATABASE_URL_X', value: 'x' },
        { name: 'CAAS_X', value: 'x' },
        { name: '1bad', value: 'x' },
        { name: 'OK', value: 5 },
      ],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.errors.map((e: { param: string }) => e.param)).toEqual(['vars.0.name', 'vars.1.name', 'vars.2.name', 'vars.3.name', 'vars.4.value']);
    expect(
      (
        await api.put(env, {
          vars: [
            { name: 'A', value: '1' },
            { name: 'A', value: '2' },
          ],
        })
      ).body.error.param,
    ).toBe('vars.1.name');
    const put = await api.put(env, {
      vars: [
        { name: 'GREETING', value: 'top-secret-value' },
        { name: 'OTHER', value: 'x' },
      ],
    });
    expect(put.status, put.text).toBe(200);
    expect(put.body.data).toEqual([
      { object: 'caas_env_var', name: 'GREETING' },
      { object: 'caas_env_var', name: 'OTHER' },
    ]);
    expect(put.text).not.toContain('top-secret-value');
    expect(JSON.stringify(await auditRowOf(stack, put))).not.toContain('top-secret-value');
    const stored = await stack.db('caas_env').where({ name: 'GREETING' }).first();
    expect(stored.value_sealed).not.toContain('top-secret-value');
    await api.put(env, { vars: [{ name: 'GREETING', value: 'hello' }] });
    expect((await api.get(env)).body.data).toEqual([{ object: 'caas_env_var', name: 'GREETING' }]);
  });

  it('deploys: the operation succeeds with the deployment, the app runs and is routed by its hosts; a second deploy supersedes the first', async () => {
    const app = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data.find((a: { name: string }) => a.name === 'first');
    const path = `/v1/caas/${svc.id}/apps/${app.id}`;
    const op = await deploy(path);
    expect(op.status, JSON.stringify(op)).toBe('succeeded');
    expect(op.result.deployment).toMatchObject({ object: 'caas_deployment', app_id: app.id, status: 'active' });
    expect(op.result.deployment.source_sha256).toMatch(/^[0-9a-f]{64}$/);
    const running = (await api.get(path)).body;
    expect(running).toMatchObject({ status: 'running', current_deployment_id: op.result.deployment.id });
    expect(await stack.db('sim_caas_routes').where({ app: app.id }).first()).toMatchObject({
      hosts: [app.default_host],
      deployment_id: op.result.deployment.id,
    });
    const second = await deploy(path);
    expect(second.status).toBe('succeeded');
    const history = (await api.get(`${path}/deployments`)).body.data;
    expect(history.map((d: { id: string; status: string }) => [d.id, d.status])).toEqual([
      [second.result.deployment.id, 'active'],
      [op.result.deployment.id, 'superseded'],
    ]);
    const logs = (await api.get(`${path}/logs?lines=1000`)).body.data;
    expect(logs.some((l: { source: string }) => l.source === 'build')).toBe(true);
    expect(logs.some((l: { source: string; message: string }) => l.source === 'platform' && l.message.includes('is serving'))).toBe(true);
    expect(logs.some((l: { source: string }) => l.source === 'app')).toBe(true);
    expect(JSON.stringify(logs)).not.toContain('hello');
    expect((await api.get(`${path}/logs?lines=2`)).body.data).toHaveLength(2);
    expect((await api.get(`${path}/logs?lines=0`)).status).toBe(400);
  });

  it('a failed build, a start that exits and an unavailable source end failed with their codes; the previous deployment serves on', async () => {
    const app = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data.find((a: { name: string }) => a.name === 'first');
    const path = `/v1/caas/${svc.id}/apps/${app.id}`;
    const serving = (await api.get(path)).body.current_deployment_id;
    const cases: Array<[string, string]> = [
      [archives.url('nothing'), 'build_failed'],
      [archives.url('exits'), 'start_failed'],
      [archives.url('missing'), 'source_unavailable'],
    ];
    for (const [url, code] of cases) {
      await stack
        .db('caas_apps')
        .where({ id: Number(app.id.slice(4)) })
        .update({ source: JSON.stringify({ type: 'archive', url }) });
      const op = await deploy(path);
      expect(op.status).toBe('failed');
      expect(op.error.code).toBe(code);
      expect(op.result.deployment).toMatchObject({ status: 'failed', error_code: code });
      expect((await api.get(path)).body).toMatchObject({ status: 'running', current_deployment_id: serving });
    }
    const logs = (await api.get(`${path}/logs?lines=1000`)).body.data.map((l: { message: string }) => l.message).join('\n');
    expect(logs).toContain('neither a Containerfile nor a package.json');
    expect(logs).toMatch(/exited/);
    await stack
      .db('caas_apps')
      .where({ id: Number(app.id.slice(4)) })
      .update({ source: JSON.stringify({ type: 'archive', url: archives.url('v2') }) });
  });

  it('a first deploy that fails leaves the app failed; one deployment at a time (409)', async () => {
    const path = await newApp('broken', { type: 'archive', url: archives.url('nothing') });
    const op = await deploy(path);
    expect(op.error.code).toBe('build_failed');
    expect((await api.get(path)).body).toMatchObject({ status: 'failed', current_deployment_id: null });
    const appId = Number(path.split('_').pop());
    await stack.db('caas_deployments').insert({ id: 'dep_01JHOLDINGTHEDEPLOYSLOT00', app_id: appId, service_id: svc.serviceId, status: 'building' });
    const busy = await api.post(`${path}/deploy`);
    expect(busy.status).toBe(409);
    expect(busy.body.error.code).toBe('conflict');
    expect((await api.post(`${path}/restart`)).status).toBe(409);
    await stack.db('caas_deployments').where({ id: 'dep_01JHOLDINGTHEDEPLOYSLOT00' }).delete();
    expect((await api.del(path)).status).toBe(204);
    expect((await api.get(path)).status).toBe(404);
  });

  it('restart: a new container with the current variables, 200 with the app once listening', async () => {
    const app = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data.find((a: { name: string }) => a.name === 'first');
    const res = await api.post(`/v1/caas/${svc.id}/apps/${app.id}/restart`);
    expect(res.status, res.text).toBe(200);
    expect(res.body).toMatchObject({ object: 'caas_app', status: 'running' });
    const env = await stack.db('sim_caas_deployments').where({ deployment_id: res.body.current_deployment_id }).first();
    expect(env.env).toEqual(expect.arrayContaining(['GREETING', 'PORT']));
  });
});

describe('domains', () => {
  it('must point at the service ip; one app per host; removing an absent one is fine; hostile names refused', async () => {
    const apps = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data;
    const first = apps.find((a: { name: string }) => a.name === 'first');
    const domains = `/v1/caas/${svc.id}/apps/${first.id}/domains`;
    const unpointed = await api.post(domains, { host: 'shop.example.test' });
    expect(unpointed.status).toBe(400);
    expect(unpointed.body.error).toMatchObject({ code: 'domain_not_pointed', param: 'host' });
    expect(await stack.db('caas_domains').where({ host: 'shop.example.test' })).toEqual([]);
    dns.set('elsewhere.example.test', '192.0.2.1');
    expect((await api.post(domains, { host: 'elsewhere.example.test' })).body.error.code).toBe('domain_not_pointed');
    dns.set('shop.example.test', '127.0.0.1');
    const added = await api.post(domains, { host: 'Shop.Example.Test' });
    expect(added.status, added.text).toBe(201);
    expect(added.body).toMatchObject({ object: 'caas_domain', host: 'shop.example.test', app_id: first.id, certificate_type: null });
    expect((await api.post(domains, { host: 'shop.example.test' })).status).toBe(200);
    expect((await stack.db('sim_caas_routes').where({ app: first.id }).first()).hosts).toEqual([first.default_host, 'shop.example.test']);
    const other = await newApp('other');
    expect((await api.post(`${other}/domains`, { host: 'shop.example.test' })).status).toBe(409);
    for (const host of [
      'localhost',
      'a',
      'x.localhost',
      'http://a.example',
      'a.example:80',
      '*.example.com',
      'a b.example',
      'a.example/x',
      'a.example\nb.example',
    ]) {
      const refused = await api.post(domains, { host });
      expect(refused.status, host).toBe(400);
      expect(refused.body.error).toMatchObject({ code: 'validation_failed', param: 'host' });
    }
    expect((await api.get(domains)).body.data.map((d: { host: string }) => d.host)).toEqual(['shop.example.test']);
    expect((await api.del(`${domains}/shop.example.test`)).status).toBe(204);
    expect((await api.del(`${domains}/shop.example.test`)).status).toBe(204);
    expect((await stack.db('sim_caas_routes').where({ app: first.id }).first()).hosts).toEqual([first.default_host]);
    expect((await api.del(other)).status).toBe(204);
  });
});

describe('databases', () => {
  it('creates a database and its user on the service’s server; the password is never returned; names and engines checked', async () => {
    const made = await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'postgresql', name: 'shop' });
    expect(made.status, made.text).toBe(201);
    expect(made.body).toEqual({ object: 'caas_database', name: 'shop', engine: 'postgresql', env_var: 'DATABASE_URL_SHOP', created_at: expect.any(String) });
    const row = await stack.db('caas_databases').where({ name: 'shop' }).first();
    expect(made.text).not.toContain(row.password_sealed);
    expect((await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'postgresql', name: 'shop' })).body.error.code).toBe('already_exists');
    expect((await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'oracle', name: 'x' })).body.error.param).toBe('engine');
    expect((await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'mysql', name: 'Bad-Name' })).body.error.param).toBe('name');
    expect((await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'postgresql', name: 'postgres' })).body.error.param).toBe('name');
    expect((await api.get(`/v1/caas/${svc.id}/databases`)).body.data).toEqual([made.body]);
    // Apps get it from their next restart.
    const app = (await api.get(`/v1/caas/${svc.id}/apps`)).body.data.find((a: { name: string }) => a.name === 'first');
    const restarted = await api.post(`/v1/caas/${svc.id}/apps/${app.id}/restart`);
    const env = await stack.db('sim_caas_deployments').where({ deployment_id: restarted.body.current_deployment_id }).first();
    expect(env.env).toEqual(expect.arrayContaining(['DATABASE_URL', 'DATABASE_URL_SHOP']));
  });
});
