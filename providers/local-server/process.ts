import { once } from 'node:events';
/**
 * Processes of local servers: commands run to completion or started detached, liveness by pidfile
 * (guarded against a reused pid), stopping by pid, waiting, and a lock file shared by the processes
 * that manage the same server (the API and the worker). Nothing here ever receives a password:
 * secrets go to the servers over their sockets.
 */
import { spawn } from 'node:child_process';
import { chmodSync, constants as fsConstants, mkdirSync, promises as fs, readFileSync, realpathSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { OsAccount } from '../os-accounts';
import { openTenantFile, readTenantFile } from './tenant-files';

export const runningAsRoot = (): boolean => process.getuid?.() === 0;

export interface RunOptions {
  /** The account to run as (only when this process is root; otherwise it runs as this process). */
  as?: OsAccount;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs?: number;
  /**
   * In its own session: whatever it leaves running (pg_ctl's postmaster) is not in this process's
   * group, so a Ctrl-C on the API or worker does not reach it.
   */
  detached?: boolean;
  /** What the command reads on standard input (a dump to restore), streamed; none: stdin is closed. */
  input?: AsyncIterable<Buffer>;
}

/** A command that exited non-zero; `detail` is the end of its output (never holds a secret: none is passed). */
export class CommandError extends Error {
  constructor(
    readonly command: string,
    readonly exitCode: number | null,
    readonly detail: string,
  ) {
    super(`${command} failed (${exitCode ?? 'killed'}): ${detail}`);
    this.name = 'CommandError';
  }
}

const asIds = (as?: OsAccount) => (as && runningAsRoot() && as.uid !== 0 ? { uid: as.uid, gid: as.gid } : {});
const MAX_OUTPUT = 16 * 1024 * 1024;

/** Runs a command to completion; rejects with CommandError on a non-zero exit. */
export function run(command: string, args: string[], opts: RunOptions = {}): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...asIds(opts.as),
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      detached: opts.detached ?? false,
      stdio: [opts.input ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
    if (opts.input && child.stdin) {
      const stdin = child.stdin;
      const input = opts.input;
      stdin.on('error', () => undefined); // a command that exits early closes its end: its exit code says why
      void (async () => {
        for await (const chunk of input) if (!stdin.write(chunk)) await once(stdin, 'drain');
        stdin.end();
      })().catch(() => child.kill('SIGKILL'));
    }
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_OUTPUT) into.push(chunk);
    };
    child.stdout!.on('data', collect(out));
    child.stderr!.on('data', collect(err));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.once('error', (e) => {
      clearTimeout(timer);
      reject(new CommandError(path.basename(command), null, e.message));
    });
    child.once('close', (code) => {
      clearTimeout(timer);
      const stdout = Buffer.concat(out).toString('utf8');
      const stderr = Buffer.concat(err).toString('utf8');
      if (code === 0) return resolve({ stdout, stderr });
      const detail = `${stderr}\n${stdout}`.trim().split('\n').slice(-6).join(' | ');
      reject(new CommandError(path.basename(command), code, detail || 'no output'));
    });
  });
}

/**
 * Runs a command and yields its standard output as it comes (a tar of a directory); after the last
 * chunk, throws CommandError if it exited non-zero. Stopping the iteration early kills it.
 */
export async function* streamOutput(command: string, args: string[], opts: RunOptions = {}): AsyncIterable<Buffer> {
  const child = spawn(command, args, { ...asIds(opts.as), env: opts.env ?? process.env, cwd: opts.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  const err: Buffer[] = [];
  child.stderr!.on('data', (chunk: Buffer) => err.length < 64 && err.push(chunk));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.once('error', (e) => reject(new CommandError(path.basename(command), null, e.message)));
    child.once('close', resolve);
  });
  exited.catch(() => undefined); // awaited below; a spawn that fails before then must not go unhandled
  let finished = false;
  try {
    for await (const chunk of child.stdout!) yield chunk as Buffer;
    const code = await exited;
    finished = true;
    if (code !== 0)
      throw new CommandError(path.basename(command), code, Buffer.concat(err).toString('utf8').trim().split('\n').slice(-4).join(' | ') || 'no output');
  } finally {
    if (!finished) child.kill('SIGKILL');
  }
}

/**
 * Starts a command in its own session, detached from this process: it outlives the API or worker
 * (and a Ctrl-C sent to their process group). Output goes to `outputFile` when given.
 */
