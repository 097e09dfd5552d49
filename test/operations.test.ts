import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { createApiKey, createService, createUser } from './helpers/fixtures';
import { advanceSignal } from './fixtures/test-operation.workflow';
import type { Principal } from '../domain/principal';
import { SEARCH_ATTRIBUTES } from '../infra/temporal';
import { newUlidId } from '../common/ids';
import { OrphanOperationSweeper } from '../workers/orphan-operation-sweeper';
import { OperationService } from '../domain/operations';
import { createVps } from './vps.support';
import { machineGuard } from '../domain/vps/store';

/**
 * The operation mechanism end to end, proved with a test-only workflow: row + workflow with the same
 * id, state by query (cached), transitions recorded in PostgreSQL, operation.completed in the outbox,
 * and `stale: true` (never a 5xx) when Temporal does not answer.
 */
let stack: Stack;
let principal: Principal;

async function waitFor<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value) || Date.now() > until) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  stack = await startStack();
  principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
});
afterAll(() => stack?.close());

describe('operations through Temporal', () => {
  it('runs an operation from pending to succeeded, readable by query and from PostgreSQL', async () => {
    const { id: serviceId, serviceId: numericServiceId } = await createService(stack.db, stack.owner.accountId);
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
      resource: { object: 'service', id: serviceId },
      serviceId: numericServiceId,
    });
    expect(op).toMatchObject({ object: 'operation', type: 'test.operation' as never, status: 'pending', resource: { object: 'service', id: serviceId } });
    expect(op.id).toMatch(/^op_[0-9A-Z]{26}$/);

    // The workflow id is the operation id, with search attributes and memo for the Temporal UI.
    const description = await stack.temporal!.client.workflow.getHandle(op.id).describe();
    expect(description.type).toBe('testOperationWorkflow');
    expect(description.typedSearchAttributes.get(SEARCH_ATTRIBUTES.operationType)).toBe('test.operation');
    expect(description.typedSearchAttributes.get(SEARCH_ATTRIBUTES.resourceId)).toBe(serviceId);
    expect(await description.memo).toMatchObject({ operation_type: 'test.operation' as never, account: `cus_${stack.owner.accountId}` });

    const running = await waitFor(
      () => stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key }),
      (r) => r.body.status === 'running',
    );
    expect(running.status).toBe(200);
    expect(running.body).toMatchObject({ status: 'running', progress: 0, stale: false });

    await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { progress: 60 });
    const progressed = await waitFor(
      () => stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key }),
      (r) => r.body.progress === 60,
    );
    expect(progressed.body.progress).toBe(60);
    const stored = await stack.db('operations').where({ id: op.id }).first();
    expect(stored.progress).toBe(60);

    await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { finish: 'succeed' });
    await stack.temporal!.client.workflow.getHandle(op.id).result();
    const done = await stack.http.get(`/v1/operations/${op.id.slice(3)}`, { token: stack.owner.key });
    expect(done.body).toMatchObject({ id: op.id, status: 'succeeded', progress: 100, result: { answer: 42 }, error: null, stale: false });
    expect(done.body.completed_at).not.toBeNull();

    const events = await stack.db('events').where({ account_id: stack.owner.accountId, type: 'operation.completed' });
    const mine = events.filter((e) => e.data.id === op.id);
    expect(mine).toHaveLength(1);
    expect(mine[0].data).toMatchObject({ object: 'operation', id: op.id, status: 'succeeded', result: { answer: 42 } });
  });

  it('sends one workflow query for the requests that find the cached state missing or expired together', async () => {
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: { holdMs: 60_000 } as never,
    });
    const temporal = stack.api.deps.temporal;
    const handle = temporal.handle.bind(temporal);
    let queries = 0;
    temporal.handle = (id: string) => {
      const h = handle(id);
      return Object.assign(Object.create(h), { query: (...args: Parameters<typeof h.query>) => (queries++, h.query(...args)) });
    };
    try {
      const views = await Promise.all(Array.from({ length: 20 }, () => stack.api.deps.operations.get(principal, op.id)));
      expect(views.every((v) => v.id === op.id && !v.stale)).toBe(true);
      expect(queries).toBe(1);
      // Answered from the cache while it is fresh.
      await stack.api.deps.operations.get(principal, op.id);
      expect(queries).toBe(1);
    } finally {
      temporal.handle = handle;
      await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { finish: 'succeed' });
    }
  });

  it('records a failure with its error code', async () => {
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
    });
    const handle = stack.temporal!.client.workflow.getHandle(op.id);
    await handle.signal(advanceSignal, { finish: 'fail' });
    await handle.result();
    const res = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
    expect(res.body).toMatchObject({ status: 'failed', error: { code: 'upstream_error' } });
  });

  it('lists operations newest first with filters, and hides those on services the key cannot see', async () => {
    const a = await createService(stack.db, stack.owner.accountId);
    const b = await createService(stack.db, stack.owner.accountId);
    const opA = await stack.api.deps.operations.start({
      principal,
      type: 'test.a' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
      resource: { object: 'service', id: a.id },
      serviceId: a.serviceId,
    });
    const opB = await stack.api.deps.operations.start({
      principal,
      type: 'test.b' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
      resource: { object: 'service', id: b.id },
      serviceId: b.serviceId,
    });

    const all = await stack.http.get('/v1/operations?limit=100', { token: stack.owner.key });
    const ids = all.body.data.map((o: { id: string }) => o.id);
    expect(ids.indexOf(opB.id)).toBeLessThan(ids.indexOf(opA.id));

    const byType = await stack.http.get('/v1/operations?type=test.b', { token: stack.owner.key });
    expect(byType.body.data.map((o: { id: string }) => o.id)).toEqual([opB.id]);
    const byResource = await stack.http.get(`/v1/operations?resource_id=${a.id}`, { token: stack.owner.key });
    expect(byResource.body.data.map((o: { id: string }) => o.id)).toEqual([opA.id]);

    const narrow = await createApiKey(stack.db, stack.owner.accountId, stack.owner.userId, { scopes: ['operations:read'], allowlist: [a.serviceId] });
    const seen = await stack.http.get('/v1/operations?limit=100', { token: narrow.token });
    const seenIds = seen.body.data.map((o: { id: string }) => o.id);
    expect(seenIds).toContain(opA.id);
    expect(seenIds).not.toContain(opB.id);
    expect((await stack.http.get(`/v1/operations/${opB.id}`, { token: narrow.token })).status).toBe(404);
    for (const op of [opA, opB]) await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { finish: 'succeed' });
  });

  it('answers 404 for unknown, malformed and other-account operation ids', async () => {
    expect((await stack.http.get('/v1/operations/op_01JD0000000000000000000000', { token: stack.owner.key })).status).toBe(404);
    expect((await stack.http.get('/v1/operations/not-an-id', { token: stack.owner.key })).body.error.code).toBe('not_found');
    const other = await stack.db('accounts').insert({ name: 'Other' }).returning('id');
    const otherUser = await createUser(stack.db, other[0].id, { isOwner: true });
    const otherKey = await createApiKey(stack.db, other[0].id, otherUser.userId, { scopes: ['operations:read'] });
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
    });
    expect((await stack.http.get(`/v1/operations/${op.id}`, { token: otherKey.token })).status).toBe(404);
    await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { finish: 'succeed' });
  });

  it('serves the last stored state with stale: true when Temporal does not answer, never a 5xx', async () => {
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: {} as never,
    });
    await waitFor(
      () => stack.db('operations').where({ id: op.id }).first(),
      (row) => row.status === 'running',
    );
    // No worker answers queries any more: the query cannot be served and times out.
    await stack.stopWorker();
    await new Promise((r) => setTimeout(r, 2_100)); // past the 2 s cache
    const res = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: op.id, status: 'running', progress: 0, stale: true });
    await stack.startWorker();
    await stack.temporal!.client.workflow.getHandle(op.id).signal(advanceSignal, { finish: 'succeed' });
    await stack.temporal!.client.workflow.getHandle(op.id).result();
    const after = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
    expect(after.body).toMatchObject({ status: 'succeeded', stale: false });
  });

  it('closes operations no workflow runs (orphan sweeper), releasing what they held, and leaves running ones alone', async () => {
    const sweeper = new OrphanOperationSweeper({ ...stack.api.deps, config: { ...stack.config, OPERATION_ORPHAN_AFTER: 1_000 } });
    // As if the API had died between committing the reinstall's row (with its flag and sealed
    // password) and starting its workflow.
    const vps = await createVps(stack);
    const orphan = newUlidId('op');
    await stack.db('operations').insert({
      id: orphan,
      account_id: stack.owner.accountId,
      type: 'vps.reinstall',
      status: 'running',
      resource_object: 'vps',
      resource_id: vps.id,
      service_id: vps.serviceId,
      created_at: stack.db.raw(`now() - interval '1 minute'`),
    });
    await stack.db('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: orphan });
    await stack.db('vps_reinstall_secrets').insert({ operation_id: orphan, service_id: vps.serviceId, sealed_root_password: 'sealed' });
    const locked = await stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' } });
    expect(locked.status).toBe(409);
    // A live operation with a workflow is only noted.
    const live = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: { holdMs: 60_000 } as never,
    });
    await stack
      .db('operations')
      .where({ id: live.id })
      .update({ created_at: stack.db.raw(`now() - interval '1 minute'`) });

    expect(await sweeper.sweep()).toEqual([orphan]);
    const closed = await stack.http.get(`/v1/operations/${orphan}`, { token: stack.owner.key });
    expect(closed.body).toMatchObject({ status: 'failed', error: { code: 'not_started' } });
    expect((await stack.db('vps_servers').where({ service_id: vps.serviceId }).first()).reinstall_operation_id).toBeNull();
    expect(await stack.db('vps_reinstall_secrets').where({ operation_id: orphan })).toEqual([]);
    expect((await stack.db('events').where({ type: 'operation.completed' })).filter((e) => e.data.id === orphan)).toHaveLength(1);
    expect((await stack.db('operations').where({ id: live.id }).first()).workflow_seen_at).not.toBeNull();
    expect(await sweeper.sweep()).toEqual([]);
    // The VPS is not locked any more.
    const power = await stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' } });
    expect(power.status, power.text).toBe(202);
    await stack.temporal!.client.workflow.getHandle(live.id).signal(advanceSignal, { finish: 'succeed' });
  });

  it('starts, from its row, the workflow of an operation whose process died between commit and start: the action runs once', async () => {
    // An API that commits the row and then never reaches Temporal (as if killed right after the commit).
    const dying = new OperationService(stack.db, stack.api.deps.temporal, {
      cacheTtlMs: 0,
      queryTimeoutMs: 1_000,
      startTimeoutMs: 5_000,
      logger: stack.api.deps.logger,
    });
    Object.assign(dying, { startWorkflow: () => new Promise<never>(() => undefined) });
    const { id: serviceId } = await createService(stack.db, stack.owner.accountId);
    const input = { resource: { object: 'service', id: serviceId }, type: 'test.operation' as never, workflow: 'testOperationWorkflow' as never };
    // One static input, one computed from the rows its guards locked, inside a transaction (as with an Idempotency-Key).
    void dying.start({ ...input, principal, input: { holdMs: 1 } as never });
    void dying.start({ ...input, principal, input: (() => ({ holdMs: 2 })) as never, inTransaction: async () => undefined });
    const orphans = await waitFor(
      () => stack.db('operations').where({ resource_id: serviceId }).orderBy('id'),
      (rows) => rows.length === 2,
    );
    expect(orphans).toHaveLength(2);
    expect(orphans.map((o) => o.workflow_start)).toEqual([
      { workflow: 'testOperationWorkflow', input: { holdMs: 1 } },
      { workflow: 'testOperationWorkflow', input: { holdMs: 2 } },
    ]);
    await stack
      .db('operations')
      .whereIn(
        'id',
        orphans.map((o) => o.id),
      )
      .update({ created_at: stack.db.raw(`now() - interval '1 minute'`) });

    const sweeper = new OrphanOperationSweeper({ ...stack.api.deps, config: { ...stack.config, OPERATION_ORPHAN_AFTER: 1_000 } });
    expect(await sweeper.sweep()).toEqual([]);
    for (const orphan of orphans) {
      const handle = stack.temporal!.client.workflow.getHandle(orphan.id);
      expect((await handle.describe()).type).toBe('testOperationWorkflow');
      // A second start from the row (a racing sweeper, a retry) is the same run, not another.
      expect(await stack.api.deps.operations.startFromRow(orphan.id)).toBe(true);
      await waitFor(
        () => stack.db('operations').where({ id: orphan.id }).first(),
        (row) => row.status === 'running',
      );
      await handle.signal(advanceSignal, { finish: 'succeed' });
      await handle.result();
      const runs = [];
      for await (const run of stack.temporal!.client.workflow.list({ query: `WorkflowId = '${orphan.id}'` })) runs.push(run);
      expect(runs).toHaveLength(1);
    }
    const done = await stack.db('operations').whereIn(
      'id',
      orphans.map((o) => o.id),
    );
    expect(done.map((o) => o.status)).toEqual(['succeeded', 'succeeded']);
    // Finished: nothing is started from its row again.
    expect(await stack.api.deps.operations.startFromRow(orphans[0].id)).toBe(false);
    expect(await sweeper.sweep()).toEqual([]);
  });

  it('checks its guards in the statement that writes its row: refused, waiting on a concurrent claim, and inside a transaction', async () => {
    const vps = await createVps(stack);
    const power = (extra: Partial<Parameters<typeof stack.api.deps.operations.start>[0]> = {}) =>
      stack.api.deps.operations.start({
        principal,
        type: 'vps.power',
        workflow: 'vpsPowerWorkflow',
        input: { serviceId: vps.serviceId, vmid: vps.vmid, action: 'start' },
        resource: { object: 'vps', id: vps.id },
        serviceId: vps.serviceId,
        initialStatus: 'running',
        guards: [machineGuard(vps.serviceId, stack.owner.accountId, 'a power action')],
        ...extra,
      });
    const rowsOf = async () => (await stack.db('operations').where({ service_id: vps.serviceId, type: 'vps.power' })).length;

    // A reinstall claims the VPS in a transaction the power action has to wait for: the statement
    // waits on the row lock, then sees the committed flag and refuses.
    const reinstall = newUlidId('op');
    await stack
      .db('operations')
      .insert({ id: reinstall, account_id: stack.owner.accountId, type: 'vps.reinstall', status: 'running', service_id: vps.serviceId });
    const claim = await stack.db.transaction();
    await claim('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: reinstall });
    let settled = false;
    const waiting = power().then(
      () => ((settled = true), null),
      (err: unknown) => ((settled = true), err),
    );
    await new Promise((r) => setTimeout(r, 300));
    expect(settled).toBe(false);
    await claim.commit();
    expect(await waiting).toMatchObject({
      status: 409,
      message: expect.stringContaining(`A reinstall of this VPS is running (operation ${reinstall}); a power action is refused`),
    });
    expect(await rowsOf()).toBe(0);

    // The same guard inside the transaction a hook opens.
    let hookRan = false;
    await expect(power({ inTransaction: async () => void (hookRan = true) })).rejects.toMatchObject({ status: 409 });
    expect(hookRan).toBe(false);
    expect(await rowsOf()).toBe(0);

    // A claim rolled back lets the waiting action through.
    await stack.db('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: null });
    const again = await stack.db.transaction();
    await again('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: reinstall });
    const through = power();
    await new Promise((r) => setTimeout(r, 200));
    await again.rollback();
    expect(await through).toMatchObject({ type: 'vps.power', status: 'running', resource: { object: 'vps', id: vps.id } });
    expect(await rowsOf()).toBe(1);

    // No machine record: refused, like a machine still being provisioned.
    await stack.db('vps_servers').where({ service_id: vps.serviceId }).delete();
    await expect(power()).rejects.toMatchObject({ status: 409, message: expect.stringContaining('no machine on the hypervisor yet') });
    expect(await rowsOf()).toBe(1);
  });

  it('a workflow whose operation is gone, or was closed, stops before acting', async () => {
    const vps = await createVps(stack);
    for (const closed of [false, true]) {
      const id = newUlidId('op');
      if (closed) {
        await stack
          .db('operations')
          .insert({ id, account_id: stack.owner.accountId, type: 'vps.power', status: 'failed', service_id: vps.serviceId, completed_at: new Date() });
      }
      // As if Temporal had taken a start the API had given up on (and taken back, or the sweeper closed).
      const handle = await stack.temporal!.client.workflow.start('vpsPowerWorkflow', {
        workflowId: id,
        taskQueue: stack.taskQueue,
        args: [{ operationId: id, serviceId: vps.serviceId, vmid: vps.vmid, action: 'stop' }],
      });
      await handle.result().catch(() => undefined);
      const tasks = await stack.db('sim_tasks').where({ backend: 'vps', subject: String(vps.vmid) });
      expect(tasks, `closed=${closed}`).toEqual([]);
      expect(((await stack.db('operations').where({ id }).first()) ?? null)?.status ?? null).toBe(closed ? 'failed' : null);
    }
    // An order taken back with its operation: the late run fails for good instead of retrying for ever.
    const orderRun = await stack.temporal!.client.workflow.start('orderWorkflow', {
      workflowId: newUlidId('op'),
      taskQueue: stack.taskQueue,
      args: [{ operationId: 'op_gone', orderId: 987654, activationTimeoutMs: 60_000 }],
    });
    await expect(orderRun.result()).rejects.toThrow();
  });
});
