import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { temporal } from '@temporalio/proto';
import { seedOrders } from '../db/seeds/orders.seed';
import { patchIds, replay } from './helpers/replay';
import { startStack, type Stack } from './helpers/stack';
import { newCustomer, placeOrder, storedOperation, waitFor } from './orders.support';

/**
 * The activation timeout against a provisioner that keeps failing with something other than an
 * outage (a bug, a refusal), at production durations on the time-skipping test server: Temporal
 * retries the call without end, and the 30-minute timeout must still end the order. Before the
 * `order-activation-timeout-cuts-provisioning-calls` patch the timeout was looked at only between
 * calls, so this order stayed `running` for ever.
 */
let stack: Stack;
let provisioningCalls = 0;

beforeAll(async () => {
  stack = await startStack({
    temporal: 'time-skipping',
    env: { SIM_DELAY_SCALE: '0' },
    extraActivities: {
      startProvisioning: async () => {
        provisioningCalls++;
        throw new Error('the provisioner failed');
      },
    },
  });
  await seedOrders(stack.db);
});
afterAll(() => stack?.close());

describe('an order whose provisioner keeps failing', () => {
  it('fails with provisioning_timeout 30 minutes after it was accepted, cutting the call short', async () => {
    const c = await newCustomer(stack);
    const res = await placeOrder(stack, c, { product: 'dns-zone', options: { zone: 'failing.example' } });
    expect(res.status, res.text).toBe(202);
    const opId = res.body.id;
    await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.status === 'running',
    );
    const accepted = await stack.temporal!.currentTimeMs();

    await stack.temporal!.sleep(29 * 60_000);
    expect((await storedOperation(stack, opId)).status).toBe('running');
    expect(provisioningCalls).toBeGreaterThan(1);

    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await handle.result();
    const run = await handle.describe();
    expect(run.closeTime!.getTime() - run.startTime.getTime()).toBeGreaterThanOrEqual(30 * 60_000);
    expect(run.closeTime!.getTime() - accepted).toBeLessThan(31 * 60_000);
    const op = await stack.http.get(`/v1/operations/${opId}`, { token: c.token });
    expect(op.body).toMatchObject({ status: 'failed', error: { code: 'provisioning_timeout' } });

    // The call still retrying was cancelled, not waited for; and the run replays.
    const history = await handle.fetchHistory();
    const EventType = temporal.api.enums.v1.EventType;
    const cancelRequested = history.events!.filter((e) => e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED);
    expect(cancelRequested).toHaveLength(1);
    expect(patchIds(history)).toContain('order-activation-timeout-cuts-provisioning-calls');
    await expect(replay(history, opId)).resolves.toBeUndefined();
  });
});