export async function spawnDetached(command: string, args: string[], opts: RunOptions & { outputFile?: string } = {}): Promise<number> {
  // The output file is in a directory the server's account writes: a link planted there must not
  // make root open (and hand the server) another file.
  const out = opts.outputFile ? await openTenantFile(opts.outputFile, 'append') : null;
  try {
    const child = spawn(command, args, {
      ...asIds(opts.as),
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      detached: true,
      stdio: ['ignore', out ? out.fd : 'ignore', out ? out.fd : 'ignore'],
    });
    const pid = await new Promise<number>((resolve, reject) => {
      child.once('error', reject);
      child.once('spawn', () => resolve(child.pid as number));
    });
    spawnedExits.delete(pid);
    startedHere.add(pid);
    child.once('exit', (code, signal) => spawnedExits.set(pid, signal ? `it was killed by ${signal}` : `it exited with code ${code}`));
    child.unref();
    return pid;
  } finally {
    await out?.close();
  }
}

/**
 * `command args` to run in a mount namespace of its own whose `/tmp` is `tmpDir`, as `account`
 * (dropped after the mounts, by setpriv, groups cleared as spawnDetached's `as` does): for a server
 * that puts fixed names in /tmp, which any other account of the machine could hold first or plant
 * (SeaweedFS's gRPC sockets, /tmp/seaweedfs-master-grpc-<port>.sock, which its own parts dial when
 * the file exists). `keep`, a directory of the server's under /tmp (its data directory in tests),
 * stays visible at its own path (bound again inside the new /tmp). unshare, sh and setpriv each
 * exec the next, so the pid spawnDetached returns is the server's. Root only.
 *
 * `tmpDir` is made again at every call, root's, 1777 like /tmp (reached only through its parent,
 * which must be closed to others): nothing the account left there is reused, and the directories
 * the mounts go on are root's, made now.
 */
export function inPrivateTmp(
  command: string,
  args: string[],
  options: { tmpDir: string; keep?: string; account: Pick<OsAccount, 'uid' | 'gid'> },
): { command: string; args: string[] } {
  const { tmpDir, account } = options;
  rmSync(tmpDir, { recursive: true, force: true });
  mkdirSync(tmpDir, { mode: 0o700 });
  chmodSync(tmpDir, 0o1777);
  const keep = options.keep ? realpathSync(options.keep) : '';
  const inTmp = keep.startsWith('/tmp/') ? path.join(tmpDir, keep.slice('/tmp/'.length)) : '';
  if (inTmp) mkdirSync(inTmp, { recursive: true, mode: 0o755 });
  const script = [
    'd=$1; keep=$2; at=$3; u=$4; g=$5; shift 5',
    'if [ -n "$at" ]; then mount --bind "$keep" "$at" && mount --rbind "$d" /tmp || exit 1; else mount --bind "$d" /tmp || exit 1; fi',
    'exec setpriv --reuid="$u" --regid="$g" --clear-groups -- "$@"',
  ].join('\n');
  return {
    command: 'unshare',
    args: [
      '--mount',
      '--propagation',
      'private',
      '--',
      '/bin/sh',
      '-c',
      script,
      'private-tmp',
      tmpDir,
      keep,
      inTmp,
      String(account.uid),
      String(account.gid),
      command,
      ...args,
    ],
  };
}

/** Pids `spawnDetached` started in this process, and how those that ended did ("it exited with code 1"). */
const startedHere = new Set<number>();
const spawnedExits = new Map<number, string>();

/**
 * Whether the daemon `spawnDetached` just started (`pid`) has ended, and how: "it exited with code
 * 1", "it was killed by SIGKILL"; null while it runs. For a process started here the child's own
 * exit is the truth (a look at /proc right after the start could miss it, or mistake it); for one
 * found through a pidfile, it is gone when no live process of that pid is the server (`matches`).
 */
export async function daemonEnded(pid: number, matches: string | ((args: string[]) => boolean)): Promise<string | null> {
  if (startedHere.has(pid)) return spawnedExits.get(pid) ?? null;
  return (await processAlive(pid, matches)) ? null : 'it exited';
}

/** Whether a process `pid` exists (someone else's counts: EPERM). */
export function processExists(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Whether `pid` is a live process whose command line passes `matches` (a string it contains, or a
 * test of its arguments): a pidfile's pid may have been reused by another program since. A zombie
 * (exited, not reaped yet) is not alive.
 */
export async function processAlive(pid: number, matches: string | ((args: string[]) => boolean), opts: { uid?: number } = {}): Promise<boolean> {
  if (!processExists(pid)) return false;
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    if (state === 'Z' || state === 'X') return false;
    // A pidfile the server's account can write may name another tenant's server: with `uid`, only
    // a process running as that account counts.
    if (opts.uid !== undefined && processUid(await fs.readFile(`/proc/${pid}/status`, 'utf8')) !== opts.uid) return false;
    const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8');
    return typeof matches === 'string' ? cmdline.replace(/\0/g, ' ').includes(matches) : matches(cmdline.split('\0'));
  } catch {
    return false;
  }
}

