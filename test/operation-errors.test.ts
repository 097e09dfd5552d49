import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withBackendErrors } from '../activities/backend-errors';
import type { Principal } from '../domain/principal';
import { BackendGoneError, BackendRefusedError, BackendUnavailableError } from '../providers/errors';
import { startStack, type Stack } from './helpers/stack';

/**
 * A failed operation's public error carries a message written for customers and the backend's
 * stable code, never internal text (SQL, stacks, provider internals); that text goes to the log.
 * A test-only workflow on the kit (test/fixtures/test-steps.workflow.ts) fails its step as told.
 */
const INTERNAL =
  'insert into "operations" ("id") values ($1) - duplicate key value violates unique constraint "operations_pkey"\n    at Client._handleErrorMessage (/app/node_modules/pg/lib/client.js:380:19)';

let stack: Stack;
let principal: Principal;
beforeAll(async () => {
  stack = await startStack({
    extraActivities: withBackendErrors({
      async testStep(kind: string) {
        if (kind === 'internal') throw new Error(INTERNAL);
        if (kind === 'type') throw new TypeError("Cannot read properties of undefined (reading 'vmid')");
        if (kind === 'refused') throw new BackendRefusedError('test', 'The template is not available on this node.', 'template_missing');
        if (kind === 'gone') throw new BackendGoneError('test', 'machine 101');
        if (kind === 'unavailable') throw new BackendUnavailableError('test', 'connect ECONNREFUSED 10.0.0.5:8006');
      },
    }),
  });
  principal = await stack.api.deps.credentials.authenticate(`Bearer ${stack.owner.key}`);
});
afterAll(() => stack?.close());

async function failedWith(kind: string) {
  const op = await stack.api.deps.operations.start({
    principal,
    type: 'test.steps' as never,
    workflow: 'testStepsWorkflow' as never,
    input: { kind } as never,
  });
  await stack.temporal!.client.workflow.getHandle(op.id).result();
  const res = await stack.http.get(`/v1/operations/${op.id}`, { token: stack.owner.key });
  expect(res.body.status).toBe('failed');
  return res.body.error;
}

describe('public operation errors', () => {
  it.each([
    ['internal', { code: 'upstream_error', step: 'the-step', message: 'The test backend did not complete this step.' }],
    ['type', { code: 'upstream_error', step: 'the-step', message: 'The test backend did not complete this step.' }],
    [
      'unavailable',
      { code: 'upstream_error', step: 'the-step', message: 'The test backend did not answer; this step was not completed.', backend_code: 'unavailable' },
    ],
    [
      'refused',
      {
        code: 'upstream_error',
        step: 'the-step',
        message: 'The test backend did not complete this step: The template is not available on this node.',
        backend_code: 'template_missing',
      },
    ],
    [
      'gone',
      {
        code: 'upstream_error',
        step: 'the-step',
        message: 'The test backend did not complete this step: The machine 101 is not on the test backend any more.',
        backend_code: 'gone',
      },
    ],
  ])('%s', async (kind, expected) => {
    const error = await failedWith(kind);
    expect(error).toEqual(expected);
    expect(JSON.stringify(error)).not.toMatch(/insert into|constraint|node_modules|ECONNREFUSED|10\.0\.0\.5|undefined|at .*:\d+:\d+/);
  });
});
