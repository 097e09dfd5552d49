import { Context } from '@temporalio/activity';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from './helpers/stack';
import { storedOperation, waitFor } from './orders.support';
import { createSite, siteApi, type TestSite } from './wordpress.support';

/**
 * How a recipe apply's step ends when it does not complete. Either way `error.step` is `plugins`
 * and the steps after it are `not_run`.
 * - A `plugins` step that keeps failing with something other than a refusal is tried 5 times and
 *   ends `failed` with the step's code, `recipe_step_failed`, long before the progress deadline,
 *   with a message written for customers (never the error's own text). On the time-skipping test
 *   server with the production durations (RECIPE_PROGRESS_TIMEOUT 15 minutes).
 * - A `plugins` step that hangs (its activity heartbeats and never finishes) is stopped by the
 *   progress deadline: `failed` with `interrupted`, not before, and not retried. On the dev server
 *   in real time with a deadline of 25 s (above the steps' 20 s heartbeat timeout, so the heartbeat
 *   is what keeps the attempt alive): the time-skipping server does not skip time while an
 *   activity is running (it locks time skipping for as long as an activity is in flight; a
 *   `sleep(14 minutes)` over a running activity never returns), so the production 15 minutes cannot
 *   be reached there with an activity that hangs.
 */
/** Internal text that must never reach the customer. */
const RAW = 'helper plugin.install: failed: PHP error in /srv/wordpress/sites/svc_1/public/wp-settings.php';

const STEPS_AFTER_PLUGINS = [
  'checksums:skipped',
  'backup:skipped',
  'plugins:failed',
  'constants:not_run',
  'options:not_run',
  'roles:not_run',
  'secrets:not_run',
  'verify:not_run',
  'register:not_run',
];

async function startApply(stack: Stack, site: TestSite, name: string): Promise<string> {
  const api = siteApi(stack);
  const manifest = { apiVersion: 'recipe/v1', name, version: '1.0.0', plugins: [{ slug: 'cloud-hello', version: '1.1.0' }] };
  expect((await api.post('/v1/wordpress/recipes', manifest)).status).toBe(201);
  const started = await api.post(`/v1/wordpress/${site.id}/recipes/apply`, { name, skip_backup: true });
  expect(started.status, started.text).toBe(202);
  return started.body.id as string;
}

const stepsOf = (op: { result: { steps: Array<{ name: string; status: string }> } }) => op.result.steps.map((s) => `${s.name}:${s.status}`);

describe('a recipe apply whose step keeps failing', () => {
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
          throw new Error(RAW);
        },
      },
    });
    site = await createSite(stack);
  }, 120_000);
  afterAll(() => stack?.close());

  it('ends recipe_step_failed after 5 attempts, well before the deadline, with a message for customers', async () => {
    const opId = await startApply(stack, site, 'failing');
    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await handle.result();
    const run = await handle.describe();
    expect(run.closeTime!.getTime() - run.startTime.getTime()).toBeLessThan(5 * 60_000);
    expect(pluginCalls).toBe(5);
    const op = (await siteApi(stack).get(`/v1/operations/${opId}`)).body;
    expect(op).toMatchObject({
      status: 'failed',
      error: { code: 'recipe_step_failed', step: 'plugins', message: 'The site did not complete the plugins step.' },
    });
    expect(op.result.steps.find((s: { name: string }) => s.name === 'plugins')).toEqual({
      name: 'plugins',
      status: 'failed',
      detail: 'The site did not complete the plugins step.',
    });
    expect(stepsOf(op)).toEqual(STEPS_AFTER_PLUGINS);
    expect(JSON.stringify(op)).not.toContain('/srv/');
    expect(JSON.stringify(op)).not.toContain('PHP error');
  }, 120_000);
});

describe('a recipe apply whose step hangs', () => {
  const DEADLINE_MS = 25_000;
  let stack: Stack;
  let site: TestSite;
  let pluginCalls = 0;
  let cancelled = 0;

  beforeAll(async () => {
    stack = await startStack({
      temporal: 'dev',
      env: { SIM_DELAY_SCALE: '0', RECIPE_PROGRESS_TIMEOUT: `${DEADLINE_MS / 1000}s` },
      extraActivities: {
        // Hangs: heartbeats (so that the heartbeat timeout does not fire) until it is cancelled.
        wpApplyPlugins: async () => {
          pluginCalls++;
          const ctx = Context.current();
          const beat = setInterval(() => ctx.heartbeat(), 1_000);
          try {
            await ctx.cancelled;
          } catch (err) {
            cancelled++;
            throw err;
          } finally {
            clearInterval(beat);
          }
        },
      },
    });
    site = await createSite(stack);
  }, 120_000);
  afterAll(() => stack?.close());

  it('fails interrupted at its step once the progress deadline passes, not before; the attempt is cancelled, not retried', async () => {
    const opId = await startApply(stack, site, 'stuck');
    await waitFor(
      () => storedOperation(stack, opId),
      (op) => op.status === 'running' && op.progress > 0,
    );
    const handle = stack.temporal!.client.workflow.getHandle(opId);
    await handle.result();
    const run = await handle.describe();
    expect(run.closeTime!.getTime() - run.startTime.getTime()).toBeGreaterThanOrEqual(DEADLINE_MS);
    const op = (await siteApi(stack).get(`/v1/operations/${opId}`)).body;
    expect(op).toMatchObject({ status: 'failed', error: { code: 'interrupted', step: 'plugins' } });
    expect(stepsOf(op)).toEqual(STEPS_AFTER_PLUGINS);
    // One attempt, kept alive by its heartbeats past the 20 s heartbeat timeout, cancelled by the deadline.
    expect(pluginCalls).toBe(1);
    expect(
      await waitFor(
        async () => cancelled,
        (n) => n > 0,
      ),
    ).toBe(1);
  }, 120_000);
});
