import { replayTests, type RecordedRun } from './helpers/replay';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { startStack, type Stack } from './helpers/stack';
import { createAccount, createApiKey, createUser } from './helpers/fixtures';
import { createVps, failNextTask, historyText, recordedProgress, setVpsBackend, simulator, waitForOperation, type TestVps } from './vps.support';

/**
 * The four VPS workflows on the real stack: each resolves against the machine's real state, each
 * turns a hypervisor failure into a failed operation (`upstream_error` with the step), and the
 * reinstall keeps its root password out of every record.
 */
let stack: Stack;
let token: string;

/** Operations whose histories the replay tests at the end check against the current workflow code. */
const recorded: Record<string, string> = {};

const QEMU_DEBIAN = 'local:import/debian-12-genericcloud-amd64.qcow2';
const QEMU_UBUNTU = 'local:import/ubuntu-24.04-server-cloudimg-amd64.qcow2';

beforeAll(async () => {
  stack = await startStack();
  token = stack.owner.key;
});
afterAll(() => stack?.close());

const power = (vps: TestVps, action: string, headers: Record<string, string> = {}) =>
  stack.http.post(`/v1/vps/${vps.id}/power`, { token, body: { action }, headers });
const reinstall = (vps: TestVps, body: Record<string, unknown>) => stack.http.post(`/v1/vps/${vps.id}/reinstall`, { token, body });
const liveState = async (vps: TestVps) => (await stack.http.get(`/v1/vps/${vps.id}`, { token })).body.state;
const completedEvents = async (opId: string) =>
  (await stack.db('events').where({ account_id: stack.owner.accountId, type: 'operation.completed' })).filter((e) => e.data.id === opId);

async function backupOf(vps: TestVps): Promise<string> {
  const res = await stack.http.post(`/v1/vps/${vps.id}/backups`, { token, body: {} });
  expect(res.status, res.text).toBe(202);
  const op = await waitForOperation(stack, res.body.id);
  expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
  return op.result.backup_id;
}

