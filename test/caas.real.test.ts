import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CaasProvisioner } from '../domain/caas/provisioner';
import { provisionTargetOf } from '../domain/provisioning';
import { PodmanEngine } from '../providers/podman/engine';
import { createService } from './helpers/fixtures';
import { startStack, type Stack } from './helpers/stack';
import { sampleApp, startArchiveServer, type ArchiveServer } from './caas.support';
import { storedOperation, waitFor } from './orders.support';

/**
 * Container apps for real: podman builds and runs the apps, the service's HAProxy serves them by
 * Host, the worker runs `caas.deploy` on the Temporal dev server. A small Node app from an archive
 * on loopback; reached by Host; variables and restart; a failing build; a second deploy under load;
 * logs; deletion; a worker lost mid-deploy.
 */
let stack: Stack;
let archives: ArchiveServer;
let svc: { id: string; serviceId: number };
let ingress: string;
const dataDir = mkdtempSync(path.join(tmpdir(), 'caas-real-'));

const api = {
  get: (p: string) => stack.http.get(p, { token: stack.owner.key }),
  post: (p: string, body?: unknown) => stack.http.post(p, { token: stack.owner.key, body }),
  put: (p: string, body?: unknown) => stack.http.request('PUT', p, { token: stack.owner.key, body }),
  del: (p: string) => stack.http.request('DELETE', p, { token: stack.owner.key }),
};

/** A GET of the ingress with this Host (fetch cannot set Host: node:http can). */
function viaRouter(host: string): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = http.get(ingress, { headers: { host }, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let body: unknown = text;
        try {
          body = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('error', reject);
    req.setTimeout(10_000, () => req.destroy(new Error('timeout')));
  });
}
const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

async function operationOf(started: { status: number; text: string; body: { id: string } }) {
  expect(started.status, started.text).toBe(202);
  return waitFor(
    () => storedOperation(stack, started.body.id),
    (o) => o.status === 'succeeded' || o.status === 'failed',
    240_000,
    200,
  );
}

/**
 * The Debian minbase tar the base image is made from, kept between runs (test/podman.engine.real.test.ts
 * makes it): with it the base image takes seconds, without it mmdebstrap runs (30 s or more).
 */
const TAR_NAME = 'debian-minbase-bookworm.tar';
const TAR_CACHE = path.resolve(__dirname, '..', '.data', 'caas-test', TAR_NAME);

beforeAll(async () => {
  const base = path.join(dataDir, 'podman', 'base');
  if (existsSync(TAR_CACHE)) {
    mkdirSync(base, { recursive: true, mode: 0o700 });
    copyFileSync(TAR_CACHE, path.join(base, TAR_NAME));
  }
  stack = await startStack({
    temporal: 'dev',
    env: {
      CAAS_BACKEND: 'podman',
      DBAAS_BACKEND: 'instances',
      CAAS_DATA_DIR: dataDir,
      ALLOW_INSECURE_TARGETS: '1',
      CAAS_START_TIMEOUT: '20s',
      OPERATION_CACHE_TTL: '100ms',
    },
  });
  archives = await startArchiveServer();
  await archives.put('v1', sampleApp('v1'));
  await archives.put('v2', sampleApp('v2'));
  await archives.put('broken', { Containerfile: 'FROM localhost/caas-node:latest\nRUN echo "about to fail" && exit 7\n' });
  svc = await createService(stack.db, stack.owner.accountId, { family: 'caas', product: 'caas-starter' });
  await new CaasProvisioner(stack.db, stack.api.deps.providers).provision((await provisionTargetOf(stack.db, svc.serviceId))!);
  ingress = (await api.get(`/v1/caas/${svc.id}`)).body.ingress_url;
}, 600_000);

