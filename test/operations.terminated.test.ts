import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import type { Principal } from '../domain/principal';
import { createVps, waitFor } from './vps.support';

/**
 * An operation whose workflow was seen and then ended from outside (`temporal workflow terminate`,
 * a cancel from the Temporal UI) records no outcome itself: the worker's orphan sweeper finds it
 * and fails it (`interrupted`), releasing what its request claimed and emitting
 * `operation.completed`, instead of leaving it `running` for ever. Real Temporal dev server and
 * worker, with the sweeper's background loop on short timings.
 */
let stack: Stack;
let principal: Principal;

beforeAll(async () => {
  stack = await startStack({
    // A reinstall takes about a minute here, so it is surely still running when it is terminated.
    env: { SIM_DELAY_SCALE: '1', OPERATION_ORPHAN_AFTER: '1s', OPERATION_ORPHAN_SWEEP_INTERVAL: '300ms' },
  });
  principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
});
afterAll(() => stack?.close());

const operation = (id: string) => stack.http.get(`/v1/operations/${id}`, { token: stack.owner.key });
const completedEvents = async (id: string) => (await stack.db('events').where({ type: 'operation.completed' })).filter((e) => e.data.id === id);

describe('operations whose workflow was ended from outside', () => {
  it('fails a reinstall whose workflow was terminated, and frees the VPS it held', async () => {
    const vps = await createVps(stack);
    const started = await stack.http.post(`/v1/vps/${vps.id}/reinstall`, {
      token: stack.owner.key,
      body: { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'long enough pw' },
    });
    expect(started.status, started.text).toBe(202);
    const id = started.body.id;
    // The workflow has reported (the sweeper's first check no longer applies to it).
    await waitFor(
      () => stack.db('operations').where({ id }).first(),
      (row) => row.workflow_seen_at !== null && row.status === 'running',
    );
    await stack.temporal!.client.workflow.getHandle(id).terminate('an operator stopped it');

    const failed = await waitFor(
      () => operation(id),
      (res) => res.body.status === 'failed',
      20_000,
    );
    expect(failed.body.error).toMatchObject({ code: 'interrupted', message: expect.stringMatching(/terminated/) });
    expect(failed.body.completed_at).not.toBeNull();
    expect((await stack.db('vps_servers').where({ service_id: vps.serviceId }).first()).reinstall_operation_id).toBeNull();
    expect(await stack.db('vps_reinstall_secrets').where({ operation_id: id })).toEqual([]);
    expect(await completedEvents(id)).toHaveLength(1);
    // The VPS takes actions again.
    const power = await stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' } });
    expect(power.status, power.text).toBe(202);
  });

  it('fails a cancelled one with a message that says so, and leaves running ones alone', async () => {
    const start = (holdMs: number) =>
      stack.api.deps.operations.start({ principal, type: 'test.operation' as never, workflow: 'testOperationWorkflow' as never, input: { holdMs } as never });
    const cancelled = await start(60_000);
    const live = await start(60_000);
    for (const op of [cancelled, live]) {
      await waitFor(
        () => stack.db('operations').where({ id: op.id }).first(),
        (row) => row.workflow_seen_at !== null,
      );
    }
    await stack.temporal!.client.workflow.getHandle(cancelled.id).cancel();
    const failed = await waitFor(
      () => operation(cancelled.id),
      (res) => res.body.status === 'failed',
      20_000,
    );
    expect(failed.body.error).toMatchObject({ code: 'interrupted', message: expect.stringMatching(/cancelled/) });
    expect(await completedEvents(cancelled.id)).toHaveLength(1);
    // Quiet for longer than OPERATION_ORPHAN_AFTER, but its workflow runs: still running.
    await new Promise((r) => setTimeout(r, 1_500));
    expect((await operation(live.id)).body.status).toBe('running');
    await stack.temporal!.client.workflow.getHandle(live.id).terminate('test cleanup');
  });
});