describe('vps.power', () => {
  it('answers 202 when the order is issued and succeeds when the machine has stopped, then started', async () => {
    const vps = await createVps(stack);
    const res = await power(vps, 'stop');
    expect(res.status, res.text).toBe(202);
    expect(res.body).toMatchObject({ object: 'operation', type: 'vps.power', status: 'running', resource: { object: 'vps', id: vps.id } });
    expect(res.headers.get('location')).toBe(`/v1/operations/${res.body.id}`);
    // The workflow id is the operation id.
    expect((await stack.temporal!.client.workflow.getHandle(res.body.id).describe()).type).toBe('vpsPowerWorkflow');
    const stopped = await waitForOperation(stack, res.body.id);
    expect(stopped).toMatchObject({ status: 'succeeded', progress: 100, result: { action: 'stop', state: 'stopped' } });
    expect(await liveState(vps)).toBe('stopped');
    // Resolved on the reached state, not on the order: it completed after the stop task ended.
    const task = await stack
      .db('sim_tasks')
      .where({ request_key: `${res.body.id}:stop` })
      .first();
    expect(new Date(task.ends_at).getTime() - new Date(task.starts_at).getTime()).toBeGreaterThan(0);
    expect(new Date(stopped.completed_at).getTime()).toBeGreaterThanOrEqual(new Date(task.ends_at).getTime());

    const started = await waitForOperation(stack, (await power(vps, 'start')).body.id);
    expect(started).toMatchObject({ status: 'succeeded', result: { action: 'start', state: 'running' } });
    expect(await liveState(vps)).toBe('running');
    expect(await completedEvents(res.body.id)).toHaveLength(1);
  });

  it('reboots by stopping, waiting for the stop, and starting; it ends running', async () => {
    const vps = await createVps(stack);
    const res = await power(vps, 'reboot');
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', result: { action: 'reboot', state: 'running' } });
    recorded['power-reboot'] = op.id;
    const tasks = await stack
      .db('sim_tasks')
      .where({ backend: 'vps', subject: String(vps.vmid) })
      .orderBy('starts_at');
    expect(tasks.map((t) => [t.kind, t.status])).toEqual([
      ['stop', 'ok'],
      ['start', 'ok'],
    ]);
    // The start was ordered only after the stop had ended.
    expect(new Date(tasks[1].starts_at).getTime()).toBeGreaterThanOrEqual(new Date(tasks[0].ends_at).getTime());
    expect(await liveState(vps)).toBe('running');
    const status = await simulator(stack).status(vps.vmid);
    expect(status.uptimeSeconds).toBeLessThan(5);
  });

  it('fails with upstream_error when the hypervisor task fails, and the machine keeps its state', async () => {
    const vps = await createVps(stack);
    await failNextTask(stack, vps);
    const op = await waitForOperation(stack, (await power(vps, 'stop')).body.id);
    expect(op).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'stop' } });
    recorded['power-task-failed'] = op.id;
    expect(op.error.message).toContain('disk controller timeout');
    expect(await liveState(vps)).toBe('running');
    expect(await completedEvents(op.id)).toHaveLength(1);
  });

  it('waits out a hypervisor outage and then reaches the state', async () => {
    const vps = await createVps(stack);
    await setVpsBackend(stack, true);
    let opId: string;
    try {
      const res = await power(vps, 'stop');
      expect(res.status).toBe(202);
      opId = res.body.id;
      await new Promise((r) => setTimeout(r, 1_500));
      const during = await stack.http.get(`/v1/operations/${opId}`, { token });
      expect(during.body.status).toBe('running');
    } finally {
      await setVpsBackend(stack, false);
    }
    const op = await waitForOperation(stack, opId!);
    expect(op).toMatchObject({ status: 'succeeded', result: { state: 'stopped' } });
  });

  it('replays the same operation for the same Idempotency-Key', async () => {
    const vps = await createVps(stack);
    const key = randomUUID();
    const first = await power(vps, 'stop', { 'idempotency-key': key });
    const second = await power(vps, 'stop', { 'idempotency-key': key });
    expect(second.status).toBe(202);
    expect(second.headers.get('idempotent-replayed')).toBe('true');
    expect(second.body.id).toBe(first.body.id);
    await waitForOperation(stack, first.body.id);
    expect(await stack.db('sim_tasks').where({ backend: 'vps', subject: String(vps.vmid) })).toHaveLength(1);
  });
});

