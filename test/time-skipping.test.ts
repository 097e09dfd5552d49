import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { advanceSignal } from './fixtures/test-operation.workflow';

/**
 * The time-skipping test server drives the same stack (API, worker, PostgreSQL): a workflow that
 * sleeps an hour finishes in moments, so later workflows can be tested at production durations.
 */
let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ temporal: 'time-skipping' });
});
afterAll(() => stack?.close());

describe('time-skipping environment', () => {
  it('runs an operation whose workflow sleeps one hour, and records it in PostgreSQL', async () => {
    const principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
    const before = await stack.temporal!.currentTimeMs();
    const op = await stack.api.deps.operations.start({
      principal,
      type: 'test.operation' as never,
      workflow: 'testOperationWorkflow' as never,
      input: { holdMs: 3_600_000 } as never,
    });
    const handle = stack.temporal!.client.workflow.getHandle(op.id);
    await handle.signal(advanceSignal, { finish: 'succeed' });
    await handle.result();
    expect((await stack.temporal!.currentTimeMs()) - before).toBeGreaterThanOrEqual(3_600_000);
    const res = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
    expect(res.body).toMatchObject({ status: 'succeeded', result: { answer: 42 } });
  });

  it('keeps production durations in the configuration (no shortening)', () => {
    expect(stack.config.ORDER_ACTIVATION_TIMEOUT).toBe(30 * 60_000);
    expect(stack.config.WEBHOOK_RETRY_DELAYS).toEqual([30_000, 120_000, 600_000, 3_600_000, 21_600_000]);
  });
});
