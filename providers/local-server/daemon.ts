/**
 * The start of a one-per-data-directory daemon (Redis, SeaweedFS, Haraka, PowerDNS): re-use the one
 * running, else start it once however many processes of the host ask at the same moment, then wait
 * until it serves. The managers keep what is theirs (settings, files, how to tell it answers); the
 * order of the steps and the error a failed start gives are the same for every one of them.
 */
import path from 'node:path';
import { tailLines } from './logs';
import { daemonEnded, waitFor, withFileLock } from './process';

export interface AdoptOrStartSteps<T, P> {
  /** Holds `start.lock`, which every process of the host starting this daemon takes. */
  dataDir: string;
  /** The running daemon when there is one that answers (its manager's `find`), else null. */
  find: () => Promise<T | null>;
  /**
   * What a start needs before the lock (the binary, options checked, the data directory made):
   * only when none runs, so a running daemon's directory is left as it is.
   */
  prepare?: () => Promise<P>;
  /** Stops whatever still runs from the directory without answering (through its pidfile). */
  stop: () => Promise<void>;
  /** Starts it (given what `prepare` returned) and resolves once it is ready. */
  launch: (prepared: P) => Promise<T>;
}

/**
 * The data directory's daemon, ready: the running one, else started once under `<dataDir>/start.lock`.
 * Two processes asking at the same moment (the API and the worker) must not both start one: the one
 * that gets the lock second finds the first one's daemon and adopts it. A leftover that holds the
 * pidfile but does not answer gives way first: it could hold the ports the new one needs.
 */
export async function adoptOrStart<T, P = void>(steps: AdoptOrStartSteps<T, P>): Promise<T> {
  const running = await steps.find();
  if (running) return running;
  const prepared = (await steps.prepare?.()) as P;
  return withFileLock(path.join(steps.dataDir, 'start.lock'), async () => {
    const won = await steps.find();
    if (won) return won;
    await steps.stop();
    return steps.launch(prepared);
  });
}

export interface DaemonReadiness {
  /** The server's name in the error: "<what> did not start (...)". */
  what: string;
  /** The daemon just started, and how to recognise it (its pid may be reused by another program once it exits). */
  pid: number;
  isOurs: (args: string[]) => boolean;
  /** Whether it serves yet (logs in, greets, its API answers): polled until it does, it exits or the time is up. */
  answers: () => Promise<boolean>;
  /** Default 30 s: a first start also creates its stores. */
  timeoutMs?: number;
  /** Default 100 ms; shorter where a start is quick and callers wait on it. */
  intervalMs?: number;
  /** Its output, whose last `logLines` lines (default 15) the error carries: the reason it exited or hangs is there. */
  logFile: string;
  logLines?: number;
  /** How the error words a timeout, `<timeoutWording> within <timeoutMs> ms` (default "not ready"). */
  timeoutWording?: 'not ready' | 'no answer';
  /** Whether the error names the log file before its lines, "; the end of <logFile>:" (default true). */
  namesLogFile?: boolean;
  /** Stops it after a failed start, so that the next start does not find a half-started one. */
  stop: () => Promise<void>;
}

/**
 * Waits until a daemon just started answers; ends as soon as it exits (a port taken, a bad
 * configuration) instead of waiting the whole timeout for that. On failure it is stopped and the
 * Error carries the end of its log, which is where the reason is.
 */
export async function awaitDaemonReady(daemon: DaemonReadiness): Promise<void> {
  const { timeoutMs = 30_000, intervalMs = 100, logLines = 15, timeoutWording = 'not ready', namesLogFile = true } = daemon;
  let ended: string | null = null;
  const ready = await waitFor(
    async () => {
      ended = await daemonEnded(daemon.pid, daemon.isOurs);
      return ended !== null || (await daemon.answers());
    },
    timeoutMs,
    intervalMs,
  );
  if (ready && ended === null) return;
  const tail = await tailLines(daemon.logFile, (lines) => lines.length >= logLines).then(
    (t) => t.lines.slice(-logLines),
    () => [] as string[],
  );
  await daemon.stop();
  const reason = ended ?? `${timeoutWording} within ${timeoutMs} ms`;
  const where = namesLogFile ? `; the end of ${daemon.logFile}:` : ':';
  throw new Error(`${daemon.what} did not start (${reason})${where}\n${tail.join('\n')}`);
}
