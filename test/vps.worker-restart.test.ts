import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createVps, setVpsBackend, simulator, waitFor, waitForOperation } from './vps.support';

/**
 * A worker that dies in the middle of a reinstall is replaced, and the operation still completes
 * once and correctly: the hypervisor task is not queued twice (keys), the wait is picked up by the
 * new worker (heartbeat), and operation.completed is written exactly once.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

describe('worker restart during vps.reinstall', () => {
  it('completes once, correctly, on the replacement worker', async () => {
    const vps = await createVps(stack);
    const password = 'a long password for the restart test';
    const template = 'local:import/ubuntu-24.04-server-cloudimg-amd64.qcow2';
    const res = await stack.http.post(`/v1/vps/${vps.id}/reinstall`, { token: stack.owner.key, body: { template, root_password: password } });
    expect(res.status, res.text).toBe(202);
    const opId: string = res.body.id;

    // The reinstall task is on the hypervisor and the worker is polling it. A short hypervisor
    // outage holds that poll in flight (it waits outages out), so the worker dies inside it.
    await waitFor(
      () => stack.db('operations').where({ id: opId }).first(),
      (row) => row.progress >= 15,
    );
    await setVpsBackend(stack, true);
    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await waitFor(
      async () => (await handle.describe()).raw.pendingActivities ?? [],
      (pending) => pending.some((a) => a.activityType?.name === 'vpsAwaitTask' && Number(a.state) === 2 /* STARTED */),
    );
    await stack.stopWorker();
    await setVpsBackend(stack, false);
    const midway = await stack.db('operations').where({ id: opId }).first();
    expect(midway.status).toBe('running');
    expect((await stack.db('vps_servers').where({ service_id: vps.serviceId }).first()).reinstall_operation_id).toBe(opId);

    // Nobody works on it meanwhile; the hypervisor finishes its own task.
    await new Promise((r) => setTimeout(r, 500));
    expect((await stack.db('operations').where({ id: opId }).first()).status).toBe('running');

    await stack.startWorker();
    const op = await waitForOperation(stack, opId, 45_000);
    expect(op).toMatchObject({ status: 'succeeded', progress: 100, result: { stage: 'done', template } });

    // The wait in flight when the worker died failed there and ran again on the new worker (its
    // retries leave no events in the history; the started event carries the attempt number).
    const history = await handle.fetchHistory();
    const retried = (history.events ?? []).filter((e) => (e.activityTaskStartedEventAttributes?.attempt ?? 1) > 1);
    expect(retried.length).toBeGreaterThan(0);

    const completed = (await stack.db('events').where({ type: 'operation.completed' })).filter((e) => e.data.id === opId);
    expect(completed).toHaveLength(1);
    expect(completed[0].data).toMatchObject({ id: opId, status: 'succeeded' });
    const tasks = await stack
      .db('sim_tasks')
      .where({ backend: 'vps', subject: String(vps.vmid) })
      .orderBy('starts_at');
    expect(tasks.map((t) => [t.kind, t.status])).toEqual([
      ['reinstall', 'ok'],
      ['start', 'ok'],
    ]);
    expect(await simulator(stack).checkRootPassword(vps.vmid, password)).toBe(true);
    expect((await stack.http.get(`/v1/vps/${vps.id}`, { token: stack.owner.key })).body).toMatchObject({ reinstalling: false, state: 'running' });
  });
});
