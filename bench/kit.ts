import childProcess, { type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { SEARCH_ATTRIBUTES } from '../infra/temporal';

/** What the benchmarks share to print a run: the load average, the time, a target's verdict. */

/** The 1-, 5- and 15-minute load averages, as `0.42 0.61 0.70`. */
export const load = () =>
  os
    .loadavg()
    .map((n) => n.toFixed(2))
    .join(' ');
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Milliseconds, monotonic. */
export const now = () => performance.now();
export const verdict = (ok: boolean) => (ok ? 'PASS' : 'FAIL');

/**
 * Watches every child process started through child_process.spawn and execFile from now on (the
 * providers call them through the module object at call time; execFile's own spawn inside Node is
 * not the exported one, so nothing is counted twice): `onStart` is told of each one's file and
 * arguments, and the function it returns, if any, is called with the milliseconds it ran once it closes.
 */
export function recordChildProcesses(onStart: (file: string, args: readonly string[]) => ((ms: number) => void) | undefined): void {
  const cp = childProcess as unknown as Record<string, (...a: unknown[]) => ChildProcess>;
  const origSpawn = cp.spawn;
  const origExecFile = cp.execFile;
  const track = (child: ChildProcess, file: unknown, args: unknown) => {
    if (typeof file !== 'string') return;
    const started = now();
    const done = onStart(file, Array.isArray(args) ? (args as string[]) : []);
    if (done) child.once('close', () => done(now() - started));
  };
  cp.spawn = function (this: unknown, ...a: unknown[]) {
    const child = origSpawn.apply(this, a);
    track(child, a[0], a[1]);
    return child;
  };
  cp.execFile = function (this: unknown, ...a: unknown[]) {
    const child = origExecFile.apply(this, a);
    track(child, a[0], a[1]);
    return child;
  };
}

const TEMPORAL_CLI = path.resolve(__dirname, '..', '.tools/venv/bin/temporal');

/**
 * A Temporal dev server of the bench's own, from the CLI in .tools/ (scripts/ensure-tools.sh), on
 * loopback with the control plane's search attributes; in memory, or on `dbFilename`.
 */
export function localTemporal(options: { dbFilename?: string } = {}): Promise<TestWorkflowEnvironment> {
  if (!existsSync(TEMPORAL_CLI)) throw new Error(`${TEMPORAL_CLI} is missing: run bash scripts/ensure-tools.sh`);
  return TestWorkflowEnvironment.createLocal({
    server: {
      executable: { type: 'existing-path', path: TEMPORAL_CLI },
      ip: '127.0.0.1',
      searchAttributes: Object.values(SEARCH_ATTRIBUTES),
      log: { format: 'pretty', level: 'error' },
      ...(options.dbFilename ? { dbFilename: options.dbFilename } : {}),
    },
  });
}