describe('vps.reinstall', () => {
  it('runs its stages, keeps the IP, flags the VPS meanwhile and refuses power actions and a second reinstall with 409', async () => {
    const vps = await createVps(stack);
    const before = (await stack.http.get(`/v1/vps/${vps.id}`, { token })).body;
    const password = `Pw-${randomUUID()}`;
    const res = await reinstall(vps, { template: QEMU_UBUNTU, root_password: password });
    expect(res.status, res.text).toBe(202);
    expect(res.body).toMatchObject({ type: 'vps.reinstall', status: 'running' });
    expect(res.text).not.toContain(password);

    // Flagged in the request's own transaction: visible at once.
    const during = await stack.http.get(`/v1/vps/${vps.id}`, { token });
    expect(during.body.reinstalling).toBe(true);
    expect((await stack.http.get('/v1/vps?limit=100', { token })).body.data.find((v: any) => v.id === vps.id).reinstalling).toBe(true);
    for (const action of ['start', 'stop', 'reboot']) {
      const refused = await power(vps, action);
      expect(refused.status, action).toBe(409);
      expect(refused.body.error.code).toBe('conflict');
      expect(refused.body.error.message).toMatch(/reinstall/);
    }
    const second = await reinstall(vps, { template: QEMU_DEBIAN, root_password: 'another long password' });
    expect(second.status).toBe(409);
    expect(second.body.error.code).toBe('conflict');
    expect((await stack.http.post(`/v1/vps/${vps.id}/backups`, { token, body: {} })).status).toBe(409);

    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', progress: 100, result: { stage: 'done', template: QEMU_UBUNTU, ipv4: before.primary_ip } });
    recorded['reinstall'] = op.id;
    const after = (await stack.http.get(`/v1/vps/${vps.id}`, { token })).body;
    expect(after).toMatchObject({ reinstalling: false, state: 'running', primary_ip: before.primary_ip });
    const ips = (await stack.http.get(`/v1/vps/${vps.id}/ips`, { token })).body.data.map((ip: any) => ip.address);
    expect(ips).toContain(before.primary_ip);

    // Real progress through the stages, as the workflow recorded it.
    const transitions = await recordedProgress(stack, res.body.id);
    expect(transitions.map((t) => t.progress).filter((p) => p !== undefined)).toEqual([5, 15, 60, 70, 85, 100]);
    expect(transitions.map((t) => t.result?.stage).filter(Boolean)).toEqual(['provision', 'boot', 'health_check', 'done']);

    // The hypervisor installed the template with that password; the machine was really reinstalled.
    const machine = await simulator(stack).inspect(vps.vmid);
    expect(machine.template).toBe(QEMU_UBUNTU);
    expect(await simulator(stack).checkRootPassword(vps.vmid, password)).toBe(true);
    const kinds = (
      await stack
        .db('sim_tasks')
        .where({ backend: 'vps', subject: String(vps.vmid) })
        .orderBy('starts_at')
    ).map((t) => t.kind);
    expect(kinds).toEqual(['reinstall', 'start']);
    expect(await completedEvents(op.id)).toHaveLength(1);

    // Power works again.
    expect((await power(vps, 'reboot')).status).toBe(202);
  });

  it('keeps the root password out of the workflow history, the database, the audit log and the events', async () => {
    const vps = await createVps(stack, { type: 'lxc' });
    const password = `Secret-${randomUUID()}`;
    // No worker for a moment, so the sealed password can be seen waiting.
    await stack.stopWorker();
    let res;
    let sealed;
    try {
      res = await reinstall(vps, { template: 'local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst', root_password: password });
      expect(res.status, res.text).toBe(202);
      // Sealed at rest while it waits for the hypervisor, keyed by operation id.
      sealed = await stack.db('vps_reinstall_secrets').where({ operation_id: res.body.id }).first();
      expect(sealed.sealed_root_password).not.toContain(password);
      expect(stack.api.deps.keyring.decrypt('vps-root-password', sealed.sealed_root_password)).toBe(password);
    } finally {
      await stack.startWorker();
    }
    const op = await waitForOperation(stack, res.body.id);
    expect(op.status, JSON.stringify(op.error)).toBe('succeeded');
    expect(await simulator(stack).checkRootPassword(vps.vmid, password)).toBe(true);
    // Deleted once the hypervisor has it.
    expect(await stack.db('vps_reinstall_secrets').where({ operation_id: res.body.id })).toHaveLength(0);

    const history = await historyText(stack, res.body.id);
    expect(history).toContain('vpsBeginReinstall');
    expect(history).toContain(res.body.id);
    expect(history).not.toContain(password);
    expect(history).not.toContain(sealed.sealed_root_password);

    await stack.api.deps.audit.flush();
    const dump = JSON.stringify({
      audit: await stack.db('audit_logs').select('*'),
      operations: await stack.db('operations').select('*'),
      events: await stack.db('events').select('*'),
      idempotency: await stack.db('idempotency_keys').select('*'),
      tasks: await stack.db('sim_tasks').select('*'),
    });
    expect(dump).toContain('/reinstall');
    expect(dump).not.toContain(password);
  });

  it('fails with upstream_error at the provision stage when the hypervisor fails, and clears the flag', async () => {
    const vps = await createVps(stack);
    await failNextTask(stack, vps, 'reinstall');
    const res = await reinstall(vps, { template: QEMU_DEBIAN, root_password: 'a long password here' });
    expect(res.status).toBe(202);
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'provision' }, result: { stage: 'provision' } });
    recorded['reinstall-provision-failed'] = op.id;
    const after = (await stack.http.get(`/v1/vps/${vps.id}`, { token })).body;
    expect(after.reinstalling).toBe(false);
    expect(await stack.db('vps_reinstall_secrets').where({ operation_id: res.body.id })).toHaveLength(0);
    expect(await completedEvents(op.id)).toHaveLength(1);
    // The disk was not touched, and the VPS takes orders again.
    expect((await simulator(stack).inspect(vps.vmid)).template).toBe(QEMU_DEBIAN);
    const again = await power(vps, 'start');
    expect(again.status).toBe(202);
    expect((await waitForOperation(stack, again.body.id)).status).toBe('succeeded');
  });

  it('fails at the boot stage when the machine does not start, and clears the flag', async () => {
    const vps = await createVps(stack);
    await failNextTask(stack, vps, 'start');
    const op = await waitForOperation(stack, (await reinstall(vps, { template: QEMU_UBUNTU, root_password: 'a long password here' })).body.id);
    expect(op).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'boot' } });
    expect((await stack.http.get(`/v1/vps/${vps.id}`, { token })).body).toMatchObject({ reinstalling: false, state: 'stopped' });
  });
});