afterAll(async () => {
  agent.destroy();
  await stack?.api.deps.providers.caas.destroyService(svc.serviceId).catch(() => undefined);
  await archives?.close();
  await stack?.close();
  rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

describe('container apps on podman', () => {
  let app: { id: string; default_host: string };
  let appPath: string;

  it('deploys a Node app from an archive and serves it by Host; an unknown Host is 404', async () => {
    const made = await api.post(`/v1/caas/${svc.id}/apps`, { name: 'web', source: { type: 'archive', url: archives.url('v1') } });
    expect(made.status, made.text).toBe(201);
    app = made.body;
    appPath = `/v1/caas/${svc.id}/apps/${app.id}`;
    expect((await api.put(`${appPath}/env`, { vars: [{ name: 'GREETING', value: 'first' }] })).status).toBe(200);
    const op = await operationOf(await api.post(`${appPath}/deploy`));
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    const answer = await viaRouter(app.default_host);
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ version: 'v1', greeting: 'first' });
    expect((await viaRouter(`${app.default_host}:8080`)).body.version).toBe('v1');
    expect((await viaRouter('nobody.apps.localhost')).status).toBe(404);
    const live = (await api.get(`/v1/caas/${svc.id}`)).body;
    expect(live.machine.apps_running).toBe(1);
  }, 600_000);

  it('variables reach the app at its restart', async () => {
    expect((await api.put(`${appPath}/env`, { vars: [{ name: 'GREETING', value: 'second' }] })).status).toBe(200);
    expect((await viaRouter(app.default_host)).body.greeting).toBe('first');
    const restarted = await api.post(`${appPath}/restart`);
    expect(restarted.status, restarted.text).toBe(200);
    expect((await viaRouter(app.default_host)).body.greeting).toBe('second');
  }, 120_000);

  it('a failing build ends build_failed with its output in the logs; the running deployment serves on', async () => {
    await stack
      .db('caas_apps')
      .where({ id: Number(app.id.slice(4)) })
      .update({ source: JSON.stringify({ type: 'archive', url: archives.url('broken') }) });
    const op = await operationOf(await api.post(`${appPath}/deploy`));
    expect(op.status).toBe('failed');
    expect(op.error.code).toBe('build_failed');
    expect((await viaRouter(app.default_host)).body.version).toBe('v1');
    const logs = (await api.get(`${appPath}/logs?lines=1000`)).body.data;
    expect(logs.some((l: { source: string; message: string }) => l.source === 'build' && l.message.includes('about to fail'))).toBe(true);
    expect(logs.some((l: { source: string; message: string }) => l.source === 'app' && l.message.includes('listening on'))).toBe(true);
  }, 300_000);

  it('a second deploy with new content switches with no failed request', async () => {
    await stack
      .db('caas_apps')
      .where({ id: Number(app.id.slice(4)) })
      .update({ source: JSON.stringify({ type: 'archive', url: archives.url('v2') }) });
    let stop = false;
    const seen: string[] = [];
    const load = (async () => {
      while (!stop) {
        const answers = await Promise.all(Array.from({ length: 3 }, () => viaRouter(app.default_host).catch(() => ({ status: 0, body: null }))));
        for (const a of answers) seen.push(a.status === 200 ? a.body.version : `status ${a.status}`);
      }
    })();
    const op = await operationOf(await api.post(`${appPath}/deploy`));
    await new Promise((r) => setTimeout(r, 500));
    stop = true;
    await load;
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    expect(seen.filter((s) => s !== 'v1' && s !== 'v2')).toEqual([]);
    expect(seen.at(-1)).toBe('v2');
    const history = (await api.get(`${appPath}/deployments`)).body.data.map((d: { status: string }) => d.status);
    expect(history).toEqual(['active', 'failed', 'superseded']);
  }, 300_000);

  it('a worker lost in the middle of a deploy: the deploy still ends once, succeeded', async () => {
    const started = await api.post(`${appPath}/deploy`);
    expect(started.status).toBe(202);
    await waitFor(
      () => storedOperation(stack, started.body.id),
      (o) => o.status === 'running' && o.progress >= 10,
      60_000,
      50,
    );
    await stack.stopWorker();
    await new Promise((r) => setTimeout(r, 1_000));
    await stack.startWorker();
    const op = await operationOf(started);
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    const deployments = await stack.db('caas_deployments').where({ app_id: Number(app.id.slice(4)) });
    expect(deployments.filter((d) => d.status === 'active')).toHaveLength(1);
    expect(deployments.filter((d) => ['pending', 'building', 'starting'].includes(d.status))).toEqual([]);
    const engine = new PodmanEngine({ dataDir: path.join(dataDir, 'podman') });
    const running = (await engine.containers({ 'caas.app': app.id })).filter((c) => c.state === 'running');
    expect(running).toHaveLength(1);
    expect((await viaRouter(app.default_host)).status).toBe(200);
  }, 300_000);

  it('a database of the service: a real PostgreSQL database and user, its URL injected and reachable from the container', async () => {
    await archives.put('db', {
      'package.json': JSON.stringify({ name: 'db', scripts: { start: 'node server.js' } }),
      'server.js': `const http = require('node:http');
const net = require('node:net');
http.createServer((req, res) => {
  const url = new URL(process.env.DATABASE_URL);
  const socket = net.connect({ host: url.hostname, port: Number(url.port) });
  const answer = (state) => { socket.destroy(); res.end(JSON.stringify({ state, user: url.username, database: url.pathname, scheme: url.protocol, same: process.env.DATABASE_URL === process.env.DATABASE_URL_SHOP })); };
  socket.setTimeout(3000, () => answer('timeout'));
  socket.once('connect', () => answer('open'));
  socket.once('error', (e) => answer(e.code));
}).listen(Number(process.env.PORT));
`,
    });
    const made = await api.post(`/v1/caas/${svc.id}/databases`, { engine: 'postgresql', name: 'shop' });
    expect(made.status, made.text).toBe(201);
    expect(made.body.env_var).toBe('DATABASE_URL_SHOP');
    await stack
      .db('caas_apps')
      .where({ id: Number(app.id.slice(4)) })
      .update({ source: JSON.stringify({ type: 'archive', url: archives.url('db') }) });
    const op = await operationOf(await api.post(`${appPath}/deploy`));
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    const answer = await viaRouter(app.default_host);
    expect(answer.body).toMatchObject({ state: 'open', user: 'shop_app', database: '/shop', scheme: 'postgresql:', same: true });
  }, 300_000);

  it('deleting the app stops it: its host answers 404 and no container is left', async () => {
    expect((await api.del(appPath)).status).toBe(204);
    expect((await viaRouter(app.default_host)).status).toBe(404);
    const engine = new PodmanEngine({ dataDir: path.join(dataDir, 'podman') });
    expect(await engine.containers({ 'caas.app': app.id })).toEqual([]);
  }, 120_000);
});
