import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, reinstallUnderway, startFaultStack, type FaultStack } from './helpers/fault-stack';
import { startReceiver, type Receiver } from './webhooks.support';

/**
 * The worker process SIGKILLed in the middle of a reinstall and of a backup, then started again:
 * each operation completes once (one `operation.completed`, one webhook delivery) and the
 * hypervisor runs its task once. The worker, the API and Temporal are real processes.
 */
let stack: FaultStack;
let receiver: Receiver;

beforeAll(async () => {
  stack = await startFaultStack({ name: 'worker', postgres: 'shared', env: { SIM_DELAY_SCALE: '0.1' } });
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

async function expectCompletedOnce(opId: string, vmid: number, kind: string) {
  const done = await eventually(
    stack,
    opId,
    () => stack.db('operations').where({ id: opId }).first(),
    (row) => row.status === 'succeeded' || row.status === 'failed',
    120_000,
  );
  expect(done.status, JSON.stringify(done.error)).toBe('succeeded');
  const completed = (await stack.db('events').where({ type: 'operation.completed' })).filter((e) => e.data.id === opId);
  expect(completed).toHaveLength(1);
  await eventually(
    stack,
    'the delivery',
    () => stack.db('webhook_deliveries').where({ event_id: completed[0].id }),
    (rows) => rows.length === 1 && rows[0].status === 'delivered',
  );
  await receiver.waitFor(receiver.received.length, 1_000);
  expect(receiver.received.filter((r) => r.headers['cloud-event-id'] === completed[0].id)).toHaveLength(1);
  const tasks = await stack.db('sim_tasks').where({ backend: 'vps', subject: String(vmid), kind });
  expect(tasks).toHaveLength(1);
}

describe('worker SIGKILL', () => {
  it('mid-reinstall: the replacement worker completes it once', async () => {
    const vps = await stack.createVps();
    const opId = await reinstallUnderway(stack, vps, 'a long password for the kill');
    await stack.worker.kill();
    await stack.startWorker();
    await expectCompletedOnce(opId, vps.vmid, 'reinstall');
  });

  it('mid-backup: the replacement worker completes it once', async () => {
    const vps = await stack.createVps();
    const res = await stack.http.post(`/v1/vps/${vps.id}/backups`, { token: stack.owner.key, body: { mode: 'snapshot' } });
    expect(res.status, res.text).toBe(202);
    await eventually(
      stack,
      'the backup task',
      () => stack.db('operations').where({ id: res.body.id }).first(),
      (row) => Boolean(row.result?.backup_id),
    );
    await stack.worker.kill();
    await stack.startWorker();
    await expectCompletedOnce(res.body.id, vps.vmid, 'backup');
    const backups = await stack.http.get(`/v1/vps/${vps.id}/backups`, { token: stack.owner.key });
    expect(backups.body.data).toHaveLength(1);
  });
});
