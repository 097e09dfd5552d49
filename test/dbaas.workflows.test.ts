import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { replayTests, type RecordedRun } from './helpers/replay';
import { startStack, type Stack } from './helpers/stack';
import { createService } from './helpers/fixtures';
import { waitForOperation } from './vps.support';

/**
 * The `dbaas.backup` workflow on the stack with DBAAS_BACKEND=simulator (dumps are tasks of the
 * shared task engine, so a fault can be armed): it resolves against the backup list, turns a dump
 * that does not finish into a failed operation (`upstream_error`, step `backup`), waits out an
 * outage, and its histories replay. The same routes on real instances: test/dbaas.http.*.test.ts.
 */
let stack: Stack;
let token: string;
let svc: { id: string; serviceId: number };
let instance: string;
const recorded: Record<string, string> = {};

beforeAll(async () => {
  // A dump takes a second (5 s at scale 1): long enough to switch the backend off while it runs.
  stack = await startStack({ env: { DBAAS_BACKEND: 'simulator', SIM_DELAY_SCALE: '0.2' } });
  token = stack.owner.key;
  svc = await createService(stack.db, stack.owner.accountId, { family: 'dbaas', product: 'dbaas-postgres-s' });
  const attached = await stack.http.post(`/_dev/dbaas/${svc.id}/instance`, { body: {} });
  expect(attached.status, attached.text).toBe(200);
  instance = attached.body.instance;
});
afterAll(() => stack?.close());

async function backup(): Promise<{ accepted: any; done: any }> {
  const accepted = await stack.http.post(`/v1/dbaas/${svc.id}/backups`, { token });
  expect(accepted.status, accepted.text).toBe(202);
  return { accepted: accepted.body, done: await waitForOperation(stack, accepted.body.id) };
}

describe('dbaas.backup', () => {
  it('succeeds once the backup is on the list as completed, with its id and size', async () => {
    const { accepted, done } = await backup();
    recorded.backup = accepted.id;
    expect(done).toMatchObject({ type: 'dbaas.backup', status: 'succeeded', progress: 100, error: null });
    expect(done.result.size_bytes).toBeGreaterThan(0);
    const list = await stack.http.get(`/v1/dbaas/${svc.id}/backups`, { token });
    expect(list.body.data[0]).toMatchObject({ id: done.result.backup_id, status: 'completed', size_bytes: done.result.size_bytes });
  });

  it('fails with upstream_error at step backup when the dump does not finish', async () => {
    await stack.api.deps.providers.faults!.failNext('dbaas', instance, { kind: 'backup', message: 'no space left on device (simulated)' });
    const { accepted, done } = await backup();
    recorded['backup-dump-failed'] = accepted.id;
    expect(done).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'backup' } });
    expect(done.error.message).toMatch(/did not complete/);
    expect(done.result.backup_id).toEqual(expect.any(String));
    const list = await stack.http.get(`/v1/dbaas/${svc.id}/backups`, { token });
    expect(list.body.data.find((b: any) => b.id === done.result.backup_id)).toMatchObject({ status: 'failed', size_bytes: null });
  });

  it('waits out an outage of the backend while the dump runs', async () => {
    const accepted = await stack.http.post(`/v1/dbaas/${svc.id}/backups`, { token });
    expect(accepted.status).toBe(202);
    await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: true } });
    await new Promise((r) => setTimeout(r, 1_000));
    const during = await stack.http.get(`/v1/operations/${accepted.body.id}`, { token });
    expect(during.body.status).toBe('running');
    await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: false } });
    const done = await waitForOperation(stack, accepted.body.id, 60_000);
    expect(done.status).toBe('succeeded');
  });

  it('is refused with 503 while the backend does not answer', async () => {
    await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: true } });
    await new Promise((r) => setTimeout(r, 300));
    try {
      const res = await stack.http.post(`/v1/dbaas/${svc.id}/backups`, { token });
      expect(res.status).toBe(503);
    } finally {
      await stack.http.post('/_dev/backends/dbaas/outage', { body: { down: false } });
      await new Promise((r) => setTimeout(r, 300));
    }
  });
});

describe('the routes on the simulator (DBAAS_BACKEND=simulator)', () => {
  it('serves databases, users, restart and stats the same way', async () => {
    const db = await stack.http.post(`/v1/dbaas/${svc.id}/databases`, { token, body: { name: 'shop' } });
    expect(db.status).toBe(201);
    expect(db.body).toEqual({ object: 'dbaas_database', name: 'shop', owner: 'admin', charset: null, collation: null });
    const user = await stack.http.post(`/v1/dbaas/${svc.id}/users`, { token, body: { username: 'app', password: 'app-password-123' } });
    expect(user.body).toEqual({ object: 'dbaas_user', id: 'app', username: 'app', host: null, is_admin: false });
    const restart = await stack.http.post(`/v1/dbaas/${svc.id}/restart`, { token });
    expect(restart.status).toBe(202);
    expect(restart.body.status).toBe('succeeded');
    const get = await stack.http.get(`/v1/dbaas/${svc.id}`, { token });
    expect(get.body).toMatchObject({ engine: 'postgresql', state: 'running', version: '15.18' });
    expect(get.body.host).toMatch(/^192\.0\.2\./);
    const stats = await stack.http.get(`/v1/dbaas/${svc.id}/stats`, { token });
    expect(stats.body.databases).toBe(1);
  });
});

describe('dbaas workflow histories', () => {
  const runs: Record<string, RecordedRun> = {};
  beforeAll(async () => {
    for (const [name, workflowId] of Object.entries(recorded)) {
      const handle = stack.temporal!.client.workflow.getHandle(workflowId);
      runs[name] = { workflowId, workflowType: (await handle.describe()).type, history: await handle.fetchHistory() };
    }
  });
  replayTests({
    fixtures: 'dbaas-histories',
    expected: ['backup', 'backup-dump-failed'],
    recorded: () => runs,
    tamper: { run: 'backup', activity: 'dbaasStartBackup' },
  });
});
