import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Runtime, DefaultLogger } from '@temporalio/worker';
import { inject } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../../domain/temporal';

const root = path.resolve(__dirname, '../..');
const TEMPORAL_CLI = path.join(root, '.tools/venv/bin/temporal');
const TEST_SERVER = path.join(root, '.tools/venv/bin/temporal-test-server');

let runtimeInstalled = false;
/** Keeps the SDK's own logging to warnings, so test output stays readable. */
function quietRuntime() {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  try {
    Runtime.install({ logger: new DefaultLogger('WARN') });
  } catch {
    // already installed in this process
  }
}

/**
 * The Temporal dev server (the real server, SQLite in memory) from the CLI in .tools/; if the binary
 * is missing, the SDK's own download is the fallback (it cannot work on an offline machine).
 */
export async function createDevServerEnv(): Promise<TestWorkflowEnvironment> {
  quietRuntime();
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: existsSync(TEMPORAL_CLI) ? { type: 'existing-path', path: TEMPORAL_CLI } : undefined,
      ip: '127.0.0.1',
      searchAttributes: Object.values(SEARCH_ATTRIBUTES),
      log: { format: 'pretty', level: 'error' },
      extraArgs: ['--dynamic-config-value', 'frontend.enableUpdateWorkflowExecution=true'],
    },
  });
}

/** The time-skipping test server: timers of hours pass in milliseconds while the workflow waits. */
export async function createTimeSkippingEnv(): Promise<TestWorkflowEnvironment> {
  quietRuntime();
  return TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: existsSync(TEST_SERVER) ? { type: 'existing-path', path: TEST_SERVER } : undefined },
  });
}

/** The workflow bundle built once per run by test/global-setup.ts. */
export function workflowBundle(): { code: string } {
  return { code: readFileSync(inject('workflowBundlePath'), 'utf8') };
}