/** The real uid in a /proc/<pid>/status text. */
function processUid(status: string): number | null {
  const m = /^Uid:\s+(\d+)/m.exec(status);
  return m ? Number(m[1]) : null;
}

/**
 * The first line of a pidfile as a number, or null when there is none. Pidfiles live in directories
 * the server's account writes: read as a tenant file (no link, no FIFO, a few bytes at most).
 */
export async function readPidFile(file: string): Promise<number | null> {
  try {
    const pid = Number((await readTenantFile(file, 64)).split('\n')[0].trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

/** Polls `check` until it is true (true) or `timeoutMs` passed (false). */
export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, intervalMs = 100): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(intervalMs);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Stops the server process `pid` (still the one `matches` recognises): SIGTERM, then SIGKILL after
 * `graceMs`. Resolves once it has really exited; a pid that is not (or no longer) the server is left
 * alone. "Really": a dying process loses its command line (so no longer looks like the server)
 * before it closes its sockets, and its main thread turns zombie while other threads still hold
 * them, so a start on the same ports or control socket right after would find them taken.
 */
export async function stopProcess(pid: number, matches: string | ((args: string[]) => boolean), graceMs = 5_000, opts: { uid?: number } = {}): Promise<void> {
  const alive = () => processAlive(pid, matches, opts);
  if (!(await alive())) return;
  process.kill(pid, 'SIGTERM');
  if (!(await waitFor(async () => !(await alive()), graceMs, 20))) {
    if (await alive()) process.kill(pid, 'SIGKILL');
    await waitFor(async () => !(await alive()), 10_000, 20);
  }
  await waitFor(() => exitedFully(pid, matches), 5_000, 20);
}

/** Whether `pid` has exited with every thread of it (a zombie not reaped yet counts), or is now another program (its pid reused). */
async function exitedFully(pid: number, matches: string | ((args: string[]) => boolean)): Promise<boolean> {
  try {
    const cmdline = await fs.readFile(`/proc/${pid}/cmdline`, 'utf8');
    const args = cmdline.split('\0');
    if (cmdline !== '' && !(typeof matches === 'string' ? args.join(' ').includes(matches) : matches(args))) return true;
    const threads = await fs.readdir(`/proc/${pid}/task`);
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return threads.length <= 1 && (state === 'Z' || state === 'X');
  } catch {
    return true;
  }
}

/** Kills every process of the account (SIGKILL); none is fine. Only for a server's own account. */
export async function killProcessesOf(account: string): Promise<void> {
  if (!runningAsRoot()) return;
  // pkill exits 1 when nothing matched.
  await run('pkill', ['-KILL', '-u', account]).catch(() => undefined);
  await waitFor(
    async () =>
      !(await run('pgrep', ['-u', account]).then(
        () => true,
        () => false,
      )),
    5_000,
    50,
  );
}

export async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file, fsConstants.F_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * A lock held across processes (the API and the worker both manage servers): a file created
 * exclusively, holding the owner's pid; a lock whose owner died is taken over.
 */
export async function withFileLock<T>(file: string, fn: () => Promise<T>, timeoutMs = 180_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  const token = `${process.pid}\n${Date.now()}-${Math.random()}`;
  for (;;) {
    try {
      await fs.writeFile(file, token, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const owner = await readPidFile(file);
      if (owner !== null && owner !== process.pid && !(await processAlive(owner, ''))) {
        await fs.rm(file, { force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`timed out waiting for lock ${path.basename(file)}`);
      await sleep(50);
    }
  }
  try {
    return await fn();
  } finally {
    // Only remove our own lock (it may have been taken over after a very long stall).
    const content = await fs.readFile(file, 'utf8').catch(() => null);
    if (content === token) await fs.rm(file, { force: true });
  }
}

/** A JSON file's content, or null when it is missing or unreadable (a server's settings before its first start). */
export function readJsonFile<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

/**
 * The daemon of a data directory, as a later process finds it: the settings it was started with
 * (`settingsFile`) and its pid, when the pidfile names a live process that `isOurs` recognises as
 * this directory's server. null otherwise (never started, stopped, or its pid reused by another program).
 */
export async function liveDaemon<S>(
  dataDir: string,
  files: { pidfile: string; settingsFile: string },
  isOurs: (args: string[]) => boolean,
): Promise<{ settings: S; pid: number } | null> {
  const settings = readJsonFile<S>(path.join(dataDir, files.settingsFile));
  const pid = await readPidFile(path.join(dataDir, files.pidfile));
  if (!settings || pid === null || !(await processAlive(pid, isOurs))) return null;
  return { settings, pid };
}
