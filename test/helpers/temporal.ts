import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { msToTs } from '@temporalio/common/lib/time';
import { temporal as proto } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Runtime, DefaultLogger } from '@temporalio/worker';
import { inject } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../../infra/temporal';
import { devServerArgs, freePort, portOpen, until, untilTemporalAnswers } from './processes';

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
 * This worker's Temporal dev server (the real server, SQLite in memory, from the CLI in .tools/):
 * started by the first stack that needs one and shared by every later file of the worker (vitest
 * runs a worker's files one after another in one process), stopped when the worker's process exits,
 * or by the run's teardown if that process was killed (its pid is in the run's directory).
 */
let devServer: Promise<string> | null = null;

function sharedDevServer(): Promise<string> {
  devServer ??= startDevServer().catch((err: unknown) => {
    devServer = null;
    throw err;
  });
  return devServer;
}

async function startDevServer(): Promise<string> {
  const [port, httpPort, metricsPort] = [await freePort(), await freePort(), await freePort()];
  const child = spawn(TEMPORAL_CLI, devServerArgs({ port, httpPort, metricsPort }), {
    env: { ...process.env, TEMPORAL_VERSION_CHECK_DISABLED: '1' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const pidFile = path.join(inject('testRunDir'), `temporal-${process.pid}.pid`);
  writeFileSync(pidFile, String(child.pid));
  process.once('exit', () => {
    child.kill('SIGKILL');
    rmSync(pidFile, { force: true });
  });
  let exited = false;
  child.once('exit', () => (exited = true));
  await until('the Temporal dev server', async () => {
    if (exited) throw new Error(`the Temporal dev server exited (port ${port})`);
    return portOpen(port);
  });
  await untilTemporalAnswers(`127.0.0.1:${port}`);
  return `127.0.0.1:${port}`;
}

/**
 * A Temporal environment of its own for one stack: a fresh namespace on the worker's shared dev
 * server, so that no file sees another's workflows, with the control plane's search attributes
 * (a dev server registers those of `--search-attribute` for the `default` namespace only). Its
 * teardown closes the connections; the server stays for the next file. Without the CLI in .tools/,
 * a server of its own from the SDK's download (which cannot work on an offline machine).
 */
export async function createDevServerEnv(): Promise<TestWorkflowEnvironment> {
  quietRuntime();
  if (!existsSync(TEMPORAL_CLI)) {
    return TestWorkflowEnvironment.createLocal({
      server: {
        ip: '127.0.0.1',
        searchAttributes: Object.values(SEARCH_ATTRIBUTES),
        log: { format: 'pretty', level: 'error' },
        extraArgs: ['--dynamic-config-value', 'frontend.enableUpdateWorkflowExecution=true'],
      },
    });
  }
  const namespace = `test-${randomBytes(6).toString('hex')}`;
  const env = await TestWorkflowEnvironment.createFromExistingServer({ address: await sharedDevServer(), namespace });
  await env.connection.workflowService.registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('1 day') });
  await env.connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(
      Object.values(SEARCH_ATTRIBUTES).map((key) => [key.name, proto.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD]),
    ),
  });
  return env;
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
