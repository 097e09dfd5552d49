import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { storedOperation, waitFor } from './orders.support';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * The recipe apply's progress deadline at its production duration (RECIPE_PROGRESS_TIMEOUT, 15
 * minutes) on the time-skipping test server: a `plugins` step that keeps failing with something
 * other than a refusal is retried by Temporal without end, and the apply must still end `failed`
 * with `interrupted` and `error.step` = `plugins`, the steps after it `not_run`.
 */
let stack: Stack;
let site: TestSite;
let pluginCalls = 0;

beforeAll(async () => {
  stack = await startStack({
    temporal: 'time-skipping',
    env: { SIM_DELAY_SCALE: '0' },
    extraActivities: {
      wpApplyPlugins: async () => {
        pluginCalls++;
        throw new Error('the site host keeps failing');
      },
    },
  });
  site = await createSite(stack);
}, 120_000);
afterAll(() => stack?.close());

describe('a recipe apply that makes no progress', () => {
  it('fails interrupted at its step after 15 minutes, not before', async () => {
    const api = siteApi(stack);
    const manifest = { apiVersion: 'recipe/v1', name: 'stuck', version: '1.0.0', plugins: [{ slug: 'cloud-hello', version: '1.1.0' }] };
    expect((await api.post('/v1/wordpress/recipes', manifest)).status).toBe(201);
    const started = await api.post(`/v1/wordpress/${site.id}/recipes/apply`, { name: 'stuck', skip_backup: true });
    expect(started.status, started.text).toBe(202);
    const opId = started.body.id as string;
    await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.status === 'running' && op.progress > 0,
    );

    await stack.temporal!.sleep(14 * 60_000);
    expect((await storedOperation(stack, opId)).status).toBe('running');
    expect(pluginCalls).toBeGreaterThan(1);

    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await handle.result();
    const run = await handle.describe();
    expect(run.closeTime!.getTime() - run.startTime.getTime()).toBeGreaterThanOrEqual(15 * 60_000);
    const op = (await api.get(`/v1/operations/${opId}`)).body;
    expect(op).toMatchObject({ status: 'failed', error: { code: 'interrupted', step: 'plugins' } });
    expect(op.result.steps.map((s: { name: string; status: string }) => `${s.name}:${s.status}`)).toEqual([
      'checksums:skipped',
      'backup:skipped',
      'plugins:failed',
      'constants:not_run',
      'options:not_run',
      'roles:not_run',
      'secrets:not_run',
      'verify:not_run',
      'register:not_run',
    ]);
  }, 120_000);
});
