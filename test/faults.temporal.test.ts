import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, reinstallUnderway, startFaultStack, type FaultStack } from './helpers/fault-stack';
import { startReceiver, type Receiver } from './webhooks.support';

/**
 * Temporal frozen (SIGSTOP), killed, and killed mid-operation then restarted on its database file,
 * with the API, the worker and the Temporal dev server as real processes. Asynchronous POSTs answer
 * `503 backend_unavailable` within the start deadline and leave no operation behind (nor a locked
 * VPS); a start that reaches Temporal after the API gave up does nothing; an operation in flight
 * when Temporal restarts completes exactly once (one `operation.completed`, one delivery, one task).
 */
const START_DEADLINE_MS = 2_000;
let stack: FaultStack;
let receiver: Receiver;

beforeAll(async () => {
  stack = await startFaultStack({ name: 'temporal', postgres: 'shared', env: { SIM_DELAY_SCALE: '0.1', OPERATION_QUERY_TIMEOUT: '1s' } });
  await Promise.all([stack.startWorker(), stack.startApi()]);
  receiver = await startReceiver();
  const hook = await stack.http.post('/v1/webhooks', { token: stack.owner.key, body: { url: receiver.url, events: ['operation.completed'] } });
  expect(hook.status, hook.text).toBe(201);
  receiver.secret = hook.body.secret;
});
afterAll(async () => {
  await receiver?.close();
  await stack?.close();
});

const power = (vps: { id: string }, action = 'stop') =>
  stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action }, checkContract: false });
const operationsOf = (serviceId: number) => stack.db('operations').where({ service_id: serviceId }).orderBy('created_at');
const tasksOf = (vmid: number) =>
  stack
    .db('sim_tasks')
    .where({ backend: 'vps', subject: String(vmid) })
    .orderBy('created_at');

async function timed<T>(call: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = Date.now();
  const value = await call();
  return { value, ms: Date.now() - started };
}

describe('Temporal frozen (SIGSTOP)', () => {
  it('answers 503 within the start deadline, leaves no operation or lock, and a late start does nothing', async () => {
    const vps = await stack.createVps();
    const reinstalling = await reinstallUnderway(stack, vps, 'a long password for the freeze');
    const other = await stack.createVps();
    const tasksBefore = (await tasksOf(other.vmid)).length;

    stack.temporal.process.signal('SIGSTOP');
    try {
      const refused = await timed(() => power(other));
      expect(refused.value.status, refused.value.text).toBe(503);
      expect(refused.value.body.error.code).toBe('backend_unavailable');
      expect(refused.ms).toBeLessThan(START_DEADLINE_MS + 1_500);
      const reinstall = await timed(() =>
        stack.http.post(`/v1/vps/${other.id}/reinstall`, {
          token: stack.owner.key,
          body: { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'another long password' },
          checkContract: false,
        }),
      );
      expect(reinstall.value.status).toBe(503);
      expect(reinstall.ms).toBeLessThan(START_DEADLINE_MS + 1_500);
      // Nothing is left behind: no operation, no reinstall flag, no sealed password.
      expect(await operationsOf(other.serviceId)).toEqual([]);
      expect((await stack.db('vps_servers').where({ service_id: other.serviceId }).first()).reinstall_operation_id).toBeNull();
      expect(await stack.db('vps_reinstall_secrets').where({ service_id: other.serviceId })).toEqual([]);
      // A running operation is still answered, from PostgreSQL, marked stale.
      const polled = await timed(() => stack.http.get(`/v1/operations/${reinstalling}`, { token: stack.owner.key }));
      expect(polled.value.status).toBe(200);
      expect(polled.value.body).toMatchObject({ id: reinstalling, stale: true });
      expect(polled.ms).toBeLessThan(3_000);
    } finally {
      stack.temporal.process.signal('SIGCONT');
    }
    // The frozen server now reads the starts the API gave up on: their workflows find no operation
    // and stop before acting. The machine gets no task, and the VPS stays free.
    await new Promise((r) => setTimeout(r, 5_000));
    expect((await tasksOf(other.vmid)).length).toBe(tasksBefore);
    expect(await operationsOf(other.serviceId)).toEqual([]);
    const again = await power(other);
    expect(again.status, again.text).toBe(202);
    await eventually(
      stack,
      'the power action after the thaw',
      () => stack.db('operations').where({ id: again.body.id }).first(),
      (row) => row.status === 'succeeded',
    );
    await eventually(
      stack,
      'the reinstall',
      () => stack.db('operations').where({ id: reinstalling }).first(),
      (row) => row.status === 'succeeded',
      90_000,
    );
  });
});

describe('Temporal killed', () => {
  it("answers 503 within the start deadline, not after the client's retries", async () => {
    const vps = await stack.createVps();
    await stack.temporal.process.kill();
    try {
      const refused = await timed(() => power(vps));
      expect(refused.value.status, refused.value.text).toBe(503);
      expect(refused.value.body.error.code).toBe('backend_unavailable');
      expect(refused.ms).toBeLessThan(START_DEADLINE_MS + 1_500);
      expect(await operationsOf(vps.serviceId)).toEqual([]);
    } finally {
      await stack.temporal.start();
    }
    const ok = await eventually(
      stack,
      'a power action once Temporal is back',
      () => power(vps),
      (res) => res.status === 202,
      60_000,
    );
    await eventually(
      stack,
      'that power action',
      () => stack.db('operations').where({ id: ok.body.id }).first(),
      (row) => row.status === 'succeeded',
    );
  });

  it('restarted on its file mid-reinstall: the operation completes once, with one delivery and one hypervisor task', async () => {
    const vps = await stack.createVps();
    const opId = await reinstallUnderway(stack, vps, 'a long password for the restart', 'local:import/ubuntu-24.04-server-cloudimg-amd64.qcow2');
    await stack.temporal.process.kill();
    await new Promise((r) => setTimeout(r, 2_000));
    await stack.temporal.start();

    const done = await eventually(
      stack,
      'the reinstall',
      () => stack.db('operations').where({ id: opId }).first(),
      (row) => row.status === 'succeeded' || row.status === 'failed',
      120_000,
    );
    expect(done.status).toBe('succeeded');
    const completed = (await stack.db('events').where({ type: 'operation.completed' })).filter((e) => e.data.id === opId);
    expect(completed).toHaveLength(1);
    const delivered = await eventually(
      stack,
      'the delivery',
      () => stack.db('webhook_deliveries').where({ event_id: completed[0].id }),
      (rows) => rows.length === 1 && rows[0].status === 'delivered',
    );
    expect(delivered).toHaveLength(1);
    expect(receiver.received.filter((r) => r.headers['cloud-event-id'] === completed[0].id)).toHaveLength(1);
    expect((await tasksOf(vps.vmid)).filter((t) => t.kind === 'reinstall')).toHaveLength(1);
  });
});
