import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError } from '@temporalio/common';
import { legacyRequestHash, runIdempotent } from '../domain/idempotency';
import { OperationService } from '../domain/operations';
import { machineGuard, type VpsServerRow } from '../domain/vps/store';
import { OrphanOperationSweeper } from '../workers/orphan-operation-sweeper';
import { RetentionSweeper } from '../workers/retention-sweeper';
import { startStack, type Stack } from './helpers/stack';
import { createVps, simulator, waitFor, waitForOperation, type TestVps } from './vps.support';

/**
 * Idempotency records that outlive their request: a process that died holding a key (taken over
 * safely, or answered with the operation it created), records past their 24 hours (reused, and
 * swept), and fingerprints keyed with the instance's keyring.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

/** A timestamp with microseconds, as PostgreSQL keeps them (the driver reads back milliseconds). */
const pgTime = (msAgo: number) => stack.db.raw(`now() - make_interval(secs => ?) + interval '0.000123 seconds'`, [msAgo / 1000]);

async function staleRecord(key: string, path: string, body: unknown, fields: Record<string, unknown> = {}) {
  const { requestFingerprint } = await import('../domain/idempotency');
  await stack.db('idempotency_keys').insert({
    account_id: stack.owner.accountId,
    key,
    method: 'POST',
    path,
    request_hash: requestFingerprint(stack.api.deps.keyring, { method: 'POST', path, body }),
    state: 'running',
    created_at: pgTime(5 * 60_000),
    locked_at: pgTime(5 * 60_000),
    expires_at: stack.db.raw(`now() + interval '23 hours'`),
    ...fields,
  });
}

/**
 * What an API killed between committing an operation and starting its workflow leaves behind: a
 * `vps.power` operation row (with its `workflow_start`) and the key's `running` record bound to it,
 * its hold not renewed for five minutes. It is made by the real start and key code, with a start
 * that never reaches Temporal and a hold that never beats (as a dead process's).
 */
async function killedAfterCommit(vps: TestVps, key: string, path: string, body: { action: 'stop' }): Promise<string> {
  const principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
  const dying = new OperationService(stack.db, stack.api.deps.temporal, {
    cacheTtlMs: 0,
    queryTimeoutMs: 1_000,
    startTimeoutMs: 5_000,
    logger: stack.api.deps.logger,
  });
  Object.assign(dying.starts, { startWorkflow: () => new Promise<never>(() => undefined) });
  const deps = {
    db: stack.db,
    keyring: stack.api.deps.keyring,
    abandonAfterMs: 3_600_000,
    startOperation: async () => undefined,
    logger: stack.api.deps.logger,
  };
  void runIdempotent(deps, { accountId: stack.owner.accountId, key, method: 'POST', path, body }, async () => ({
    status: 202,
    body: await dying.start({
      principal,
      type: 'vps.power',
      input: (locked) => {
        const server = locked.vps as Pick<VpsServerRow, 'service_id' | 'vmid'>;
        return { serviceId: server.service_id, vmid: server.vmid, action: body.action };
      },
      resource: { object: 'vps', id: vps.id },
      serviceId: vps.serviceId,
      serviceChecks: { family: 'vps', capability: 'power', action: 'a power action' },
      initialStatus: 'running',
      guards: [machineGuard(vps.serviceId, stack.owner.accountId, 'a power action')],
    }),
  }));
  const record = await waitFor(
    () => stack.db('idempotency_keys').where({ account_id: stack.owner.accountId, key }).first(),
    (row) => Boolean(row?.operation_id),
  );
  await stack
    .db('idempotency_keys')
    .where({ account_id: stack.owner.accountId, key })
    .update({ locked_at: pgTime(5 * 60_000) });
  const operation = await stack.db('operations').where({ id: record.operation_id }).first();
  expect(operation).toMatchObject({ type: 'vps.power', status: 'running', workflow_start: { workflow: 'vpsPowerWorkflow' } });
  return operation.id;
}

/** Whether Temporal has a workflow with this id (the operation's). */
const workflowExists = (id: string) =>
  stack
    .temporal!.client.workflow.getHandle(id)
    .describe()
    .then(
      () => true,
      (err: unknown) => {
        if (err instanceof WorkflowNotFoundError) return false;
        throw err;
      },
    );

