import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';

/**
 * A benchmark's own file run again as a child process (`--child=<kind>`): a server or a load loop
 * in a process of its own, so that its CPU can be read apart and it does not share an event loop.
 * The child says `{type: 'ready', ...}` once it serves, stops on `{type: 'stop'}` or when its parent
 * goes, and answers messages (`ask`).
 */
export interface ChildMessage {
  type: string;
  [key: string]: unknown;
}

export interface Child {
  child: ChildProcess;
  ready: ChildMessage;
  stop(): Promise<void>;
}

const root = path.resolve(__dirname, '..');

/** Forks `file` with `args`, once it says it is ready; `stop()` asks it to go, then kills it after 10 s. */
export function startChild(file: string, args: string[], options: { env?: Record<string, string>; execArgv?: string[] } = {}): Promise<Child> {
  const child = fork(file, args, {
    cwd: root,
    env: { ...process.env, ...options.env },
    execArgv: [...(options.execArgv ?? []), '--import', 'tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.send({ type: 'stop' });
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  return new Promise((resolve, reject) => {
    const onExit = (code: number | null) => reject(new Error(`child ${args.join(' ')} exited (${code}) before it was ready`));
    child.once('exit', onExit);
    child.on('message', (m: ChildMessage) => {
      if (m.type !== 'ready') return;
      child.off('exit', onExit);
      resolve({ child, ready: m, stop });
    });
  });
}

/** Sends `message` to a child and resolves with its first message of type `answer`. */
export function ask(child: ChildProcess, message: ChildMessage, answer: string): Promise<ChildMessage> {
  return new Promise((resolve) => {
    const onMessage = (m: ChildMessage) => {
      if (m.type !== answer) return;
      child.off('message', onMessage);
      resolve(m);
    };
    child.on('message', onMessage);
    child.send(message);
  });
}

/** In a child: runs `stop` and exits when the parent says `stop` or goes away. */
export function exitWithParent(stop: () => Promise<void> = async () => undefined): void {
  process.on('disconnect', () => void stop().finally(() => process.exit(0)));
  process.on('message', (m: ChildMessage) => {
    if (m.type === 'stop') void stop().finally(() => process.exit(0));
  });
}

/**
 * Runs a benchmark's `main` and exits with its outcome; SIGINT or SIGTERM first runs `cleanUp` (what
 * the run started so far: processes, databases, directories) and exits 130.
 */
export function runMain(main: () => Promise<void>, cleanUp: () => Promise<void>): void {
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      console.error(`\n${signal}: cleaning up`);
      void cleanUp().finally(() => process.exit(130));
    });
  }
  main().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
