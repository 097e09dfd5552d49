import { expect } from 'vitest';
import { attachVpsMachine } from '../domain/vps/store';
import type { MachineType } from '../providers/hypervisor.provider';
import { HypervisorSimulator } from '../providers/simulator/hypervisor.simulator';
import { createService } from './helpers/fixtures';
import type { Stack } from './helpers/stack';

/** Shared helpers of the test/vps.*.test.ts files. */

export interface TestVps {
  id: string;
  serviceId: number;
  vmid: number;
  node: string;
}

/** The hypervisor simulator the API uses (the worker has its own instance over the same tables). */
export function simulator(stack: Stack): HypervisorSimulator {
  const hv = stack.api.deps.providers.hypervisor;
  if (!(hv instanceof HypervisorSimulator)) throw new Error('the tests expect the hypervisor simulator');
  return hv;
}

/** A VPS service with a machine on the simulated hypervisor. */
export async function createVps(
  stack: Stack,
  opts: { type?: MachineType; accountId?: number; capabilities?: Record<string, boolean>; node?: string; hostname?: string } = {},
): Promise<TestVps> {
  const svc = await createService(stack.db, opts.accountId ?? stack.owner.accountId, { family: 'vps', capabilities: opts.capabilities });
  const row = await stack.db('services').where({ id: svc.serviceId }).first();
  const server = await attachVpsMachine(stack.db, simulator(stack), row, { type: opts.type ?? 'qemu', node: opts.node, hostname: opts.hostname });
  return { id: svc.id, serviceId: svc.serviceId, vmid: server.vmid, node: server.node! };
}

/** Polls an operation over HTTP until it is succeeded or failed. */
export async function waitForOperation(stack: Stack, id: string, timeoutMs = 30_000): Promise<any> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const res = await stack.http.get(`/v1/operations/${id}`, { token: stack.owner.key });
    expect(res.status, res.text).toBe(200);
    if (res.body.status === 'succeeded' || res.body.status === 'failed') return res.body;
    if (Date.now() > until) throw new Error(`operation ${id} still ${res.body.status} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function waitFor<T>(read: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 15_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > until) throw new Error(`condition not met within ${timeoutMs} ms: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Arms a failure of the machine's next task through the dev route (as a local user would). */
export async function failNextTask(stack: Stack, vps: TestVps, kind?: string): Promise<void> {
  const res = await stack.http.post(`/_dev/vps/${vps.id}/fail-next-task`, {
    body: { message: 'disk controller timeout (simulated)', ...(kind ? { kind } : {}) },
  });
  expect(res.status, res.text).toBe(200);
}

export async function setVpsBackend(stack: Stack, down: boolean): Promise<void> {
  const res = await stack.http.post('/_dev/backends/vps/outage', { body: { down } });
  expect(res.status, res.text).toBe(200);
  // Past the switchboard's 200 ms cache, so the worker's switchboard agrees.
  await new Promise((r) => setTimeout(r, 300));
}

/** Every payload of a workflow's history, decoded to text (inputs, results, activity arguments). */
export async function historyText(stack: Stack, workflowId: string): Promise<string> {
  const history = await stack.temporal!.client.workflow.getHandle(workflowId).fetchHistory();
  const texts: string[] = [];
  const visit = (value: unknown): void => {
    if (value instanceof Uint8Array) texts.push(Buffer.from(value).toString('utf8'));
    else if (Array.isArray(value)) value.forEach(visit);
    else if (value && typeof value === 'object') Object.values(value).forEach(visit);
    else if (typeof value === 'string') texts.push(value);
  };
  visit(history.events);
  return texts.join('\n');
}

/** The progress values a workflow recorded, in order (from its recordOperationTransition calls). */
export async function recordedProgress(stack: Stack, workflowId: string): Promise<Array<{ progress?: number; status?: string; result?: any }>> {
  const history = await stack.temporal!.client.workflow.getHandle(workflowId).fetchHistory();
  const out: Array<{ progress?: number; status?: string; result?: any }> = [];
  for (const event of history.events ?? []) {
    const scheduled = event.activityTaskScheduledEventAttributes;
    if (scheduled?.activityType?.name !== 'recordOperationTransition') continue;
    const payload = scheduled.input?.payloads?.[0]?.data;
    if (payload) out.push(JSON.parse(Buffer.from(payload).toString('utf8')));
  }
  return out;
}
