/**
 * The operating-system side of running database servers on this machine: the accounts they run
 * as, commands run to completion or detached, process liveness by pidfile, free loopback ports,
 * lock files shared by the API and worker processes, and reading the tail of a log file.
 *
 * Nothing here ever receives a password: secrets go to the engines over their sockets.
 */
import { spawn } from 'node:child_process';
import { constants as fsConstants, promises as fs } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface Account {
  name: string;
  uid: number;
  gid: number;
}

/** Who this process is. */
export function currentAccount(): Account {
  const info = os.userInfo();
  return { name: info.username, uid: info.uid, gid: info.gid };
}

export const runningAsRoot = (): boolean => process.getuid?.() === 0;

/**
 * The account a database server runs as: the named system account when this process is root
 * (PostgreSQL refuses to run as root, and neither server should), else this process's own.
 */
export async function serverAccount(name: string): Promise<Account> {
  if (!runningAsRoot()) return currentAccount();
  const { stdout } = await run('getent', ['passwd', name]).catch(() => {
    throw new Error(`system account "${name}" is missing (scripts/install/dbaas.sh creates it with the packages)`);
  });
  const [, , uid, gid] = stdout.trim().split(':');
  return { name, uid: Number(uid), gid: Number(gid) };
}

export interface RunOptions {
  as?: Account;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs?: number;
  /**
   * In its own session: whatever it leaves running (pg_ctl's postmaster) is not in this process's
   * group, so a Ctrl-C on the API or worker does not reach it.
   */
  detached?: boolean;
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

const asIds = (as?: Account) => (as && runningAsRoot() && as.uid !== 0 ? { uid: as.uid, gid: as.gid } : {});
const MAX_OUTPUT = 16 * 1024 * 1024;

/** Runs a command to completion; rejects with CommandError on a non-zero exit. */
export function run(command: string, args: string[], opts: RunOptions = {}): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...asIds(opts.as),
      env: opts.env ?? process.env,
      cwd: opts.cwd,
      detached: opts.detached ?? false,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    const collect = (into: Buffer[]) => (chunk: Buffer) => {
      size += chunk.length;
      if (size <= MAX_OUTPUT) into.push(chunk);
    };
    child.stdout.on('data', collect(out));
    child.stderr.on('data', collect(err));
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
 * Starts a command in its own session, detached from this process: it outlives the API or worker
 * (and a Ctrl-C sent to their process group). Output goes to `outputFile` when given.
 */
export async function spawnDetached(command: string, args: string[], opts: RunOptions & { outputFile?: string } = {}): Promise<number> {
  const out = opts.outputFile ? await fs.open(opts.outputFile, 'a', 0o640) : null;
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
    child.unref();
    return pid;
  } finally {
    await out?.close();
  }
}

/** Whether `pid` is a live process whose command line contains `marker` (guards against a reused pid). */
export async function processAlive(pid: number, marker: string): Promise<boolean> {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: alive but someone else's; only root runs these checks across accounts.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    // A zombie has exited; its parent has not reaped it yet.
    if (/^\d+ \(.*\) Z /.test(stat)) return false;
    const cmdline = (await fs.readFile(`/proc/${pid}/cmdline`, 'utf8')).replace(/\0/g, ' ');
    return cmdline.includes(marker);
  } catch {
    return false;
  }
}

/** The first line of a pidfile as a number, or null when there is none. */
export async function readPidFile(file: string): Promise<number | null> {
  try {
    const pid = Number((await fs.readFile(file, 'utf8')).split('\n')[0].trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}

export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, intervalMs = 100): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return true;
    if (Date.now() >= deadline) return false;
    await sleep(intervalMs);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A loopback TCP port nobody listens on right now (the OS picks it). */
export function freeLoopbackPort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Whether something accepts TCP connections on host:port. */
export function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
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
 * Gives `dir` and everything in it to `account`. Never follows a symbolic link (lchown, and a link
 * to a directory is not descended into): root must not hand a file outside the tree to a server.
 */
export async function chownTree(dir: string, account: Account): Promise<void> {
  if (!runningAsRoot()) return;
  await fs.lchown(dir, account.uid, account.gid);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(p, account);
    else await fs.lchown(p, account.uid, account.gid);
  }
}

/** Creates `dir` (mode 0700) for `account` alone: owned by it when this process is root. */
export async function ownedDirectory(dir: string, account: Account): Promise<void> {
  await fs.mkdir(dir, { recursive: true, mode: 0o700 });
  await fs.chmod(dir, 0o700);
  if (runningAsRoot()) await fs.lchown(dir, account.uid, account.gid);
}

/** Kills every process of the account (SIGKILL); none is fine. Only for an instance's own account. */
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

/**
 * A lock held across processes (the API and the worker both manage instances): a file created
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

/**
 * The last lines of a text file, reading backwards in chunks so a large log costs only its tail.
 * `enough` decides when the lines read so far suffice (entries may span several lines).
 */
export async function tailLines(
  file: string,
  enough: (lines: string[]) => boolean,
  maxBytes = 8 * 1024 * 1024,
): Promise<{ lines: string[]; fromStart: boolean }> {
  // Not through a symbolic link: the file is in a directory the server's account writes, and this
  // process (root) must not read another instance's log, or any file, on its behalf.
  const handle = await fs.open(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  try {
    const { size } = await handle.stat();
    let position = size;
    let tail = Buffer.alloc(0);
    let chunk = 64 * 1024;
    while (position > 0 && size - position < maxBytes) {
      const length = Math.min(chunk, position);
      position -= length;
      const buf = Buffer.alloc(length);
      await handle.read(buf, 0, length, position);
      // Decoded as a whole: a chunk boundary may split a multi-byte character.
      tail = Buffer.concat([buf, tail]);
      const lines = tail.toString('utf8').split('\n');
      // The first line may be cut in the middle; it only counts once the file's start is reached.
      if (position > 0 && enough(lines.slice(1))) return { lines: lines.slice(1).filter((l) => l !== ''), fromStart: false };
      chunk *= 2;
    }
    const text = tail.toString('utf8');
    return { lines: text.split('\n').filter((l) => l !== ''), fromStart: position === 0 };
  } finally {
    await handle.close();
  }
}