describe('vps.backup', () => {
  it('resolves when the new backup is in the list', async () => {
    const vps = await createVps(stack, { type: 'lxc' });
    const res = await stack.http.post(`/v1/vps/${vps.id}/backups`, { token, body: { mode: 'suspend' } });
    expect(res.status).toBe(202);
    expect(res.body.type).toBe('vps.backup');
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', result: { mode: 'suspend' } });
    recorded['backup'] = op.id;
    const list = (await stack.http.get(`/v1/vps/${vps.id}/backups`, { token })).body.data;
    expect(list.map((b: any) => b.id)).toEqual([op.result.backup_id]);
    expect(list[0]).toMatchObject({ mode: 'suspend', size_bytes: op.result.size_bytes, created_at: op.result.created_at });
    // Resolved once the backup existed in the list, not when the task was queued.
    expect(new Date(op.completed_at).getTime()).toBeGreaterThanOrEqual(new Date(list[0].created_at).getTime());
    const task = await stack
      .db('sim_tasks')
      .where({ request_key: `${res.body.id}:backup` })
      .first();
    expect(new Date(task.ends_at).getTime()).toBeGreaterThan(new Date(task.starts_at).getTime());
    expect(await liveState(vps)).toBe('running');
  });

  it('fails with upstream_error when the backup task fails, and no backup appears', async () => {
    const vps = await createVps(stack);
    await failNextTask(stack, vps, 'backup');
    const op = await waitForOperation(stack, (await stack.http.post(`/v1/vps/${vps.id}/backups`, { token, body: {} })).body.id);
    expect(op).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'backup' } });
    recorded['backup-task-failed'] = op.id;
    expect(op.result.backup_id).toMatch(/^local:backup\/vzdump-qemu-/);
    expect((await stack.http.get(`/v1/vps/${vps.id}/backups`, { token })).body.data).toHaveLength(0);
  });
});