describe('idempotency records', () => {
  it('takes over a key whose request died before it created anything, and runs it once', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/power`;
    await staleRecord('died-early', path, { action: 'stop' });
    const res = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'died-early' } });
    expect(res.status, res.text).toBe(202);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    const again = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'died-early' } });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body.id).toBe(res.body.id);
    expect(await stack.db('operations').where({ service_id: vps.serviceId })).toHaveLength(1);
    await waitForOperation(stack, res.body.id);
  });

  it('answers with the operation a dead request had created, instead of starting another', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/power`;
    const first = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' } });
    expect(first.status).toBe(202);
    // As if the API had died after the operation's transaction, before storing the answer.
    await staleRecord('died-late', path, { action: 'stop' }, { operation_id: first.body.id });
    const retry = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'died-late' } });
    expect(retry.status, retry.text).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.headers.get('location')).toBe(`/v1/operations/${first.body.id}`);
    expect(retry.body).toMatchObject({ id: first.body.id, type: 'vps.power' });
    expect(await stack.db('operations').where({ service_id: vps.serviceId })).toHaveLength(1);
    await waitForOperation(stack, first.body.id);
  });

  it('starts the workflow of the operation a request killed before its start had committed, before answering 202', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/power`;
    const operationId = await killedAfterCommit(vps, 'killed-before-start', path, { action: 'stop' });
    expect(await workflowExists(operationId)).toBe(false);

    const retry = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'killed-before-start' } });
    expect(retry.status, retry.text).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.body).toMatchObject({ id: operationId, type: 'vps.power' });
    // Started by the retry itself, not left to the orphan sweeper (which waits OPERATION_ORPHAN_AFTER).
    expect(await workflowExists(operationId)).toBe(true);
    expect(await waitForOperation(stack, operationId)).toMatchObject({ status: 'succeeded' });
    expect((await simulator(stack).status(vps.vmid)).state).toBe('stopped');

    // Answered once for all: a further retry replays, and nothing runs twice.
    const again = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'killed-before-start' } });
    expect(again.status).toBe(202);
    expect(again.body.id).toBe(operationId);
    expect(await stack.db('operations').where({ service_id: vps.serviceId })).toHaveLength(1);
    const runs = [];
    for await (const run of stack.temporal!.client.workflow.list({ query: `WorkflowId = '${operationId}'` })) runs.push(run);
    expect(runs).toHaveLength(1);
  });

  it('still answers 202 when Temporal does not take that start, and the orphan sweeper starts it from the row', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/power`;
    const operationId = await killedAfterCommit(vps, 'killed-temporal-down', path, { action: 'stop' });
    const starts = stack.api.deps.operations.starts;
    Object.assign(starts, { startWorkflow: () => Promise.reject(new Error('Temporal did not accept the workflow within 5000 ms')) });
    let retry;
    try {
      retry = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'killed-temporal-down' } });
    } finally {
      delete (starts as unknown as Record<string, unknown>).startWorkflow;
    }
    expect(retry.status, retry.text).toBe(202);
    expect(retry.body).toMatchObject({ id: operationId, type: 'vps.power' });
    expect(await workflowExists(operationId)).toBe(false);
    expect(await stack.db('idempotency_keys').where({ key: 'killed-temporal-down' }).first()).toMatchObject({ state: 'done', operation_id: operationId });

    // The row is the intent: once Temporal answers, the sweeper starts it, and it runs once.
    await stack
      .db('operations')
      .where({ id: operationId })
      .update({ created_at: stack.db.raw(`now() - interval '1 minute'`) });
    const sweeper = new OrphanOperationSweeper({ ...stack.api.deps, config: { ...stack.config, OPERATION_ORPHAN_AFTER: 1_000 } });
    expect(await sweeper.sweep()).toEqual([]);
    expect(await waitForOperation(stack, operationId)).toMatchObject({ status: 'succeeded' });
  });

  it('binds the key to the operation its request creates', async () => {
    const vps = await createVps(stack);
    const res = await stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'bound' } });
    expect(res.status).toBe(202);
    const row = await stack.db('idempotency_keys').where({ account_id: stack.owner.accountId, key: 'bound' }).first();
    expect(row).toMatchObject({ state: 'done', operation_id: res.body.id });
    await waitForOperation(stack, res.body.id);
  });

  it('keeps nothing for a start its guards refuse, so a retry with the same key runs once the VPS is free', async () => {
    const vps = await createVps(stack);
    // As if a reinstall were running: the power action's guard refuses in the keyed transaction.
    const reinstall = `op_${'0'.repeat(20)}REINST`;
    await stack
      .db('operations')
      .insert({ id: reinstall, account_id: stack.owner.accountId, type: 'vps.reinstall', status: 'running', service_id: vps.serviceId });
    await stack.db('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: reinstall });
    const send = () =>
      stack.http.post(`/v1/vps/${vps.id}/power`, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'refused-then-run' } });
    const refused = await send();
    expect(refused.status, refused.text).toBe(409);
    expect(await stack.db('operations').where({ service_id: vps.serviceId, type: 'vps.power' })).toHaveLength(0);
    const key = await stack.db('idempotency_keys').where({ account_id: stack.owner.accountId, key: 'refused-then-run' }).first();
    expect(key?.operation_id ?? null).toBeNull();

    await stack.db('vps_servers').where({ service_id: vps.serviceId }).update({ reinstall_operation_id: null });
    const run = await send();
    expect(run.status, run.text).toBe(202);
    expect(await stack.db('idempotency_keys').where({ account_id: stack.owner.accountId, key: 'refused-then-run' }).first()).toMatchObject({
      state: 'done',
      operation_id: run.body.id,
    });
    await waitForOperation(stack, run.body.id);
  });

  it('still answers 409 while the request holding the key may be alive', async () => {
    const path = '/v1/vps/svc_1/power';
    await staleRecord('alive', path, { action: 'stop' }, { locked_at: pgTime(1_000) });
    const res = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'alive' } });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe('idempotency_key_in_use');
  });

  it('reuses a key past its 24 hours, and the sweeper deletes such records', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/power`;
    await staleRecord(
      'expired',
      path,
      { action: 'start' },
      { state: 'done', response_status: 202, response_body: JSON.stringify({}), expires_at: pgTime(1_000) },
    );
    const res = await stack.http.post(path, { token: stack.owner.key, body: { action: 'stop' }, headers: { 'idempotency-key': 'expired' } });
    expect(res.status, res.text).toBe(202);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    await waitForOperation(stack, res.body.id);

    await staleRecord('to-sweep', path, { action: 'stop' }, { expires_at: pgTime(1_000) });
    const swept = await new RetentionSweeper({ db: stack.db, config: stack.config, logger: stack.api.deps.logger }).sweep();
    expect(swept.idempotencyKeys).toBeGreaterThanOrEqual(1);
    expect(await stack.db('idempotency_keys').where({ key: 'to-sweep' })).toEqual([]);
    expect(await stack.db('idempotency_keys').where({ key: 'expired' })).toHaveLength(1);
  });

  it('stores a keyed fingerprint: a body with a password cannot be tested against guesses', async () => {
    const vps = await createVps(stack);
    const path = `/v1/vps/${vps.id}/reinstall`;
    const body = { template: 'local:import/debian-12-genericcloud-amd64.qcow2', root_password: 'correct horse battery' };
    const res = await stack.http.post(path, { token: stack.owner.key, body, headers: { 'idempotency-key': 'with-password' } });
    expect(res.status, res.text).toBe(202);
    const row = await stack.db('idempotency_keys').where({ key: 'with-password' }).first();
    expect(row.request_hash).toMatch(/^hmac-sha256:[0-9a-f]{64}$/);
    expect(row.request_hash).not.toContain(legacyRequestHash({ method: 'POST', path, body }));
    expect(JSON.stringify(row)).not.toContain('correct horse battery');
    const replay = await stack.http.post(path, { token: stack.owner.key, body, headers: { 'idempotency-key': 'with-password' } });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    await waitForOperation(stack, res.body.id, 60_000);
  });
});
