import { randomUUID } from 'node:crypto';
import { Context } from '@temporalio/activity';
import { WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { CancelledFailure } from '@temporalio/common';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withBackendErrors } from '../activities/backend-errors';
import type { OperationTransition } from '../domain/operations/contract';
import { BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import { createTimeSkippingEnv, workflowBundle } from './helpers/temporal';
import { hostQueue } from '../common/hosts';

/**
 * Workflows on the kit with stubbed activities: the real workflow code (the run's bundle) on the
 * time-skipping test server, with no PostgreSQL, API or backend behind it. The stubs note every call
 * and every transition the workflow records, and answer as each test scripts them (by workflow id),
 * so progress, result, failure attribution and the order of compensations are checked exactly and
 * in milliseconds. The full-stack tests (vps.workflows, dbaas.workflows) keep what needs the stack:
 * the routes, the simulators' real state, the replay histories.
 */
let env: TestWorkflowEnvironment;
let worker: Worker;
let hostWorker: Worker;
let running: Promise<void>;
const taskQueue = `stubbed-${randomUUID()}`;

/** What one run did: the activities it called (in order) and the transitions it recorded. */
interface Trace {
  calls: string[];
  transitions: Array<Omit<OperationTransition, 'operationId'>>;
}
/** How the stubs answer one run (keyed by workflow id). */
interface Script {
  /** vpsAwaitTask's answer per power action. */
  taskStatus?: Partial<Record<'stop' | 'start', { status: 'ok' | 'error'; error?: string }>>;
  /** testCall names that throw (a backend's refusal, not retried). */
  failing?: string[];
  /** Makes dbaasStartBackup throw this. */
  backupError?: Error;
  /** The host the resource is placed on (none by default), and whether it is down when asked. */
  host?: { name: string; down: boolean };
  /** Makes dbaasImport refuse (a restore that fails on the new host). */
  importFails?: boolean;
}
const traces = new Map<string, Trace>();
const scripts = new Map<string, Script>();

function current(): { trace: Trace; script: Script } {
  const id = Context.current().info.workflowExecution!.workflowId;
  if (!traces.has(id)) traces.set(id, { calls: [], transitions: [] });
  return { trace: traces.get(id)!, script: scripts.get(id) ?? {} };
}
/** Notes the call, with the task queue it ran on when it is not the workflow's own. */
const call = (name: string) => {
  const queue = Context.current().info.taskQueue;
  current().trace.calls.push(queue === taskQueue ? name : `${name} @${queue}`);
};

/** The activities the workflows below call, as stubs, with backend errors mapped as the worker maps them. */
const stubs = withBackendErrors({
  async recordOperationTransition({ operationId: _, ...transition }: OperationTransition) {
    current().trace.transitions.push(transition);
  },
  async vpsIssuePower({ action }: { vmid: number; action: 'start' | 'stop'; key: string }) {
    call(`issue ${action}`);
    return { upid: `UPID:${action}` };
  },
  async vpsAwaitTask({ upid }: { upid: string }) {
    call(`await ${upid}`);
    const action = upid.slice('UPID:'.length) as 'stop' | 'start';
    return current().script.taskStatus?.[action] ?? { status: 'ok' };
  },
  async vpsAwaitState({ state }: { vmid: number; state: string }) {
    call(`state ${state}`);
    return state;
  },
  async hostOfService(_serviceId: number) {
    return { host: current().script.host?.name ?? null };
  },
  async hostAvailability(host: string) {
    call(`ask ${host}`);
    return current().script.host?.down
      ? {
          status: 'down',
          message: `The server of this resource is on host ${host}, which has not answered since then; this operation continues when it is back.`,
        }
      : { status: 'up', message: '' };
  },
  async dbaasStartBackup({ key }: { instance: string; key: string }) {
    call(`start backup ${key.split(':')[1]}`);
    const error = current().script.backupError;
    if (error) throw error;
    return { backup_id: 'bk_1', status: 'running', size_bytes: null, created_at: '2025-01-01T00:00:00.000Z' };
  },
  async dbaasAwaitBackup({ backupId }: { instance: string; backupId: string }) {
    call(`await backup ${backupId}`);
    return { backup_id: backupId, status: 'completed', size_bytes: 4096, created_at: '2025-01-01T00:00:00.000Z' };
  },
  // A database instance's move, from host hx to host hx (one stub host serves both ends).
  async dbaasMovePlan() {
    return { from: 'hx', to: 'hx', instance: 'pg-1' };
  },
  async dbaasDatabasesHere() {
    call('list');
    return ['app'];
  },
  async dbaasExport() {
    call('export');
    return { bytes: 100 };
  },
  async dbaasImport() {
    call('import');
    if (current().script.importFails) throw new BackendRefusedError('dbaas', "The instance's files could not be unpacked: tar: short read", 'import_failed');
    return { host: '127.0.0.9', port: 5432, database: 'postgres', username: 'admin', tlsMode: 'verify-full', caCertificate: 'CA' };
  },
  async dbaasRestartHere() {
    call('restart old');
  },
  async endServiceMove() {
    call('end move');
  },
  async dbaasDiscard() {
    call('discard');
  },
  async dbaasSwitchHost() {
    call('switch');
  },
  async dbaasDestroyHere() {
    call('destroy old');
  },
  async dbaasDropTransfer() {
    call('drop transfer');
  },
  async testCall(name: string) {
    call(name);
    if (current().script.failing?.includes(name)) throw new BackendRefusedError('test', `${name} was refused`, 'refused_here');
    return `${name}-id`;
  },
});

beforeAll(async () => {
  env = await createTimeSkippingEnv();
  worker = await Worker.create({ connection: env.nativeConnection, taskQueue, workflowBundle: workflowBundle(), activities: stubs });
  // The agent of host `hx`: the same stubs, on that host's own queue.
  hostWorker = await Worker.create({ connection: env.nativeConnection, taskQueue: hostQueue('hx'), workflowBundle: workflowBundle(), activities: stubs });
  running = Promise.all([worker.run(), hostWorker.run()]).then(() => undefined);
});
afterAll(async () => {
  worker?.shutdown();
  hostWorker?.shutdown();
  await running;
  await env?.teardown();
});

/** Starts `workflow` as operation `op_<uuid>` with the stubs answering as `script` says. */
async function start(workflow: string, input: Record<string, unknown>, script: Script = {}): Promise<WorkflowHandle> {
  const operationId = `op_${randomUUID()}`;
  scripts.set(operationId, script);
  return env.client.workflow.start(workflow, { workflowId: operationId, taskQueue, args: [{ operationId, ...input }] });
}
async function run(workflow: string, input: Record<string, unknown>, script: Script = {}): Promise<Trace> {
  const handle = await start(workflow, input, script);
  await handle.result();
  return traces.get(handle.workflowId)!;
}
const last = (trace: Trace) => trace.transitions[trace.transitions.length - 1];

describe('vps.power on stubs', () => {
  it('reboots: stop, wait until stopped, progress 50, start; succeeds running', async () => {
    const trace = await run('vpsPowerWorkflow', { serviceId: 1, vmid: 101, action: 'reboot' });
    expect(trace.calls).toEqual(['issue stop', 'await UPID:stop', 'state stopped', 'issue start', 'await UPID:start', 'state running']);
    expect(trace.transitions).toEqual([
      { status: 'running', progress: 0, result: { action: 'reboot', state: null } },
      { progress: 50, result: { action: 'reboot', state: 'stopped' } },
      { status: 'succeeded', progress: 100, result: { action: 'reboot', state: 'running' }, error: null },
    ]);
  });

  it('attributes a failed task to the step it happened in (start, after a stop that worked)', async () => {
    const trace = await run(
      'vpsPowerWorkflow',
      { serviceId: 1, vmid: 101, action: 'reboot' },
      { taskStatus: { start: { status: 'error', error: 'disk locked' } } },
    );
    expect(trace.calls).toEqual(['issue stop', 'await UPID:stop', 'state stopped', 'issue start', 'await UPID:start']);
    expect(last(trace)).toEqual({
      status: 'failed',
      error: { code: 'upstream_error', step: 'start', message: 'the start task failed: disk locked' },
      result: { action: 'reboot', state: 'stopped' },
    });
  });

  it('stops with one step, progress from 0 straight to 100', async () => {
    const trace = await run('vpsPowerWorkflow', { serviceId: 1, vmid: 101, action: 'stop' });
    expect(trace.calls).toEqual(['issue stop', 'await UPID:stop', 'state stopped']);
    expect(trace.transitions.map((t) => t.progress)).toEqual([0, 100]);
  });
});

describe('a database instance’s move on stubs', () => {
  it('lists and copies on the old host, builds on the new one, switches, then destroys the old copy', async () => {
    const trace = await run('dbaasMoveWorkflow', { serviceId: 1, to: 'hx' });
    expect(trace.calls).toEqual(['list @host-hx', 'export @host-hx', 'import @host-hx', 'switch', 'drop transfer', 'destroy old @host-hx']);
  });

  it('an import that fails ends the move, starts the instance again where it was, and leaves nothing on the new host', async () => {
    const handle = await start('dbaasMoveWorkflow', { serviceId: 1, to: 'hx' }, { importFails: true });
    await expect(handle.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    expect(traces.get(handle.workflowId)!.calls).toEqual([
      'list @host-hx',
      'export @host-hx',
      'import @host-hx',
      'end move',
      'restart old @host-hx',
      'drop transfer',
      'discard @host-hx',
    ]);
  });
});

describe('dbaas.backup on stubs', () => {
  it('runs the dump on the instance’s host queue; while that host is down it says so in result.waiting, then clears it', async () => {
    const trace = await run('dbaasBackupWorkflow', { serviceId: 1, instance: 'pg-1' }, { host: { name: 'hx', down: true } });
    expect(trace.calls).toEqual(['ask hx', 'start backup backup @host-hx', 'ask hx', 'await backup bk_1 @host-hx']);
    const waiting = { reason: 'host_down', host: 'hx', message: expect.stringMatching(/^The server of this resource is on host hx/) };
    expect(trace.transitions.slice(0, 3)).toEqual([
      { status: 'running', progress: 0, result: { backup_id: null } },
      { result: { backup_id: null, waiting } },
      { result: { backup_id: null } },
    ]);
    expect(last(trace)).toMatchObject({ status: 'succeeded', result: { backup_id: 'bk_1', size_bytes: 4096 } });
  });

  it('records the backup id at 20 %, then succeeds with its size', async () => {
    const trace = await run('dbaasBackupWorkflow', { serviceId: 1, instance: 'pg-1' });
    expect(trace.calls).toEqual(['start backup backup', 'await backup bk_1']);
    expect(trace.transitions).toEqual([
      { status: 'running', progress: 0, result: { backup_id: null } },
      { progress: 20, result: { backup_id: 'bk_1' } },
      { status: 'succeeded', progress: 100, result: { backup_id: 'bk_1', size_bytes: 4096, created_at: '2025-01-01T00:00:00.000Z' }, error: null },
    ]);
  });

  it("fails at step backup with the backend's own words and code when it refuses", async () => {
    const backupError = new BackendRefusedError('dbaas', 'Another backup of this instance is running.', 'backup_running');
    const trace = await run('dbaasBackupWorkflow', { serviceId: 1, instance: 'pg-1' }, { backupError });
    expect(last(trace)).toMatchObject({
      status: 'failed',
      error: {
        code: 'upstream_error',
        step: 'backup',
        backend_code: 'backup_running',
        message: 'The database instance did not complete this step: Another backup of this instance is running.',
      },
    });
  });

  it('gives up on a backend that does not answer after its bounded retries (time skipped), naming no internal text', async () => {
    const backupError = new BackendUnavailableError('dbaas', 'connect ECONNREFUSED 10.0.0.5:5432');
    const trace = await run('dbaasBackupWorkflow', { serviceId: 1, instance: 'pg-1' }, { backupError });
    // `calls` are retried a bounded number of times (workflows/kit/proxies.ts).
    expect(trace.calls).toEqual(Array(10).fill('start backup backup'));
    expect(last(trace).error).toEqual({
      code: 'upstream_error',
      step: 'backup',
      backend_code: 'unavailable',
      message: 'The database instance did not answer; this step was not completed.',
    });
  });
});

describe('compensation in the kit (run.step with compensate, run.compensate)', () => {
  it('runs every step and no compensation when nothing fails', async () => {
    const trace = await run('testSagaWorkflow', {});
    expect(trace.calls).toEqual(['create', 'reserve', 'attach', 'finish', 'cleanup']);
    expect(trace.transitions.map((t) => [t.status, t.progress])).toEqual([
      ['running', 0],
      [undefined, 20],
      [undefined, 40],
      [undefined, 80],
      ['succeeded', 100],
    ]);
    expect(last(trace).result).toEqual({ created: 'create-id' });
  });

  it('undoes the steps before a failed one, last first, then cleans up and fails at that step', async () => {
    const trace = await run('testSagaWorkflow', {}, { failing: ['finish'] });
    expect(trace.calls).toEqual(['create', 'reserve', 'attach', 'finish', 'undo attach', 'release', 'undo create create-id', 'cleanup']);
    expect(last(trace)).toMatchObject({ status: 'failed', error: { code: 'upstream_error', step: 'finish', backend_code: 'refused_here' } });
  });

  it('runs an undo registered before its action when that action fails, and only the undos registered so far', async () => {
    const trace = await run('testSagaWorkflow', {}, { failing: ['reserve'] });
    expect(trace.calls).toEqual(['create', 'reserve', 'release', 'undo create create-id', 'cleanup']);
    expect(last(trace)).toMatchObject({ status: 'failed', error: { step: 'reserve' } });
  });

  it('goes on with the other undos when one fails, and keeps the failed step as the error', async () => {
    const trace = await run('testSagaWorkflow', {}, { failing: ['finish', 'release'] });
    expect(trace.calls).toEqual(['create', 'reserve', 'attach', 'finish', 'undo attach', 'release', 'undo create create-id', 'cleanup']);
    expect(last(trace)).toMatchObject({ status: 'failed', error: { step: 'finish', message: expect.stringContaining('finish was refused') } });
  });

  it('undoes, cleans up and records interrupted when the workflow is cancelled mid-run; the run ends cancelled', async () => {
    const handle = await start('testSagaWorkflow', { holdMs: 3_600_000 });
    // Holding in `finish` (its progress is recorded as it starts).
    await expect.poll(() => traces.get(handle.workflowId)?.transitions.at(-1)?.progress, { timeout: 10_000 }).toBe(80);
    await handle.cancel();
    const outcome = await handle.result().catch((err: unknown) => err);
    expect(outcome).toBeInstanceOf(WorkflowFailedError);
    expect((outcome as WorkflowFailedError).cause).toBeInstanceOf(CancelledFailure);
    const trace = traces.get(handle.workflowId)!;
    expect(trace.calls).toEqual(['create', 'reserve', 'attach', 'undo attach', 'release', 'undo create create-id', 'cleanup']);
    expect(last(trace)).toMatchObject({ status: 'failed', error: { code: 'interrupted', message: expect.stringMatching(/cancelled/) } });
  });
});