describe('vps.restore', () => {
  it('checks ownership in the request, then powers off and overwrites the whole disk', async () => {
    const vps = await createVps(stack);
    const backupId = await backupOf(vps);
    const contentAtBackup = (await simulator(stack).inspect(vps.vmid)).disk_content;

    // Change the disk: reinstall with another template.
    const re = await waitForOperation(stack, (await reinstall(vps, { template: QEMU_UBUNTU, root_password: 'a long password here' })).body.id);
    expect(re.status).toBe('succeeded');
    expect((await simulator(stack).inspect(vps.vmid)).disk_content).not.toBe(contentAtBackup);

    // A backup of another VPS (even of this account) is 404 before any operation exists.
    const other = await createVps(stack);
    const foreign = await backupOf(other);
    const before = await stack.db('operations').where({ type: 'vps.restore' }).count('* as n').first();
    const refused = await stack.http.post(`/v1/vps/${vps.id}/backups/${encodeURIComponent(foreign)}/restore`, { token });
    expect(refused.status).toBe(404);
    const malformed = await stack.http.post(`/v1/vps/${vps.id}/backups/${encodeURIComponent('local:backup/../../x')}/restore`, { token });
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.param).toBe('backup_id');
    expect(await stack.db('operations').where({ type: 'vps.restore' }).count('* as n').first()).toEqual(before);

    const res = await stack.http.post(`/v1/vps/${vps.id}/backups/${encodeURIComponent(backupId)}/restore`, { token });
    expect(res.status, res.text).toBe(202);
    expect(res.body).toMatchObject({ type: 'vps.restore', resource: { object: 'vps', id: vps.id } });
    const op = await waitForOperation(stack, res.body.id);
    expect(op).toMatchObject({ status: 'succeeded', result: { backup_id: backupId, state: 'stopped' } });
    recorded['restore'] = op.id;
    const machine = await simulator(stack).inspect(vps.vmid);
    expect(machine.disk_content).toBe(contentAtBackup);
    expect(machine.template).toBe(QEMU_DEBIAN);
    expect(await liveState(vps)).toBe('stopped');
    const kinds = (
      await stack
        .db('sim_tasks')
        .where({ backend: 'vps', subject: String(vps.vmid) })
        .orderBy('starts_at')
    ).map((t) => t.kind);
    expect(kinds.slice(-2)).toEqual(['stop', 'restore']);
    // The other VPS was not touched.
    expect(await liveState(other)).toBe('running');
  });

  it('fails with upstream_error when the restore task fails, leaving the disk as it was', async () => {
    const vps = await createVps(stack);
    const backupId = await backupOf(vps);
    await stack.db('sim_hv_machines').where({ vmid: vps.vmid }).update({ disk_content: 'changed after the backup' });
    await failNextTask(stack, vps, 'restore');
    const op = await waitForOperation(stack, (await stack.http.post(`/v1/vps/${vps.id}/backups/${encodeURIComponent(backupId)}/restore`, { token })).body.id);
    expect(op).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'restore' } });
    recorded['restore-task-failed'] = op.id;
    expect((await simulator(stack).inspect(vps.vmid)).disk_content).toBe('changed after the backup');
    expect(await liveState(vps)).toBe('stopped');
  });

  it('is refused with 409 while a reinstall runs', async () => {
    const vps = await createVps(stack);
    const backupId = await backupOf(vps);
    const re = await reinstall(vps, { template: QEMU_UBUNTU, root_password: 'a long password here' });
    const res = await stack.http.post(`/v1/vps/${vps.id}/backups/${encodeURIComponent(backupId)}/restore`, { token });
    expect(res.status).toBe(409);
    await waitForOperation(stack, re.body.id);
  });
});

describe('visibility of VPS operations', () => {
  it("lists a VPS's operations by resource and hides them from another account", async () => {
    const vps = await createVps(stack);
    const res = await power(vps, 'stop');
    await waitForOperation(stack, res.body.id);
    const list = await stack.http.get(`/v1/operations?resource_id=${vps.id}`, { token });
    expect(list.body.data.map((o: any) => o.id)).toEqual([res.body.id]);
    const { accountId } = await createAccount(stack.db);
    const stranger = await createUser(stack.db, accountId, { isOwner: true });
    const key = await createApiKey(stack.db, accountId, stranger.userId, { scopes: ['operations:read', 'vps:read', 'vps:power'] });
    expect((await stack.http.get(`/v1/operations/${res.body.id}`, { token: key.token })).status).toBe(404);
    expect((await stack.http.post(`/v1/vps/${vps.id}/power`, { token: key.token, body: { action: 'start' } })).status).toBe(404);
  });
});

/**
 * The histories of this run replay against the current workflow code, and so do the checked-in ones
 * under test/fixtures/vps-histories/ (test/helpers/replay.ts).
 */
describe('replay of the VPS workflows', () => {
  const runs: Record<string, RecordedRun> = {};
  beforeAll(async () => {
    for (const [name, workflowId] of Object.entries(recorded)) {
      const handle = stack.temporal!.client.workflow.getHandle(workflowId);
      runs[name] = { workflowId, workflowType: (await handle.describe()).type, history: await handle.fetchHistory() };
    }
  });
  replayTests({
    fixtures: 'vps-histories',
    expected: [
      'backup',
      'backup-task-failed',
      'power-reboot',
      'power-task-failed',
      'reinstall',
      'reinstall-provision-failed',
      'restore',
      'restore-task-failed',
    ],
    recorded: () => runs,
    tamper: { run: 'reinstall', activity: 'vpsBeginReinstall' },
  });
});
